//! What cuBLAS ([`crate::cublas`]) and rocBLAS ([`crate::rocblas`]) share: the BLAS handle
//! (its stream and pointer mode), the arguments of a gemm call in C terms, reading alpha and
//! beta, queuing on the handle's stream, and the exported single-type gemm shims
//! (`cublasSgemm_v2`, `rocblas_dgemm`, …), which have the same signature in both libraries.
//! The math is [`crate::gemm`].

use crate::context::{Ctx, Owned};
use crate::diag::Kind;
use crate::error::{Code, EmuError, EmuResult, invalid};
use crate::gemm::{Elt, GemmDesc, GemmOp, Operand, Scal};
use crate::handles::{HandleKind, Table};
use parking_lot::Mutex;
use std::ffi::{c_int, c_void};
use std::sync::Arc;
use std::sync::atomic::AtomicU32;

pub static BLAS_HANDLES: Table<BlasHandle> = Table::new(HandleKind::Blas);

/// A cuBLAS or rocBLAS handle.
pub struct BlasHandle {
    pub ctx_id: u64,
    pub ctx: Arc<Ctx>,
    /// The raw stream handle work goes to (0: the legacy stream).
    pub stream: Mutex<usize>,
    /// 0: alpha/beta are host pointers; 1: device pointers.
    pub pointer_mode: AtomicU32,
    pub math_mode: AtomicU32,
}

pub fn create_handle(ctx: Arc<Ctx>) -> usize {
    ctx.owns(Owned {
        kind: HandleKind::Blas,
        what: "BLAS handle(s)",
        count: |c| BLAS_HANDLES.handles_where(|b| b.ctx_id == c).len(),
        destroy: destroy_context_handles,
    });
    BLAS_HANDLES.insert(Arc::new(BlasHandle {
        ctx_id: ctx.id,
        ctx,
        stream: Mutex::new(0),
        pointer_mode: AtomicU32::new(0),
        math_mode: AtomicU32::new(0),
    }))
}

/// Destroys every BLAS handle of context `ctx` (when it is destroyed).
fn destroy_context_handles(ctx: u64) {
    for h in BLAS_HANDLES.handles_where(|b| b.ctx_id == ctx) {
        let _ = BLAS_HANDLES.remove(h, "context destruction");
    }
}

/// Resolves the stream a BLAS handle queues on and queues `op` there.
pub fn enqueue(h: &BlasHandle, op: GemmOp, call: &str) -> EmuResult<()> {
    let raw = *h.stream.lock();
    let s = crate::stream::resolve(&h.ctx, raw, call)?;
    crate::stream::submit(
        &s,
        crate::stream::Op::new(crate::stream::Work::Gemm(Arc::new(op)), call),
    )?;
    Ok(())
}

/// An error for an unsupported type combination.
pub fn bad_types(call: &str, msg: String) -> EmuError {
    EmuError::new(Code::NotSupported, Kind::Unsupported, call, msg)
}

/// One operand as a gemm call passes it: address, leading dimension, batch stride (elements)
/// and the library's type code.
#[derive(Clone, Copy, Debug)]
pub struct Arg {
    pub ptr: usize,
    pub ld: c_int,
    pub stride: i64,
    pub ty: c_int,
}

impl Arg {
    pub fn new(ptr: usize, ld: c_int, stride: i64, ty: c_int) -> Arg {
        Arg {
            ptr,
            ld,
            stride,
            ty,
        }
    }

    fn operand(self) -> Operand {
        Operand {
            ptr: self.ptr,
            ld: self.ld as i64,
            stride: self.stride,
        }
    }
}

/// Everything a gemm call passes, in the library's own codes (cuBLAS writes C: its `d` is
/// its `c`).
pub struct GemmArgs {
    pub handle: usize,
    /// `op(A)`, `op(B)` codes.
    pub trans: [c_int; 2],
    pub m: c_int,
    pub n: c_int,
    pub k: c_int,
    pub alpha: *const c_void,
    pub beta: *const c_void,
    pub a: Arg,
    pub b: Arg,
    pub c: Arg,
    pub d: Arg,
    pub batch: c_int,
    pub compute: c_int,
}

