//! The seed corpus: the example programs (`examples/*.txtpb`) and the fuzzing seeds
//! (`fuzz/seeds/*.txtpb`: small programs covering what the examples do not, sized for the host
//! target), embedded at build time, as text and as binary; and the growing pools of a run.

use super::rng::Rng;
use xthunk_core::ir::Executable;

/// Every seed program: (file name, text).
pub const SEEDS: &[(&str, &str)] = &[
    (
        "examples/custom_call.txtpb",
        include_str!("../../examples/custom_call.txtpb"),
    ),
    (
        "examples/dp_step.txtpb",
        include_str!("../../examples/dp_step.txtpb"),
    ),
    (
        "examples/exchange.txtpb",
        include_str!("../../examples/exchange.txtpb"),
    ),
    (
        "examples/mlp.txtpb",
        include_str!("../../examples/mlp.txtpb"),
    ),
    (
        "examples/permute_ring.txtpb",
        include_str!("../../examples/permute_ring.txtpb"),
    ),
    (
        "examples/transformer.txtpb",
        include_str!("../../examples/transformer.txtpb"),
    ),
    (
        "examples/while_async.txtpb",
        include_str!("../../examples/while_async.txtpb"),
    ),
    (
        "fuzz/seeds/control.txtpb",
        include_str!("../seeds/control.txtpb"),
    ),
    (
        "fuzz/seeds/mlp_small.txtpb",
        include_str!("../seeds/mlp_small.txtpb"),
    ),
];

/// A seed program, parsed.
#[derive(Clone, Debug)]
pub struct Seed {
    pub name: &'static str,
    pub text: &'static str,
    pub exe: Executable,
    pub binary: Vec<u8>,
}

/// The seeds, parsed and encoded. A seed that does not load is a defect of the corpus: the
/// error names it.
pub fn seeds() -> Result<Vec<Seed>, String> {
    SEEDS
        .iter()
        .map(|(name, text)| {
            let exe = xthunk_proto::parse_text(text).map_err(|e| format!("{name}: {e}"))?;
            let binary = xthunk_proto::encode(&exe);
            Ok(Seed {
                name,
                text,
                exe,
                binary,
            })
        })
        .collect()
}

/// A bounded pool of inputs that grows as a run finds new behaviour; a full pool replaces a
/// random entry (the seeds, at the front, stay).
pub struct Pool<T> {
    pub items: Vec<T>,
    fixed: usize,
    cap: usize,
}

impl<T: Clone> Pool<T> {
    pub fn new(seeds: Vec<T>, cap: usize) -> Self {
        let fixed = seeds.len();
        Pool {
            items: seeds,
            fixed,
            cap: cap.max(fixed + 1),
        }
    }

    pub fn add(&mut self, rng: &mut Rng, item: T) {
        if self.items.len() < self.cap {
            self.items.push(item);
        } else {
            let i = self.fixed + rng.below(self.items.len() - self.fixed);
            self.items[i] = item;
        }
    }

    pub fn pick(&self, rng: &mut Rng) -> Option<&T> {
        rng.pick(&self.items)
    }

    /// One of the seeds the pool started with.
    pub fn pick_seed(&self, rng: &mut Rng) -> Option<&T> {
        rng.pick(&self.items[..self.fixed])
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }
}
