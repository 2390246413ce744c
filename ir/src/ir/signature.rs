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
                                let v = self.extent_arg(args, j, p.name)?;
                                c = c.and_then(|c| c.checked_mul(v));
                            }
                            c
                        }
                    };
                    let Some(bytes) = count.and_then(|c| c.checked_mul(dtype.size() as u64)) else {
                        return Err((
                            i,
                            format!("`{}`: its element count overflows 64 bits", p.name),
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

    /// The value of argument `j`, an extent of buffer parameter `of`: an integer immediate
    /// that is not negative. The error names argument `j` (not the buffer), since that is the
    /// one to fix.
    fn extent_arg(&self, args: &[KernelArg], j: usize, of: &str) -> Result<u64, (usize, String)> {
        let name = self.params.get(j).map_or("?", |q| q.name);
        match args.get(j) {
            Some(KernelArg::Scalar(s)) => match s.as_i64() {
                Some(v) => u64::try_from(v).map_err(|_| {
                    (
                        j,
                        format!("`{name}` = {v} is negative; it is an extent of `{of}`"),
                    )
                }),
                None => Err((
                    j,
                    format!(
                        "`{name}` must be an integer immediate (an extent of `{of}`), got {}",
                        s.dtype()
                    ),
                )),
            },
            Some(KernelArg::Buffer { .. }) => Err((
                j,
                format!(
                    "`{name}` must be an integer immediate (an extent of `{of}`), got a buffer"
                ),
            )),
            None => Err((j, format!("`{name}` (an extent of `{of}`) is missing"))),
        }
    }

    /// Checks that every buffer argument's pointer is aligned to its element type, whatever
    /// address its allocation gets: the slice's offset is a multiple of the element size, and
    /// the allocation (`alignment_of(index)`: its declared alignment) is aligned at least as
    /// much. A misaligned pointer is a fault on a GPU (a misaligned-address error that poisons
    /// the context). Returns the index of the offending argument and a message.
    pub fn check_alignment(
        &self,
        args: &[KernelArg],
        alignment_of: &dyn Fn(u32) -> Option<u64>,
    ) -> Result<(), (usize, String)> {
        for (i, (p, a)) in self.params.iter().zip(args).enumerate() {
            let (ParamKind::Buffer { dtype, .. }, KernelArg::Buffer { slice, .. }) = (&p.kind, a)
            else {
                continue;
            };
            let es = dtype.size() as u64;
            if slice.offset % es != 0 {
                return Err((
                    i,
                    format!(
                        "`{}` holds {dtype} elements: its offset {} is not a multiple of {es} bytes \
                         (a misaligned pointer faults on a GPU)",
                        p.name, slice.offset
                    ),
                ));
            }
            match alignment_of(slice.allocation) {
                Some(align) if align % es == 0 => {}
                Some(align) => {
                    return Err((
                        i,
                        format!(
                            "`{}` holds {dtype} elements, in allocation {} aligned to {align} \
                             bytes only; {dtype} needs {es}-byte alignment",
                            p.name, slice.allocation
                        ),
                    ));
                }
                // A missing allocation is reported by the bounds check.
                None => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::ir::{Scalar, Slice};

    fn sig() -> KernelSignature {
        let buf = |name, dtype| Param {
            name,
            kind: ParamKind::Buffer {
                dtype,
                access: Access::Read,
                elems: Extent::Fixed(4),
            },
        };
        KernelSignature {
            name: "k".into(),
            params: vec![
                buf("a", DType::F32),
                buf("b", DType::F64),
                buf("c", DType::U8),
                Param {
                    name: "n",
                    kind: ParamKind::Scalar(DType::I64),
                },
            ],
        }
    }

    fn args(offsets: [u64; 3]) -> Vec<KernelArg> {
        let mut v: Vec<KernelArg> = offsets
            .iter()
            .enumerate()
            .map(|(i, &offset)| KernelArg::Buffer {
                slice: Slice {
                    allocation: i as u32,
                    offset,
                    size: 4,
                },
                access: Access::Read,
            })
            .collect();
        v.push(KernelArg::Scalar(Scalar::I64(4)));
        v
    }

    #[test]
    fn buffers_must_be_aligned_to_their_element_type() {
        let s = sig();
        let aligned = |_| Some(64);
        assert_eq!(s.check_alignment(&args([0, 0, 0]), &aligned), Ok(()));
        // Any offset for bytes, multiples of the element size otherwise.
        assert_eq!(s.check_alignment(&args([12, 8, 3]), &aligned), Ok(()));
        let (i, m) = s.check_alignment(&args([2, 0, 0]), &aligned).unwrap_err();
        assert_eq!(i, 0);
        assert!(m.contains("offset 2") && m.contains("f32"), "{m}");
        let (i, _) = s.check_alignment(&args([0, 4, 0]), &aligned).unwrap_err();
        assert_eq!(i, 1);
        // The allocation itself: an f64 buffer in a 4-byte aligned allocation.
        let four = |_| Some(4);
        let (i, m) = s.check_alignment(&args([0, 0, 0]), &four).unwrap_err();
        assert_eq!(i, 1);
        assert!(m.contains("aligned to 4 bytes"), "{m}");
        let one = |a| Some(if a == 2 { 1 } else { 64 });
        assert_eq!(s.check_alignment(&args([0, 0, 1]), &one), Ok(()));
    }
}