impl GemmArgs {
    /// The description, once the library decoded the operation and type codes: reads alpha
    /// and beta as the handle's pointer mode says (`device_scalars`). The only error is a
    /// null alpha or beta (invalid value).
    ///
    /// # Safety
    /// In host pointer mode, `alpha` and `beta` must point to values of the compute type.
    pub unsafe fn describe(
        &self,
        trans: (bool, bool),
        ab_type: Elt,
        cd_type: Elt,
        compute64: bool,
        device_scalars: bool,
        call: &str,
    ) -> EmuResult<GemmDesc> {
        // SAFETY: forwarded from the caller.
        let (alpha, beta) = unsafe {
            (
                scalar(self.alpha, device_scalars, compute64, "alpha", call)?,
                scalar(self.beta, device_scalars, compute64, "beta", call)?,
            )
        };
        Ok(GemmDesc {
            trans_a: trans.0,
            trans_b: trans.1,
            m: self.m as i64,
            n: self.n as i64,
            k: self.k as i64,
            alpha,
            beta,
            a: self.a.operand(),
            b: self.b.operand(),
            c: self.c.operand(),
            d: self.d.operand(),
            batch: self.batch as i64,
            ab_type,
            cd_type,
            compute64,
        })
    }
}

/// Reads alpha or beta: a device address in device pointer mode, else the host value (of the
/// compute type) now.
///
/// # Safety
/// In host mode, `p` must point to a value of the compute type.
unsafe fn scalar(
    p: *const c_void,
    device: bool,
    compute64: bool,
    what: &str,
    call: &str,
) -> EmuResult<Scal> {
    if p.is_null() {
        return Err(invalid(call, format!("`{what}` is a null pointer")));
    }
    if device {
        return Ok(Scal::Device(p as usize));
    }
    // SAFETY: host pointer mode: `p` points to the compute type (the caller's contract).
    Ok(Scal::Host(unsafe {
        if compute64 {
            std::ptr::read_unaligned(p.cast::<f64>())
        } else {
            std::ptr::read_unaligned(p.cast::<f32>()) as f64
        }
    }))
}

/// Exports a single-type gemm shim (`cublasSgemm_v2`, `cublasDgemm_v2`, `rocblas_sgemm`,
/// `rocblas_dgemm`: the same signature in both libraries): one matrix each, no batch, C
/// updated in place, every operand of element type `$t` (the library's type code `$ty`,
/// compute code `$compute`). It expands in the library's module and calls that module's
/// `api` and `gemm_call`; `$status` is the library's status type.
macro_rules! single_type_gemm {
    ($name:ident, $t:ty, $status:ty, $ty:expr, $compute:expr) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            handle: usize,
            trans_a: c_int,
            trans_b: c_int,
            m: c_int,
            n: c_int,
            k: c_int,
            alpha: *const $t,
            a: *const $t,
            lda: c_int,
            b: *const $t,
            ldb: c_int,
            beta: *const $t,
            c: *mut $t,
            ldc: c_int,
        ) -> $status {
            const C: &str = stringify!($name);
            api(C, || {
                let call = $crate::blas::GemmArgs {
                    handle,
                    trans: [trans_a, trans_b],
                    m,
                    n,
                    k,
                    alpha: alpha.cast(),
                    beta: beta.cast(),
                    a: $crate::blas::Arg::new(a as usize, lda, 0, $ty),
                    b: $crate::blas::Arg::new(b as usize, ldb, 0, $ty),
                    c: $crate::blas::Arg::new(c as usize, ldc, 0, $ty),
                    d: $crate::blas::Arg::new(c as usize, ldc, 0, $ty),
                    batch: 1,
                    compute: $compute,
                };
                // SAFETY: the library's contract for alpha/beta.
                unsafe { gemm_call(call, C) }
            })
        }
    };
}
pub(crate) use single_type_gemm;
