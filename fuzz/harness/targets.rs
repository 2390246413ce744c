//! What one input of each target runs, and the properties checked besides "no panic":
//!
//! - `decode`: bytes → [`xthunk_proto::decode`] (decode, convert, validate). A program that
//!   loads re-encodes to bytes that load to the same program (bit for bit), and its text
//!   form parses back to the same program.
//! - `text`: text → [`xthunk_proto::parse_text`]; a program that loads round-trips through
//!   the binary format and the text format bit for bit.
//! - `npy`: a selector byte and a file → the CLI's `.npy` reader; what it accepts has exactly
//!   the parameter's byte size (and bools are 0 or 1).
//! - `host`: bytes → decode → (within [`super::bounds`]) load on a host device and execute
//!   twice with a deadline; outputs have the signature's sizes.
//!
//! A violated property is returned as `Err`; a panic propagates (the runner catches it).

use super::bounds;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use xthunk_core::backend::Device;
use xthunk_core::executor::{ExecuteOptions, LoadedExecutable};
use xthunk_core::ir::{DType, Executable, TensorSpec};
use xthunk_proto::ProtoError;

pub use super::outcome::Outcome;

/// A coarse error class: the variant and the field without indices.
fn class_of(e: &ProtoError) -> String {
    let variant = match e {
        ProtoError::Decode { .. } => "decode",
        ProtoError::TextParse { .. } => "text",
        ProtoError::Invalid { .. } => "invalid",
        ProtoError::Validation(_) => "validation",
        _ => "other",
    };
    let field: String = e
        .field()
        .unwrap_or("")
        .chars()
        .filter(|c| !c.is_ascii_digit())
        .collect();
    let message = match e {
        ProtoError::Validation(v) => v.message.clone(),
        ProtoError::Invalid { message, .. } | ProtoError::TextParse { message, .. } => {
            message.clone()
        }
        other => other
            .to_string()
            .rsplit(": ")
            .next()
            .unwrap_or("")
            .to_string(),
    };
    format!("{variant}/{field}/{}", shape_of(&message, 3))
}

/// The shape of an error message: its first `words` plain lowercase words (names, numbers
/// and quoted values left out, so that errors about different values of one field are one
/// class).
pub fn shape_of(message: &str, words: usize) -> String {
    message
        .split_whitespace()
        .filter(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_lowercase()))
        .take(words)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The binary encoding, the comparison of programs that holds for NaN immediates too.
fn same(a: &Executable, b: &Executable) -> bool {
    xthunk_proto::encode(a) == xthunk_proto::encode(b)
}

/// The round trips every loaded program must survive.
pub fn round_trips(exe: &Executable) -> Result<(), String> {
    let bytes = xthunk_proto::encode(exe);
    match xthunk_proto::decode(&bytes) {
        Ok(back) if same(exe, &back) => {}
        Ok(_) => return Err("binary round trip changed the program".into()),
        Err(e) => return Err(format!("re-encoded program does not load: {e}")),
    }
    let text = xthunk_proto::to_text(exe);
    match xthunk_proto::parse_text(&text) {
        Ok(back) if same(exe, &back) => Ok(()),
        Ok(back) if same(&canonical_nans(exe), &canonical_nans(&back)) => {
            Err("text round trip loses NaN payloads".into())
        }
        Ok(_) => Err("text round trip changed the program".into()),
        Err(e) => Err(format!(
            "the text form of a loaded program does not load: {e}"
        )),
    }
}

/// `exe` with every NaN immediate replaced by the canonical quiet NaN.
fn canonical_nans(exe: &Executable) -> Executable {
    use super::program::{Knob, visit};
    use xthunk_core::ir::Scalar;
    let mut exe = exe.clone();
    visit(&mut exe, &mut |k| {
        if let Knob::Scalar(s) = k {
            match s {
                Scalar::F32(v) if v.is_nan() => *v = f32::NAN,
                Scalar::F64(v) if v.is_nan() => *v = f64::NAN,
                _ => {}
            }
        }
    });
    exe
}

fn rejected(e: &ProtoError) -> Result<Outcome, String> {
    let line = e.to_string();
    if line.trim().is_empty() {
        return Err(format!("empty error message ({e:?})"));
    }
    Ok(Outcome::Rejected { class: class_of(e) })
}

/// The `decode` target.
pub fn decode(bytes: &[u8]) -> Result<Outcome, String> {
    match xthunk_proto::decode(bytes) {
        Ok(exe) => {
            round_trips(&exe)?;
            Ok(Outcome::Accepted { ran: false })
        }
        Err(e) => rejected(&e),
    }
}

/// The `text` target (input bytes that are not UTF-8 are read lossily, as a file would
/// not be; the parser still sees every shape of text).
pub fn text(bytes: &[u8]) -> Result<Outcome, String> {
    let text = String::from_utf8_lossy(bytes);
    match xthunk_proto::parse_text(&text) {
        Ok(exe) => {
            round_trips(&exe)?;
            Ok(Outcome::Accepted { ran: false })
        }
        Err(e) => rejected(&e),
    }
}

