//! `kernel` ↔ `KernelThunk`: launch shape and arguments (buffers with their access, typed
//! immediates).

use super::super::fields::{Loc, dim3_from, scalar_from, slice_from};
use super::super::fields::{access_to, dim3_to, scalar_to, slice_to};
use crate::{ProtoError, pb};
use xthunk_core::ir::{Access, KernelArg, KernelThunk};

pub(super) fn to(k: &KernelThunk) -> pb::KernelThunk {
    pb::KernelThunk {
        module: k.module.clone(),
        name: k.name.clone(),
        grid: dim3_to(&k.grid),
        block: dim3_to(&k.block),
        shared_mem: k.shared_mem,
        args: k
            .args
            .iter()
            .map(|a| {
                use pb::kernel_arg::Kind as ArgKind;
                let kind = match a {
                    KernelArg::Buffer { slice, access } => ArgKind::Buffer(pb::BufferArg {
                        slice: slice_to(slice),
                        access: access_to(*access) as i32,
                    }),
                    KernelArg::Scalar(s) => ArgKind::Scalar(scalar_to(s)),
                };
                pb::KernelArg { kind: Some(kind) }
            })
            .collect(),
    }
}

pub(super) fn from(k: &pb::KernelThunk, loc: &Loc<'_>) -> Result<KernelThunk, ProtoError> {
    use pb::kernel_arg::Kind;
    let mut args = Vec::with_capacity(k.args.len());
    for (i, a) in k.args.iter().enumerate() {
        let arg = match &a.kind {
            Some(Kind::Buffer(b)) => {
                let slice = slice_from(&b.slice, loc, &format!("args[{i}].slice"))?;
                let access = match pb::Access::try_from(b.access) {
                    Ok(pb::Access::Read) => Access::Read,
                    Ok(pb::Access::Write) => Access::Write,
                    Ok(pb::Access::ReadWrite) => Access::ReadWrite,
                    Ok(pb::Access::Unspecified) => {
                        return Err(loc.invalid(
                            format!("args[{i}].access"),
                            "the access is unspecified (expected ACCESS_READ, ACCESS_WRITE or ACCESS_READ_WRITE)",
                        ));
                    }
                    Err(_) => {
                        return Err(loc.invalid(
                            format!("args[{i}].access"),
                            format!("unknown access value {}", b.access),
                        ));
                    }
                };
                KernelArg::Buffer { slice, access }
            }
            Some(Kind::Scalar(s)) => {
                KernelArg::Scalar(scalar_from(s, loc, &format!("args[{i}].scalar"))?)
            }
            None => {
                return Err(loc.invalid(
                    format!("args[{i}]"),
                    "no argument kind is set (expected buffer or scalar)",
                ));
            }
        };
        args.push(arg);
    }
    Ok(KernelThunk {
        module: k.module.clone(),
        name: k.name.clone(),
        grid: dim3_from(&k.grid, loc, "grid")?,
        block: dim3_from(&k.block, loc, "block")?,
        shared_mem: k.shared_mem,
        args,
    })
}
