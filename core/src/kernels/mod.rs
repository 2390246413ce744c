//! The standard kernel library: signatures, and host implementations (the reference every GPU
//! result is compared with). The portable (CUDA-C subset) source of each kernel arrives with the
//! GPU backends.
//!
//! Naming: `<op>_<dtype>` (e.g. `add_f32`, `gelu_bf16`, `softmax_f16`); conversions are
//! `convert_<from>_<to>`. Elementwise kernels take their element count `n` as an `i64` scalar;
//! row kernels take `rows` and `cols`. Grid and block only matter on GPUs (every portable kernel
//! uses grid-stride loops, so any launch shape is correct); the host implementations ignore
//! them.

use crate::ir::{Access, DType, Scalar};
use std::fmt;

/// How many elements a buffer parameter holds: a constant, or the product of integer scalar
/// parameters (by index in the parameter list).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Extent {
    Fixed(u64),
    Product(Vec<usize>),
}

/// One declared kernel parameter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParamKind {
    Buffer {
        dtype: DType,
        access: Access,
        elems: Extent,
    },
    Scalar(DType),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Param {
    pub name: &'static str,
    pub kind: ParamKind,
}

/// The declared signature of a kernel: what the validator checks every launch against, and
/// how the emulator decodes raw parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelSignature {
    pub name: String,
    pub params: Vec<Param>,
}

/// A buffer or immediate handed to a host kernel implementation.
#[derive(Clone, Copy, Debug)]
pub enum HostArg {
    /// `len` bytes at `ptr`. Buffers of one launch may alias (in-place kernels); an
    /// implementation reads all its inputs before writing, or works element by element.
    Buffer {
        ptr: *mut u8,
        len: usize,
    },
    Scalar(Scalar),
}

/// Errors of a host kernel implementation.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error("argument {index}: expected {expected}, got {got}")]
    BadArgument {
        index: usize,
        expected: String,
        got: String,
    },
    #[error("{0}")]
    Failed(String),
}

/// A host kernel implementation.
///
/// # Safety
/// Every `HostArg::Buffer` must point to `len` valid, writable bytes for the whole call, and no
/// other thread may access those bytes during the call.
pub type HostKernelFn = unsafe fn(&[HostArg]) -> Result<(), KernelError>;

/// A kernel of a library: signature and host implementation.
#[derive(Clone)]
pub struct HostKernel {
    pub signature: KernelSignature,
    pub func: HostKernelFn,
}

impl fmt::Debug for HostKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostKernel")
            .field("signature", &self.signature)
            .finish_non_exhaustive()
    }
}

/// A named set of host kernels, looked up by kernel name.
#[derive(Debug, Default)]
pub struct KernelLibrary {
    pub name: String,
    kernels: std::collections::BTreeMap<String, HostKernel>,
}

impl KernelLibrary {
    pub fn new(name: impl Into<String>) -> Self {
        KernelLibrary {
            name: name.into(),
            kernels: Default::default(),
        }
    }

    /// Adds (or replaces) a kernel.
    pub fn register(&mut self, kernel: HostKernel) {
        self.kernels.insert(kernel.signature.name.clone(), kernel);
    }

    pub fn get(&self, name: &str) -> Option<&HostKernel> {
        self.kernels.get(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.kernels.keys().map(String::as_str)
    }

    pub fn kernels(&self) -> impl Iterator<Item = &HostKernel> {
        self.kernels.values()
    }

    pub fn len(&self) -> usize {
        self.kernels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kernels.is_empty()
    }
}

mod standard;
pub use standard::standard_library;

impl KernelSignature {
    /// Checks launch arguments against this signature: kinds, dtypes and access of every
    /// parameter, and that every buffer's byte size equals its declared element count times
    /// the element size. Returns the index of the offending argument and a message.
    pub fn check_args(&self, args: &[crate::ir::KernelArg]) -> Result<(), (usize, String)> {
        use crate::ir::KernelArg;
        if args.len() != self.params.len() {
            return Err((
                args.len().min(self.params.len()),
                format!(
                    "kernel `{}` takes {} arguments, got {}",
                    self.name,
                    self.params.len(),
                    args.len()
                ),
            ));
        }
        for (i, (p, a)) in self.params.iter().zip(args).enumerate() {
            match (&p.kind, a) {
                (ParamKind::Scalar(dt), KernelArg::Scalar(s)) => {
                    if s.dtype() != *dt {
                        return Err((
                            i,
                            format!("`{}` must be a {} immediate, got {}", p.name, dt, s.dtype()),
                        ));
                    }
                }
                (
                    ParamKind::Buffer {
                        dtype,
                        access,
                        elems,
                    },
                    KernelArg::Buffer { slice, access: got },
                ) => {
                    if access.writes() && !got.writes() || access.reads() && !got.reads() {
                        return Err((
                            i,
                            format!(
                                "`{}` is {} by the kernel, declared {}",
                                p.name,
                                access.name(),
                                got.name()
                            ),
                        ));
                    }
                    let count = match elems {
                        Extent::Fixed(n) => Some(*n),
                        Extent::Product(idx) => {
                            let mut c: Option<u64> = Some(1);
                            for &j in idx {
                                let v = match args.get(j) {
                                    Some(KernelArg::Scalar(s)) => s.as_i64(),
                                    _ => None,
                                };
                                c = match (c, v) {
                                    (Some(c), Some(v)) if v >= 0 => c.checked_mul(v as u64),
                                    _ => None,
                                };
                            }
                            c
                        }
                    };
                    let Some(bytes) = count.and_then(|c| c.checked_mul(dtype.size() as u64)) else {
                        return Err((
                            i,
                            format!("`{}`: element count is negative or overflows", p.name),
                        ));
                    };
                    if slice.size != bytes {
                        return Err((
                            i,
                            format!(
                                "`{}` must be {} bytes ({} x {}), the slice has {}",
                                p.name,
                                bytes,
                                count.unwrap_or(0),
                                dtype,
                                slice.size
                            ),
                        ));
                    }
                }
                (ParamKind::Scalar(dt), KernelArg::Buffer { .. }) => {
                    return Err((
                        i,
                        format!("`{}` must be a {} immediate, got a buffer", p.name, dt),
                    ));
                }
                (ParamKind::Buffer { dtype, .. }, KernelArg::Scalar(_)) => {
                    return Err((
                        i,
                        format!("`{}` must be a {} buffer, got an immediate", p.name, dtype),
                    ));
                }
            }
        }
        Ok(())
    }
}