/// The CLI's `.npy` reader: the parameter, the file, the bytes or an error.
pub type NpyReader<E> = dyn Fn(&TensorSpec, &Path) -> Result<Vec<u8>, E>;

/// Rewrites `path` in place without truncating it to zero first (ext4 flushes a file that was
/// truncated and rewritten when it is closed, which would make each case wait for the disk).
fn write_scratch(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    f.write_all(data)?;
    f.set_len(data.len() as u64)
}

/// The `npy` target. `read` is the CLI's reader (it reads a file: `scratch` is the path the
/// input is written to).
pub fn npy<E: std::fmt::Display>(
    input: &[u8],
    scratch: &Path,
    read: &NpyReader<E>,
) -> Result<Outcome, String> {
    let (spec, file) = super::npy::spec_of(input);
    write_scratch(scratch, file)
        .map_err(|e| format!("harness: cannot write {}: {e}", scratch.display()))?;
    match read(&spec, scratch) {
        Ok(data) => {
            let want = spec
                .byte_size()
                .ok_or("accepted a file for a parameter whose size overflows")?;
            if data.len() as u64 != want {
                return Err(format!(
                    "accepted {} bytes for a parameter of {want}",
                    data.len()
                ));
            }
            if spec.dtype == DType::Pred && data.iter().any(|b| *b > 1) {
                return Err("accepted a bool array with a value other than 0 or 1".into());
            }
            Ok(Outcome::Accepted { ran: true })
        }
        Err(e) => {
            let line = e.to_string().replace(&scratch.display().to_string(), "");
            if line.trim().is_empty() {
                return Err("empty error message".into());
            }
            Ok(Outcome::Rejected {
                class: format!(
                    "npy/{}",
                    shape_of(line.split_once(": ").map_or(&line[..], |m| m.1), 8)
                ),
            })
        }
    }
}

/// How long one host execution may take before it must fail with a deadline error.
pub const HOST_DEADLINE: Duration = Duration::from_millis(250);

/// A fresh host device for the host target.
pub fn host_device() -> Result<Arc<dyn Device>, String> {
    let backend = xthunk_core::host::HostBackend::with_devices(1);
    xthunk_core::backend::Backend::device(&backend, 0).map_err(|e| format!("no host device: {e}"))
}

/// Parameter bytes derived from the input (small values: mostly in range for every dtype).
fn parameter_data(spec_size: u64, salt: u8) -> Vec<u8> {
    (0..spec_size)
        .map(|i| ((i as u8).wrapping_mul(37) ^ salt) & 0x3f)
        .collect()
}

/// The `host` target.
pub fn host(bytes: &[u8], device: &Arc<dyn Device>) -> Result<Outcome, String> {
    let exe = match xthunk_proto::decode(bytes) {
        Ok(exe) => exe,
        Err(e) => return rejected(&e),
    };
    if bounds::check(&exe).is_err() {
        return Ok(Outcome::Skipped);
    }
    let sizes: Vec<u64> = exe
        .signature
        .parameters
        .iter()
        .map(|p| {
            exe.allocations
                .get(p.allocation as usize)
                .map_or(0, |a| a.size)
        })
        .collect();
    let outputs: Vec<u64> = exe
        .signature
        .outputs
        .iter()
        .map(|o| {
            exe.allocations
                .get(o.allocation as usize)
                .map_or(0, |a| a.size)
        })
        .collect();
    let loaded = match LoadedExecutable::load(device.clone(), exe) {
        Ok(l) => l,
        Err(e) => {
            let class = shape_of(&e.to_string(), 6);
            return Ok(Outcome::Rejected {
                class: format!("load/{class}"),
            });
        }
    };
    let salt = bytes.iter().fold(0u8, |a, b| a.wrapping_add(*b));
    let data: Vec<Vec<u8>> = sizes.iter().map(|s| parameter_data(*s, salt)).collect();
    let inputs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    let opts = ExecuteOptions {
        deadline: Some(HOST_DEADLINE),
        ..Default::default()
    };
    let mut ran = false;
    // Twice: the second execution reuses the pooled state (temps, recorded command buffers).
    for _ in 0..2 {
        let start = std::time::Instant::now();
        let result = loaded.run_with_host_data(&inputs, &opts);
        let took = start.elapsed();
        if took > HOST_DEADLINE * 10 + Duration::from_secs(5) {
            return Err(format!(
                "an execution with a deadline of {HOST_DEADLINE:?} took {took:?}"
            ));
        }
        match result {
            Ok(out) => {
                let got: Vec<u64> = out.iter().map(|o| o.len() as u64).collect();
                if got != outputs {
                    return Err(format!(
                        "outputs of {got:?} bytes, the signature says {outputs:?}"
                    ));
                }
                ran = true;
            }
            Err(e) => {
                if e.to_string().trim().is_empty() {
                    return Err("empty execution error".into());
                }
                break;
            }
        }
    }
    Ok(Outcome::Accepted { ran })
}
