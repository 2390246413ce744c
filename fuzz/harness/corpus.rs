//! The seed corpus: the example programs (`examples/*.txtpb`) and the fuzzing seeds
//! (`fuzz/seeds/*.txtpb`: small programs covering what the examples do not, sized for the host
//! target), embedded at build time, as text and as binary. The growing pools of a run are
//! `pool.rs`'s [`Pool`], re-exported here.

pub use super::pool::Pool;
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
