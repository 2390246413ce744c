//! Kernel signatures: the parameter list a kernel declares (kinds, dtypes, access, element
//! counts), checked against every launch at validation, and the catalog validation looks
//! kernels up in (the standard library implements it; the IR does not know any library).

use super::dtype::DType;
use super::types::{Access, KernelArg};

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

/// Where validation finds the signatures of the kernels of `Standard` modules (the standard
/// kernel library implements it).
pub trait KernelCatalog {
    /// The catalog's name, for error messages (e.g. `xthunk.std`).
    fn catalog_name(&self) -> &str {
        "the standard library"
    }
    fn signature(&self, name: &str) -> Option<&KernelSignature>;
}

impl KernelSignature {
    /// Checks launch arguments against this signature: kinds, dtypes and access of every
    /// parameter, and that every buffer's byte size equals its declared element count times
    /// the element size. Returns the index of the offending argument and a message.
    pub fn check_args(&self, args: &[KernelArg]) -> Result<(), (usize, String)> {
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
                                // A negative extent or a product that overflows: None.
                                let v = v.and_then(|v| u64::try_from(v).ok());
                                c = c.zip(v).and_then(|(c, v)| c.checked_mul(v));
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
