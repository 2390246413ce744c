//! Copies and memsets, shared by the CUDA and HIP shims.
//!
//! Each side of a copy is device memory (a live allocation: device, pinned or managed, always
//! checked) or, where the call allows it, host memory outside the emulator's allocations
//! (pageable memory, which cannot be checked). Semantics follow the CUDA documentation
//! ("API synchronization behavior"):
//!
//! - synchronous copies (`cuMemcpyHtoD`, `hipMemcpy`, …) order after the legacy stream and
//!   the blocking streams, and are complete when they return;
//! - asynchronous copies between emulated allocations (pinned included) are queued: with a
//!   lazy stream nothing happens until someone waits;
//! - an asynchronous copy *from* pageable memory stages the data at the call (the caller may
//!   reuse its buffer at once) and writes it when the stream runs;
//! - an asynchronous copy *to* pageable memory waits for the stream and is complete on return.

use crate::context::Ctx;
use crate::diag::Kind;
use crate::error::{Code, EmuError, EmuResult};
use crate::memory::Place;
use crate::stream::{Op, StreamCore, Work};
use std::sync::Arc;

/// Which kind of memory each side must be (`None`: whatever the address is).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dir {
    pub dst_device: Option<bool>,
    pub src_device: Option<bool>,
}

pub const ANY: Dir = Dir {
    dst_device: None,
    src_device: None,
};
pub const HTOD: Dir = Dir {
    dst_device: Some(true),
    src_device: Some(false),
};
pub const DTOH: Dir = Dir {
    dst_device: Some(false),
    src_device: Some(true),
};
pub const DTOD: Dir = Dir {
    dst_device: Some(true),
    src_device: Some(true),
};
pub const HTOH: Dir = Dir {
    dst_device: Some(false),
    src_device: Some(false),
};

/// Checks one side; `true` when it lies in an emulated allocation (checked again when run).
fn side(ptr: usize, len: usize, want: Option<bool>, what: &str, call: &str) -> EmuResult<bool> {
    match want {
        Some(true) => {
            crate::memory::check(ptr, len, what, call, Code::InvalidValue)?;
            Ok(true)
        }
        Some(false) => match crate::memory::locate(ptr, len, what, call, Code::InvalidValue)? {
            Place::Host => Ok(false),
            Place::Device(i) if !i.kind.device_only() => Ok(true),
            Place::Device(i) => Err(EmuError::new(
                Code::InvalidValue,
                Kind::InvalidValue,
                call,
                format!(
                    "{what}: {ptr:#x} is device memory ({}), but the call copies host memory",
                    i.describe()
                ),
            )),
        },
        None => Ok(matches!(
            crate::memory::locate(ptr, len, what, call, Code::InvalidValue)?,
            Place::Device(_)
        )),
    }
}

fn checked_sides(
    dst: usize,
    src: usize,
    len: usize,
    dir: Dir,
    call: &str,
) -> EmuResult<(bool, bool)> {
    if len > 0 && (dst == 0 || src == 0) {
        return Err(crate::error::invalid(call, "null pointer"));
    }
    let d = side(dst, len, dir.dst_device, "destination", call)?;
    let s = side(src, len, dir.src_device, "source", call)?;
    if len > 0 && dst < src.saturating_add(len) && src < dst.saturating_add(len) {
        return Err(crate::error::invalid(
            call,
            format!(
                "the {len}-byte ranges at {src:#x} (source) and {dst:#x} (destination) overlap"
            ),
        ));
    }
    Ok((d, s))
}

fn copy_op(dst: usize, src: usize, len: usize, d: bool, s: bool, call: &str) -> Op {
    Op::new(
        Work::Copy {
            dst,
            src,
            len,
            dst_checked: d,
            src_checked: s,
        },
        call,
    )
}

/// A synchronous copy (legacy-stream ordered, complete on return).
pub fn copy_sync(
    ctx: &Ctx,
    dst: usize,
    src: usize,
    len: usize,
    dir: Dir,
    call: &str,
) -> EmuResult<()> {
    let (d, s) = checked_sides(dst, src, len, dir, call)?;
    crate::stream::legacy_barrier(ctx, call)?;
    if len == 0 {
        return Ok(());
    }
    copy_op(dst, src, len, d, s, call).run()
}

/// An asynchronous copy on `stream`.
pub fn copy_async(
    stream: &Arc<StreamCore>,
    dst: usize,
    src: usize,
    len: usize,
    dir: Dir,
    call: &str,
) -> EmuResult<()> {
    let (d, s) = checked_sides(dst, src, len, dir, call)?;
    if len == 0 {
        return Ok(());
    }
    if (d && s) || stream.capture().is_some() {
        crate::stream::submit(stream, copy_op(dst, src, len, d, s, call))?;
        return Ok(());
    }
    if !s && d {
        // From pageable memory: staged now, written when the stream runs.
        // SAFETY: the source is host memory the caller passes with its length, readable now.
        let data = unsafe { std::slice::from_raw_parts(src as *const u8, len) }.to_vec();
        crate::stream::submit(
            stream,
            Op::new(
                Work::Upload {
                    dst,
                    data: Arc::new(data),
                },
                call,
            ),
        )?;
        return Ok(());
    }
    // To pageable memory (or host to host): complete on return, after the stream's work.
    match (stream.kind, stream.owner()) {
        (crate::stream::StreamKind::Legacy, Some(ctx)) => {
            crate::stream::legacy_barrier(&*ctx, call)?
        }
        _ => stream.wait_all()?,
    }
    copy_op(dst, src, len, d, s, call).run()
}

/// An asynchronous memset of `count` elements of `width` (1, 2, 4) bytes on `stream`.
pub fn memset(
    stream: &Arc<StreamCore>,
    dst: usize,
    width: usize,
    value: u32,
    count: usize,
    call: &str,
) -> EmuResult<()> {
    let bytes = count
        .checked_mul(width)
        .ok_or_else(|| crate::error::invalid(call, "size overflows"))?;
    if bytes == 0 {
        return Ok(());
    }
    crate::memory::check(dst, bytes, "destination", call, Code::InvalidValue)?;
    if !dst.is_multiple_of(width) {
        return Err(crate::error::invalid(
            call,
            format!("a {width}-byte memset needs a {width}-byte aligned address, got {dst:#x}"),
        ));
    }
    crate::stream::submit(
        stream,
        Op::new(
            Work::Memset {
                dst,
                width,
                value,
                count,
            },
            call,
        ),
    )?;
    Ok(())
}
