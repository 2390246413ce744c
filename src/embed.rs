//! What the language bindings share (the C ABI in `capi/`, the Python package in `python/`):
//! programs from bytes of either encoding (as a verified [`Program`] too), the checks of a caller's array against a signature
//! entry, the clique provider of an SPMD run, and an error's cause chain as text.

use crate::program_file::{is_portable, looks_like_mlir, program_from_mlir, program_from_portable};
use crate::{Backend, BackendChoice, Device, Error, Result, Runtime};
use std::sync::Arc;
use xthunk_core::collectives::{CliqueProvider, Timeouts, UnavailableCliques};
use xthunk_core::executor::Program;
use xthunk_core::ir::{DType, Executable, TensorSpec};
use xthunk_proto::ProtoError;

/// `"auto"` or a backend's name, as the CLI's `--backend` takes it.
pub fn backend_choice(name: &str) -> BackendChoice {
    if name == "auto" {
        BackendChoice::Auto
    } else {
        BackendChoice::Named(name.to_string())
    }
}

/// Decodes, converts and validates a program given as bytes of either encoding, StableHLO
/// text (told by [`looks_like_mlir`], imported) or a StableHLO portable artifact (VHLO
/// bytecode or `jax.export`'s serialized bytes, told by [`is_portable`]): the text
/// format when the bytes are UTF-8 text that parses as one, the binary format otherwise.
/// When neither works, the error is the binary decoder's for non-text bytes and the text
/// parser's for text (a `.txtpb` with a typo should be told where the typo is).
pub fn program_from_bytes(bytes: &[u8]) -> Result<Executable, ProtoError> {
    if is_portable(bytes) {
        return program_from_portable(bytes);
    }
    match std::str::from_utf8(bytes) {
        Ok(text) if looks_like_mlir(text) => program_from_mlir(text),
        Ok(text) if looks_like_text(text) => xthunk_proto::parse_text(text),
        _ => xthunk_proto::decode(bytes),
    }
}

/// [`program_from_bytes`] as a [`Program`], what the executor loads (verified once, here).
pub fn load_program_bytes(bytes: &[u8]) -> Result<Program, ProtoError> {
    if is_portable(bytes) {
        return Ok(Program::new(program_from_portable(bytes)?)?);
    }
    match std::str::from_utf8(bytes) {
        Ok(text) if looks_like_mlir(text) => Ok(Program::new(program_from_mlir(text)?)?),
        Ok(text) if looks_like_text(text) => xthunk_proto::parse_program(text),
        _ => xthunk_proto::decode_program(bytes),
    }
}

/// Text programs start (after whitespace and `#` comments) with a field name; binary ones
/// with a field tag byte, which for the schema's first fields is a control character.
fn looks_like_text(text: &str) -> bool {
    text.lines()
        .map(str::trim_start)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .and_then(|l| l.chars().next())
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '[')
}

/// Checks a caller's array (its element type and shape) against signature entry `spec`,
/// with the parameter's name in the message; returns its byte size.
pub fn check_array(spec: &TensorSpec, dtype: DType, dims: &[u64]) -> Result<u64> {
    if dtype != spec.dtype {
        return Err(Error::InvalidArgument(format!(
            "`{}` must be {}{:?}, got an array of {dtype}",
            spec.name, spec.dtype, spec.dims
        )));
    }
    if dims != spec.dims.as_slice() {
        return Err(Error::InvalidArgument(format!(
            "`{}` must have shape {:?}, got {dims:?}",
            spec.name, spec.dims
        )));
    }
    spec.byte_size().ok_or_else(|| {
        Error::InvalidArgument(format!("`{}`: its byte size overflows 64 bits", spec.name))
    })
}

/// Devices `0..n` of `backend`, refusing a count the backend does not have.
pub fn devices(backend: &dyn Backend, n: usize) -> Result<Vec<Arc<dyn Device>>> {
    let have = backend.probe()?.devices.len();
    if n == 0 || n > have {
        return Err(Error::InvalidArgument(format!(
            "{n} devices asked of backend `{}`, which has {have}",
            backend.name()
        )));
    }
    (0..n).map(|i| backend.device(i)).collect()
}

/// The clique provider an SPMD run over `devices` of `backend` uses: the one registered with
/// the backend in `rt`. Without a collective library, collectives are off (a program without
/// collectives still runs; a collective thunk fails with the reason): the second value then
/// says why (`"{library}: {reason}"`), for the caller to tell its user.
pub fn spmd_cliques(
    rt: &Runtime,
    backend: &dyn Backend,
    devices: &[Arc<dyn Device>],
    timeouts: Timeouts,
) -> Result<(Arc<dyn CliqueProvider>, Option<String>)> {
    let Some(factory) = rt.collectives(backend.name()).cliques else {
        return Err(Error::Unsupported {
            backend: backend.name().into(),
            feature: "SPMD runs on several devices (collectives exist for host, cuda and rocm)"
                .into(),
        });
    };
    match factory.create(devices, timeouts) {
        Ok(c) => Ok((c, None)),
        Err(Error::Unavailable { backend: b, reason }) => {
            let why = format!("{b}: {reason}");
            let off = UnavailableCliques::new(b, reason, devices.len());
            Ok((Arc::new(off), Some(why)))
        }
        Err(e) => Err(e),
    }
}

/// The messages of `e`'s causes, outermost first (`e` itself not included).
pub fn causes(e: &(dyn std::error::Error + 'static)) -> Vec<String> {
    let mut out = Vec::new();
    let mut next = e.source();
    while let Some(c) = next {
        out.push(c.to_string());
        next = c.source();
    }
    out
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn both_encodings_load_from_bytes() {
        let text = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/mlp.txtpb"))
            .expect("example");
        let from_text = program_from_bytes(&text).expect("text");
        let binary = xthunk_proto::encode(&from_text);
        let from_binary = program_from_bytes(&binary).expect("binary");
        assert_eq!(from_text, from_binary);
        assert!(program_from_bytes(b"\x0a\xff\xff garbage").is_err());
        let typo = program_from_bytes(b"name: \"x\"\nallocatoins {}\n").expect_err("typo");
        assert!(typo.to_string().contains("line 2"), "{typo}");
    }

    #[test]
    fn arrays_are_checked_against_the_signature() {
        let spec = TensorSpec {
            name: "x".into(),
            dtype: DType::F32,
            dims: vec![2, 3],
            allocation: 0,
        };
        assert_eq!(check_array(&spec, DType::F32, &[2, 3]).expect("ok"), 24);
        let e = check_array(&spec, DType::F64, &[2, 3]).expect_err("dtype");
        assert!(e.to_string().contains("got an array of f64"), "{e}");
        let e = check_array(&spec, DType::F32, &[3, 2]).expect_err("shape");
        assert!(e.to_string().contains("shape [2, 3]"), "{e}");
    }
}
