//! `execution_seed`: writes a u64 that differs from one execution of a loaded program to the
//! next, the seed of the random numbers a program draws without a state of its own
//! (StableHLO's `rng`).

use super::kind::{Checker, Nested, ThunkKind, uses_line, write};
use crate::ir::error::{ValidationError, err};
use crate::ir::{BufferUse, Slice, ThunkPath};

/// Writes the execution's seed as a u64 into `dst` (8 bytes). Execution `n` (counted from 0)
/// of a loaded program gets a fixed function of `n` — the same on every rank of an SPMD
/// run, the same sequence after every load — so programs stay reproducible while each
/// execution draws new numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ExecutionSeedThunk {
    pub dst: Slice,
}

impl ThunkKind for ExecutionSeedThunk {
    fn name(&self) -> &'static str {
        "execution_seed"
    }

    fn buffer_uses(&self) -> Vec<BufferUse> {
        vec![write(self.dst)]
    }

    fn validate(&self, cx: &mut dyn Checker, path: &ThunkPath) -> Result<(), ValidationError> {
        let dst = &self.dst;
        cx.slice(dst, path, "dst", true)?;
        if dst.size != 8 {
            return Err(err(
                path,
                "dst",
                format!(
                    "execution_seed writes a u64 (8 bytes), the slice has {}",
                    dst.size
                ),
            ));
        }
        Ok(())
    }

    fn describe(&self) -> String {
        uses_line(self)
    }
}

impl<T> Nested<T> for ExecutionSeedThunk {}

/// The seed of execution `n`: splitmix64's output function of `n`, so consecutive
/// executions get unrelated keys.
pub fn execution_seed(n: u64) -> u64 {
    let mut z = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
