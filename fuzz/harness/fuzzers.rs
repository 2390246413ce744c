//! The generators of the four targets: which pool a case starts from, which mutations it
//! gets (bytes, wire fields, program structure, text, `.npy` headers), and what each outcome
//! adds to the pools (programs that load feed the structure-aware mutations; inputs refused
//! with an error class not seen before feed the byte and text mutations).

use super::corpus::{Pool, Seed};
use super::rng::Rng;
use super::runner::Fuzzer;
use super::targets::{self, Outcome};
use super::{bounds, bytes, npy, order, program, text, wire};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use xthunk_core::backend::Device;
use xthunk_core::ir::{Executable, TensorSpec};

const POOL: usize = 512;

/// One to four structure-aware mutations (fields mostly; order and nesting, and huge slices
/// with their allocations, sometimes).
pub fn mutate_program(rng: &mut Rng, exe: &mut Executable, donor: &Executable) {
    for _ in 0..rng.range(1, 4) {
        match rng.below(16) {
            0..=11 => program::mutate_knob(rng, exe),
            12 => program::resize_together(rng, exe),
            _ => order::mutate_order(rng, exe, donor),
        }
    }
}

/// The `decode` target's generator.
pub struct DecodeFuzzer {
    valid: Pool<Executable>,
    inputs: Pool<Vec<u8>>,
    classes: BTreeSet<String>,
}

impl DecodeFuzzer {
    pub fn new(seeds: &[Seed]) -> Self {
        DecodeFuzzer {
            valid: Pool::new(seeds.iter().map(|s| s.exe.clone()).collect(), POOL),
            inputs: Pool::new(seeds.iter().map(|s| s.binary.clone()).collect(), POOL),
            classes: BTreeSet::new(),
        }
    }
}

fn pick_exe(pool: &Pool<Executable>, rng: &mut Rng) -> Executable {
    pool.pick(rng).cloned().unwrap_or_else(|| Executable {
        abi_version: 1,
        name: String::new(),
        allocations: vec![],
        modules: vec![],
        entry: vec![],
        signature: Default::default(),
        aliases: vec![],
    })
}

impl Fuzzer for DecodeFuzzer {
    fn generate(&mut self, rng: &mut Rng) -> Vec<u8> {
        let roll = rng.below(100);
        if roll < 60 {
            let mut data = self.inputs.pick(rng).cloned().unwrap_or_default();
            let other = self.inputs.pick(rng).cloned().unwrap_or_default();
            if roll < 25 || !wire::mutate(rng, &mut data, &other) {
                bytes::havoc(rng, &mut data, &other);
            }
            return data;
        }
        let mut exe = pick_exe(&self.valid, rng);
        let donor = pick_exe(&self.valid, rng);
        mutate_program(rng, &mut exe, &donor);
        let mut data = xthunk_proto::encode(&exe);
        if rng.chance(1, 8) {
            let other = self.inputs.pick(rng).cloned().unwrap_or_default();
            wire::mutate(rng, &mut data, &other);
        }
        data
    }

    fn run(&mut self, input: &[u8]) -> Result<Outcome, String> {
        targets::decode(input)
    }

    fn learn(&mut self, rng: &mut Rng, input: &[u8], outcome: &Outcome) {
        match outcome {
            Outcome::Accepted { .. } => {
                if let Ok(exe) = xthunk_proto::decode(input) {
                    self.valid.add(rng, exe);
                }
                // Bytes of programs that load feed the byte and wire mutations too: their
                // mutants get past decoding more often.
                if rng.chance(1, 4) {
                    self.inputs.add(rng, input.to_vec());
                }
            }
            Outcome::Rejected { class } => {
                if self.classes.insert(class.clone()) {
                    self.inputs.add(rng, input.to_vec());
                }
            }
            Outcome::Skipped => {}
        }
    }

    fn reductions(&self, input: &[u8]) -> Vec<Vec<u8>> {
        wire::reductions(input)
    }

    fn stats(&self) -> String {
        format!(
            "pools: {} programs, {} inputs",
            self.valid.len(),
            self.inputs.len()
        )
    }
}

/// The `text` target's generator.
pub struct TextFuzzer {
    valid: Pool<Executable>,
    texts: Pool<String>,
    classes: BTreeSet<String>,
}

impl TextFuzzer {
    pub fn new(seeds: &[Seed]) -> Self {
        let mut texts: Vec<String> = seeds.iter().map(|s| s.text.to_string()).collect();
        texts.extend(seeds.iter().map(|s| xthunk_proto::to_text(&s.exe)));
        TextFuzzer {
            valid: Pool::new(seeds.iter().map(|s| s.exe.clone()).collect(), POOL),
            texts: Pool::new(texts, POOL),
            classes: BTreeSet::new(),
        }
    }
}

impl Fuzzer for TextFuzzer {
    fn generate(&mut self, rng: &mut Rng) -> Vec<u8> {
        let roll = rng.below(100);
        let other = self.texts.pick(rng).cloned().unwrap_or_default();
        let mut t = if roll < 50 {
            let mut t = self.texts.pick(rng).cloned().unwrap_or_default();
            text::mutate(rng, &mut t, &other);
            t
        } else {
            let mut exe = pick_exe(&self.valid, rng);
            let donor = pick_exe(&self.valid, rng);
            if roll < 80 {
                mutate_program(rng, &mut exe, &donor);
            }
            let mut t = xthunk_proto::to_text(&exe);
            if roll >= 65 {
                text::mutate(rng, &mut t, &other);
            }
            t
        };
        t.truncate(t.len().min(bytes::MAX_LEN));
        t.into_bytes()
    }

