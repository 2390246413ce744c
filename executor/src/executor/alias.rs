//! Input–output aliases at load and at each execution: which allocations each alias joins,
//! whether the program can write the output into the parameter's own buffer (every use of the
//! parameter comes before the first use of the output, in program order), the resource that
//! keeps their uses in that order on any stream, and what an execution binds.
//!
//! The rule an execution follows, per alias:
//! - the caller passes one buffer as both the parameter and the output (donation): the output
//!   is written there. Where the program could not write it in place, the parameter's bytes
//!   are first copied into a buffer of the pooled execution state, which the program then
//!   reads (one device copy, no allocation after the first execution);
//! - the caller passes two buffers: the output's starts as a copy of the parameter's (XLA's
//!   semantics of an alias that was not donated), then the program runs.

use super::graph::NodeUses;
use crate::backend::{Buffer, Device, DevicePtr, Stream};
use crate::error::Result;
use crate::ir::{Executable, MemorySpace};

/// Resource ids of aliases: `ALIAS_RESOURCE + k` for `exe.aliases[k]`.
const ALIAS_RESOURCE: u64 = 0xA11A_5000_0000_0000;

/// One alias as the executor sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct AliasPlan {
    /// The parameter's and the output's numbers in the signature.
    pub(super) parameter: u32,
    pub(super) output: u32,
    /// Their allocations.
    pub(super) parameter_allocation: u32,
    pub(super) output_allocation: u32,
    pub(super) size: u64,
    /// The parameter's alignment and memory space (for a copy of its bytes).
    alignment: u64,
    space: MemorySpace,
    /// The program writes the output only after its last use of the parameter (in order:
    /// see [`add_resources`]), so a donated buffer needs no copy.
    pub(super) in_place: bool,
}

/// The aliases of `exe` (a verified program).
fn pairs(exe: &Executable) -> impl Iterator<Item = (u32, u32, u32, u32)> + '_ {
    let sig = &exe.signature;
    exe.aliases.iter().filter_map(|a| {
        let p = sig.parameters.get(a.parameter as usize)?;
        let o = sig.outputs.get(a.output as usize)?;
        Some((a.parameter, a.output, p.allocation, o.allocation))
    })
}

/// Gives every node that uses an aliased parameter or output the alias's resource, so that
/// their uses keep program order whatever streams they go on.
pub(super) fn add_resources(exe: &Executable, uses: &mut [NodeUses]) {
    for (k, (_, _, pa, oa)) in pairs(exe).enumerate() {
        let r = ALIAS_RESOURCE + k as u64;
        for u in uses.iter_mut() {
            if u.buffers
                .iter()
                .any(|b| b.slice.allocation == pa || b.slice.allocation == oa)
            {
                u.resources.push(r);
            }
        }
    }
}

/// The aliases of `exe` whose nodes, in program order, use `uses`.
pub(super) fn plan(exe: &Executable, uses: &[NodeUses]) -> Vec<AliasPlan> {
    pairs(exe)
        .map(|(parameter, output, pa, oa)| {
            let touches = |u: &NodeUses, a: u32| u.buffers.iter().any(|b| b.slice.allocation == a);
            let last_param = uses.iter().rposition(|u| touches(u, pa));
            let first_output = uses.iter().position(|u| touches(u, oa));
            let in_place = match (last_param, first_output) {
                (Some(p), Some(o)) => p < o,
                _ => true,
            };
            let alloc = exe.allocations.get(pa as usize);
            AliasPlan {
                parameter,
                output,
                parameter_allocation: pa,
                output_allocation: oa,
                size: alloc.map_or(0, |a| a.size),
                alignment: alloc.map_or(256, |a| a.alignment),
                space: alloc.map_or(MemorySpace::Device, |a| a.memory_space),
                in_place,
            }
        })
        .collect()
}

/// Whether the caller donated alias `a`'s parameter: one buffer for both.
pub(super) fn donated(a: &AliasPlan, table: &[DevicePtr]) -> bool {
    table[a.parameter_allocation as usize] == table[a.output_allocation as usize]
}

/// Binds every alias for one execution (see the module documentation): copies a parameter
/// into the output (not donated) or into `shadows`, the execution state's own buffers
/// (donated but not in place), on `stream`, the state's first, and waits for the copies.
/// Returns how many copies it made.
pub(super) fn bind(
    device: &dyn Device,
    aliases: &[AliasPlan],
    stream: &dyn Stream,
    shadows: &mut Vec<Option<Buffer>>,
    table: &mut [DevicePtr],
) -> Result<usize> {
    let mut copies = 0;
    for (k, a) in aliases.iter().enumerate() {
        let (pa, oa) = (
            a.parameter_allocation as usize,
            a.output_allocation as usize,
        );
        let dst = if !donated(a, table) {
            table[oa]
        } else if a.in_place {
            continue;
        } else {
            if shadows.len() <= k {
                shadows.resize_with(k + 1, || None);
            }
            let shadow = match &shadows[k] {
                Some(b) => b.ptr(),
                None => {
                    let b = device.allocate(a.size, a.alignment, a.space)?;
                    let p = b.ptr();
                    shadows[k] = Some(b);
                    p
                }
            };
            let src = table[pa];
            table[pa] = shadow;
            if a.size > 0 {
                stream.copy(src, shadow, a.size)?;
                copies += 1;
            }
            continue;
        };
        if a.size > 0 {
            stream.copy(table[pa], dst, a.size)?;
            copies += 1;
        }
    }
    if copies > 0 {
        stream.synchronize()?;
    }
    Ok(copies)
}
