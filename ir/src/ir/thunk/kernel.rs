//! `kernel`: a launch of a kernel from one of the program's modules.

use super::kind::{Checker, Nested, ThunkKind, TraceCost};
use crate::ir::error::{ValidationError, err};
use crate::ir::{BufferUse, Dim3, KernelArg, ModuleImage, ThunkPath};
use serde_json::{Map, Value, json};

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

    fn validate(&self, cx: &mut dyn Checker, path: &ThunkPath) -> Result<(), ValidationError> {
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
        let Some(m) = cx.modules().iter().find(|m| m.name == k.module) else {
            let have: Vec<&str> = cx.modules().iter().map(|m| m.name.as_str()).collect();
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
            let allocs = cx.allocations();
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

impl<T> Nested<T> for KernelThunk {}