    fn run(&mut self, input: &[u8]) -> Result<Outcome, String> {
        targets::text(input)
    }

    fn learn(&mut self, rng: &mut Rng, input: &[u8], outcome: &Outcome) {
        let t = String::from_utf8_lossy(input).into_owned();
        match outcome {
            Outcome::Accepted { .. } => {
                if let Ok(exe) = xthunk_proto::parse_text(&t) {
                    self.valid.add(rng, exe);
                }
                if rng.chance(1, 4) {
                    self.texts.add(rng, t);
                }
            }
            Outcome::Rejected { class } => {
                if self.classes.insert(class.clone()) {
                    self.texts.add(rng, t);
                }
            }
            Outcome::Skipped => {}
        }
    }

    fn reductions(&self, input: &[u8]) -> Vec<Vec<u8>> {
        text::reductions(&String::from_utf8_lossy(input))
            .into_iter()
            .map(String::into_bytes)
            .collect()
    }

    fn show(&self, input: &[u8]) -> Option<String> {
        Some(String::from_utf8_lossy(input).into_owned())
    }

    fn stats(&self) -> String {
        format!(
            "pools: {} programs, {} texts",
            self.valid.len(),
            self.texts.len()
        )
    }
}

/// The `host` target's generator: mutated programs within [`bounds`], run on one host device.
pub struct HostFuzzer {
    valid: Pool<Executable>,
    device: Arc<dyn Device>,
}

impl HostFuzzer {
    pub fn new(seeds: &[Seed]) -> Result<Self, String> {
        let runnable: Vec<Executable> = seeds
            .iter()
            .filter(|s| bounds::check(&s.exe).is_ok())
            .map(|s| s.exe.clone())
            .collect();
        Ok(HostFuzzer {
            valid: Pool::new(runnable, POOL),
            device: targets::host_device()?,
        })
    }
}

impl Fuzzer for HostFuzzer {
    fn generate(&mut self, rng: &mut Rng) -> Vec<u8> {
        let donor = pick_exe(&self.valid, rng);
        let base = pick_exe(&self.valid, rng);
        // Execution is the point: try a few mutants for one that validates and fits the
        // bounds (the decode target covers the rest).
        let mut exe = base.clone();
        for _ in 0..6 {
            exe = base.clone();
            if rng.chance(3, 4) {
                program::mutate_knob(rng, &mut exe);
            } else {
                mutate_program(rng, &mut exe, &donor);
            }
            if bounds::check(&exe).is_err() {
                continue;
            }
            // A mutant that panics in validation is run as it is: the case reports it.
            match std::panic::catch_unwind(|| xthunk_core::verify(&exe).is_ok()) {
                Ok(false) => {}
                Ok(true) | Err(_) => break,
            }
        }
        let mut data = xthunk_proto::encode(&exe);
        if rng.chance(1, 20) {
            let other = xthunk_proto::encode(&donor);
            wire::mutate(rng, &mut data, &other);
        }
        data
    }

    fn run(&mut self, input: &[u8]) -> Result<Outcome, String> {
        targets::host(input, &self.device)
    }

    fn learn(&mut self, rng: &mut Rng, input: &[u8], outcome: &Outcome) {
        if let Outcome::Accepted { ran: true } = outcome
            && let Ok(exe) = xthunk_proto::decode(input)
        {
            self.valid.add(rng, exe);
        }
    }

    fn reductions(&self, input: &[u8]) -> Vec<Vec<u8>> {
        wire::reductions(input)
    }

    fn watches_runtime_threads(&self) -> bool {
        true
    }

    fn stats(&self) -> String {
        format!("pool: {} programs", self.valid.len())
    }
}

/// The `npy` target's generator, over the CLI's reader `read`.
pub struct NpyFuzzer<R> {
    inputs: Pool<Vec<u8>>,
    classes: BTreeSet<String>,
    scratch: PathBuf,
    read: R,
}

impl<R, E> NpyFuzzer<R>
where
    R: Fn(&TensorSpec, &Path) -> Result<Vec<u8>, E> + Send + 'static,
    E: std::fmt::Display,
{
    /// `scratch` is the file each input is written to before it is read.
    pub fn new(read: R, scratch: PathBuf) -> Self {
        NpyFuzzer {
            inputs: Pool::new(npy::seeds(), POOL),
            classes: BTreeSet::new(),
            scratch,
            read,
        }
    }
}

impl<R, E> Fuzzer for NpyFuzzer<R>
where
    R: Fn(&TensorSpec, &Path) -> Result<Vec<u8>, E> + Send + 'static,
    E: std::fmt::Display,
{
    fn generate(&mut self, rng: &mut Rng) -> Vec<u8> {
        // Half the cases start from a seed: most files the pool gains are refused ones.
        let start = if rng.chance(1, 2) {
            self.inputs.pick_seed(rng)
        } else {
            self.inputs.pick(rng)
        };
        let mut input = start.cloned().unwrap_or_default();
        let other = self.inputs.pick(rng).cloned().unwrap_or_default();
        npy::mutate(rng, &mut input, &other);
        input
    }

    fn run(&mut self, input: &[u8]) -> Result<Outcome, String> {
        targets::npy(input, &self.scratch, &self.read)
    }

    fn learn(&mut self, rng: &mut Rng, input: &[u8], outcome: &Outcome) {
        let class = match outcome {
            Outcome::Accepted { .. } => "accepted".to_string(),
            Outcome::Rejected { class } => class.clone(),
            Outcome::Skipped => return,
        };
        if self.classes.insert(class) || rng.chance(1, 64) {
            self.inputs.add(rng, input.to_vec());
        }
    }

    fn stats(&self) -> String {
        format!("pool: {} files", self.inputs.len())
    }
}
