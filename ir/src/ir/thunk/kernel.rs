//! `kernel`: a launch of a kernel from one of the program's modules.

use super::{ThunkKind, TraceCost};
use crate::ir::verify::{ThunkChecker, ValidationError, err};
use crate::ir::{Access, BufferUse, Dim3, ModuleImage, Scalar, Slice, ThunkPath};
use serde_json::{Map, Value, json};

/// One argument of a kernel launch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KernelArg {
    /// A buffer, passed as a device pointer to the slice's first byte.
    Buffer { slice: Slice, access: Access },
    /// An immediate, passed by value.
    Scalar(Scalar),
}

// Rust values as launch arguments and scalars (`builder.kernel(…, &[x.into(), 3i64.into()])`).
macro_rules! scalar_from {
    ($($t:ty => $v:ident),*) => {$(
        impl From<$t> for KernelArg {
            fn from(x: $t) -> Self { KernelArg::Scalar(Scalar::$v(x)) }
        }
        impl From<$t> for Scalar {
            fn from(x: $t) -> Self { Scalar::$v(x) }
        }
    )*};
}
scalar_from!(bool => Pred, i8 => I8, u8 => U8, i32 => I32, i64 => I64, f32 => F32, f64 => F64);

impl From<half::f16> for KernelArg {
    fn from(x: half::f16) -> Self {
        KernelArg::Scalar(Scalar::F16(x.to_bits()))
    }
}
impl From<half::bf16> for KernelArg {
    fn from(x: half::bf16) -> Self {
        KernelArg::Scalar(Scalar::BF16(x.to_bits()))
    }
}

/// `Kernel` thunk: launch a kernel from one of the executable's modules.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelThunk {
    /// Name of a module in [`crate::ir::Executable::modules`].
    pub module: String,
    /// Name of the kernel in that module.
    pub name: String,
    pub grid: Dim3,
    pub block: Dim3,
    /// Dynamic shared memory in bytes.
    pub shared_mem: u32,
    pub args: Vec<KernelArg>,
}

impl ThunkKind for KernelThunk {
    fn name(&self) -> &'static str {
        "kernel"
    }

    fn buffer_uses(&self) -> Vec<BufferUse> {
        self.args
            .iter()
            .filter_map(|a| match a {
                KernelArg::Buffer { slice, access } => Some(BufferUse {
                    slice: *slice,
                    access: *access,
                }),
                KernelArg::Scalar(_) => None,
            })
            .collect()
    }

    fn validate(&self, cx: &mut ThunkChecker<'_>, path: &ThunkPath) -> Result<(), ValidationError> {
        let k = self;
        for (i, a) in k.args.iter().enumerate() {
            if let KernelArg::Buffer { slice, access } = a {
                cx.slice(slice, path, &format!("args[{i}]"), access.writes())?;
            }
        }
        for (f, d) in [("grid", k.grid), ("block", k.block)] {
            if d.x == 0 || d.y == 0 || d.z == 0 {
                return Err(err(path, f, format!("{d} has a zero extent")));
            }
        }
        if k.block.count() > 1024 {
            return Err(err(
                path,
                "block",
                format!("{} threads per block exceeds 1024", k.block.count()),
            ));
        }
        let exe = cx.executable();
        let Some(m) = exe.module(&k.module) else {
            let have: Vec<&str> = exe.modules.iter().map(|m| m.name.as_str()).collect();
            return Err(err(
                path,
                "module",
                format!(
                    "unknown module `{}` (the program has: {})",
                    k.module,
                    have.join(", ")
                ),
            ));
        };
        if m.images.iter().any(|i| matches!(i, ModuleImage::Standard)) {
            let catalog = cx.catalog();
            let Some(signature) = catalog.signature(&k.name) else {
                return Err(err(
                    path,
                    "name",
                    format!(
                        "unknown kernel `{}` in module `{}` ({} has no such kernel)",
                        k.name,
                        k.module,
                        catalog.catalog_name()
                    ),
                ));
            };
            let allocs = &exe.allocations;
            let alignment_of = |a: u32| Some(allocs.get(usize::try_from(a).ok()?)?.alignment);
            if let Err((i, msg)) = signature
                .check_args(&k.args)
                .and_then(|()| signature.check_alignment(&k.args, &alignment_of))
            {
                return Err(err(path, format!("args[{i}]"), msg));
            }
        }
        Ok(())
    }

    fn label(&self) -> String {
        format!("kernel {}.{}", self.module, self.name)
    }

    fn describe(&self) -> String {
        let k = self;
        let args: Vec<String> = k
            .args
            .iter()
            .map(|a| match a {
                KernelArg::Buffer { slice, access } => format!("{slice} {}", access.short()),
                KernelArg::Scalar(v) => v.to_string(),
            })
            .collect();
        let shared = if k.shared_mem > 0 {
            format!(" shared={}", k.shared_mem)
        } else {
            String::new()
        };
        format!(
            "kernel {}.{} grid={} block={}{shared} args=[{}]",
            k.module,
            k.name,
            k.grid,
            k.block,
            args.join(", ")
        )
    }

    fn trace(&self, args: &mut Map<String, Value>) -> TraceCost {
        let (g, b) = (self.grid, self.block);
        args.insert("grid".into(), json!([g.x, g.y, g.z]));
        args.insert("block".into(), json!([b.x, b.y, b.z]));
        args.insert("shared_mem".into(), json!(self.shared_mem));
        let bytes = self
            .args
            .iter()
            .map(|a| match a {
                KernelArg::Buffer { slice, .. } => slice.size,
                KernelArg::Scalar(_) => 0,
            })
            .fold(0u64, u64::saturating_add);
        TraceCost {
            bytes,
            ..TraceCost::default()
        }
    }
}
