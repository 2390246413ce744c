//! Validation of an executable, done once at load. Every failure names the thunk (its path in
//! the nested sequences) and the field.
//!
//! # Kernel buffers: bounds and alignment (part of the portable subset's contract)
//!
//! Every buffer argument of a kernel lies inside its allocation. A kernel of the standard
//! library declares each buffer's element type, and its pointer must be aligned to it on every
//! device: the slice's offset is a multiple of the element size (4 for `f32`, 8 for `f64` and
//! `i64`, 2 for `f16`/`bf16`, 1 for bytes), and the allocation's alignment is at least the
//! element size. A misaligned pointer is a fault on a GPU (CUDA's misaligned-address error,
//! which poisons the context), so it is refused here, on every backend, the host included.
//! Kernels of other modules (portable source, PTX, binaries, host libraries) do not declare
//! their parameter types to xthunk: only their bounds are checked, and a program launching
//! them must keep each buffer aligned to what the kernel reads through it, by the same rule.
//!
//! The launch shape is checked here only against what no device allows (a zero extent, more
//! than 1,024 threads per block); the device's own limits (block and grid extents, dynamic
//! shared memory) are checked when the program is loaded onto it
//! (`backend::check_launch_limits`).

use super::dtype::DType;
use super::error::{ValidationError, err};
use super::executable::Executable;
use super::path::ThunkPath;
use super::signature::KernelCatalog;
use super::thunk::{COLLECTIVE_DTYPES, Checker, Scope, Thunk};
use super::types::*;
use std::collections::{BTreeMap, BTreeSet};

/// The largest allocation a program may declare: 2^63 - 1 bytes, so that every size, offset
/// and end of a slice (at most this) fits an `i64`/`isize` in the backends and the vendor
/// libraries (pointer offsets are signed).
pub const MAX_ALLOCATION_SIZE: u64 = i64::MAX as u64;

/// Validates an executable: ABI version, allocations (indices, alignment, constant sizes,
/// parameter/output numbering), the signature, modules, and every thunk (slices inside their
/// allocations, no writes to constants, sizes, kernel references and, for the standard
/// library, argument kinds and element counts, looked up in `catalog`).
pub fn verify_with(exe: &Executable, catalog: &dyn KernelCatalog) -> Result<(), ValidationError> {
    let root = ThunkPath::default();
    if exe.abi_version != ABI_VERSION {
        return Err(err(
            &root,
            "abi_version",
            format!(
                "program ABI version {} is not supported (this build reads version {})",
                exe.abi_version, ABI_VERSION
            ),
        ));
    }
    let mut params = BTreeMap::new();
    let mut outputs = BTreeMap::new();
    for (i, a) in exe.allocations.iter().enumerate() {
        let f = |name: &str| format!("allocations[{i}].{name}");
        if usize::try_from(a.index).ok() != Some(i) {
            return Err(err(
                &root,
                f("index"),
                format!("allocation at position {i} has index {}", a.index),
            ));
        }
        if a.alignment == 0 || !a.alignment.is_power_of_two() {
            return Err(err(
                &root,
                f("alignment"),
                format!("{} is not a power of two", a.alignment),
            ));
        }
        if a.size > MAX_ALLOCATION_SIZE {
            return Err(err(
                &root,
                f("size"),
                format!(
                    "{} bytes is larger than the largest supported allocation \
                     ({MAX_ALLOCATION_SIZE} bytes, 2^63 - 1)",
                    a.size
                ),
            ));
        }
        if a.alignment > 4096 {
            return Err(err(
                &root,
                f("alignment"),
                format!("{} is larger than the supported maximum 4096", a.alignment),
            ));
        }
        match &a.kind {
            AllocationKind::Parameter(n) => {
                if params.insert(*n, i).is_some() {
                    return Err(err(
                        &root,
                        f("kind"),
                        format!("parameter {n} is declared twice"),
                    ));
                }
            }
            AllocationKind::Output(n) => {
                if outputs.insert(*n, i).is_some() {
                    return Err(err(
                        &root,
                        f("kind"),
                        format!("output {n} is declared twice"),
                    ));
                }
            }
            AllocationKind::Constant(bytes) => {
                if u64::try_from(bytes.len()).ok() != Some(a.size) {
                    return Err(err(
                        &root,
                        f("kind"),
                        format!(
                            "constant holds {} bytes but the allocation size is {}",
                            bytes.len(),
                            a.size
                        ),
                    ));
                }
            }
            AllocationKind::Temp => {}
        }
    }
    check_dense("parameter", &params)?;
    check_dense("output", &outputs)?;
    check_signature(exe, "parameters", &exe.signature.parameters, &params)?;
    check_signature(exe, "outputs", &exe.signature.outputs, &outputs)?;
    super::alias::check_aliases(exe)?;

    let mut names = BTreeSet::new();
    for (i, m) in exe.modules.iter().enumerate() {
        if m.name.is_empty() {
            return Err(err(
                &root,
                format!("modules[{i}].name"),
                "empty module name",
            ));
        }
        if !names.insert(m.name.as_str()) {
            return Err(err(
                &root,
                format!("modules[{i}].name"),
                format!("module `{}` is declared twice", m.name),
            ));
        }
        if m.images.is_empty() {
            return Err(err(
                &root,
                format!("modules[{i}].images"),
                format!("module `{}` has no image", m.name),
            ));
        }
        for (j, img) in m.images.iter().enumerate() {
            let bad = match img {
                ModuleImage::Cubin { arch, data } => (!arch.starts_with("sm_"))
                    .then(|| format!("cubin arch `{arch}` is not sm_NN"))
                    .or_else(|| data.is_empty().then(|| "empty cubin".to_string())),
                ModuleImage::Hsaco { arch, data } => (!arch.starts_with("gfx"))
                    .then(|| format!("hsaco arch `{arch}` is not gfxNNN"))
                    .or_else(|| data.is_empty().then(|| "empty code object".to_string())),
                ModuleImage::Source { code } | ModuleImage::Ptx { code } => {
                    code.trim().is_empty().then(|| "empty source".to_string())
                }
                ModuleImage::Host { library } => library
                    .is_empty()
                    .then(|| "empty host library name".to_string()),
                ModuleImage::Standard => None,
            };
            if let Some(msg) = bad {
                return Err(err(&root, format!("modules[{i}].images[{j}]"), msg));
            }
        }
        if let Some((field, msg)) = check_module_options(&m.options) {
            return Err(err(&root, format!("modules[{i}].options.{field}"), msg));
        }
    }

    let mut v = ThunkChecker {
        exe,
        catalog,
        async_ids: BTreeSet::new(),
        in_command_buffer: false,
    };
    let paths: Vec<ThunkPath> = (0..exe.entry.len()).map(ThunkPath::entry).collect();
    v.list(&exe.entry, &paths)?;
    Ok(())
}

fn check_dense(what: &str, m: &BTreeMap<u32, usize>) -> Result<(), ValidationError> {
    for (expected, (n, i)) in m.iter().enumerate() {
        if usize::try_from(*n).ok() != Some(expected) {
            return Err(err(
                &ThunkPath::default(),
                format!("allocations[{i}].kind"),
                format!("{what} numbers must be 0..{}, found {what} {n}", m.len()),
            ));
        }
    }
    Ok(())
}

fn check_signature(
    exe: &Executable,
    field: &str,
    specs: &[TensorSpec],
    allocs: &BTreeMap<u32, usize>,
) -> Result<(), ValidationError> {
    let root = ThunkPath::default();
    if specs.len() != allocs.len() {
        return Err(err(
            &root,
            format!("signature.{field}"),
            format!(
                "the signature lists {} {field} but the program has {} such allocations",
                specs.len(),
                allocs.len()
            ),
        ));
    }
    let mut names = BTreeSet::new();
    for (i, s) in specs.iter().enumerate() {
        let f = format!("signature.{field}[{i}]");
        if s.name.is_empty() || !names.insert(s.name.as_str()) {
            return Err(err(
                &root,
                f,
                format!("name `{}` is empty or repeated", s.name),
            ));
        }
        let Some(&ai) = u32::try_from(i).ok().and_then(|n| allocs.get(&n)) else {
            return Err(err(&root, f, "no allocation of that kind and number"));
        };
        if usize::try_from(s.allocation).ok() != Some(ai) {
            return Err(err(
                &root,
                format!("{f}.allocation"),
                format!(
                    "is {}, but allocation {ai} holds this {field} entry",
                    s.allocation
                ),
            ));
        }
        let size = exe.allocations[ai].size;
        match s.byte_size() {
            Some(b) if b == size => {}
            b => {
                return Err(err(
                    &root,
                    format!("{f}.dims"),
                    format!(
                        "`{}`: {:?} x {} is {} bytes, the allocation has {size}",
                        s.name,
                        s.dims,
                        s.dtype,
                        b.map(|b| b.to_string())
                            .unwrap_or_else(|| "overflowing".into())
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// What each kind's validation ([`crate::ir::ThunkKind::validate`]) checks its fields with
/// (its [`Checker`]): the program, the kernel catalog, and the state of the walk (async ids
/// seen, whether it is inside a command buffer).
pub struct ThunkChecker<'a> {
    exe: &'a Executable,
    catalog: &'a dyn KernelCatalog,
    async_ids: BTreeSet<u32>,
    in_command_buffer: bool,
}

impl ThunkChecker<'_> {
    /// The program being validated.
    pub fn executable(&self) -> &Executable {
        self.exe
    }

    fn thunk(&mut self, t: &Thunk, path: &ThunkPath) -> Result<(), ValidationError> {
        let kind = t.as_kind();
        kind.validate(self, path)?;
        let was = self.in_command_buffer;
        if kind.records() {
            self.in_command_buffer = true;
        }
        for (name, list) in t.nested() {
            let paths: Vec<ThunkPath> = (0..list.len()).map(|i| path.in_list(&name, i)).collect();
            self.list(list, &paths)?;
        }
        self.in_command_buffer = was;
        Ok(())
    }

    /// Validates one thunk list: each thunk, and that async starts and dones pair up inside
    /// this list (a start's done must follow it in the same list).
    fn list(&mut self, list: &[Thunk], paths: &[ThunkPath]) -> Result<(), ValidationError> {
        let mut open: BTreeMap<u32, usize> = BTreeMap::new();
        for (t, path) in list.iter().zip(paths) {
            self.thunk(t, path)?;
            match t.scope() {
                Scope::AsyncStart { id, .. } => {
                    open.insert(id, 0);
                }
                Scope::AsyncDone { id } if open.remove(&id).is_none() => {
                    return Err(err(
                        path,
                        "id",
                        format!(
                            "async_done {id} has no matching async_start before it in the same list"
                        ),
                    ));
                }
                _ => {}
            }
        }
        if let Some((id, _)) = open.into_iter().next() {
            let at = list
                .iter()
                .zip(paths)
                .find(|(t, _)| matches!(t.scope(), Scope::AsyncStart { id: i, .. } if i == id))
                .map(|(_, p)| p.clone())
                .unwrap_or_default();
            return Err(err(
                &at,
                "id",
                format!("async_start {id} has no matching async_done in the same list"),
            ));
        }
        Ok(())
    }
}

impl Checker for ThunkChecker<'_> {
    fn allocations(&self) -> &[BufferAllocation] {
        &self.exe.allocations
    }

    fn modules(&self) -> &[Module] {
        &self.exe.modules
    }

    fn catalog(&self) -> &dyn KernelCatalog {
        self.catalog
    }

    fn new_async_id(&mut self, id: u32) -> bool {
        self.async_ids.insert(id)
    }

    fn slice(
        &self,
        s: &Slice,
        path: &ThunkPath,
        field: &str,
        write: bool,
    ) -> Result<(), ValidationError> {
        let Some(a) = usize::try_from(s.allocation)
            .ok()
            .and_then(|i| self.exe.allocations.get(i))
        else {
            return Err(err(
                path,
                field,
                format!(
                    "allocation {} does not exist (the program has {})",
                    s.allocation,
                    self.exe.allocations.len()
                ),
            ));
        };
        match s.end() {
            Some(end) if end <= a.size => {}
            _ => {
                return Err(err(
                    path,
                    field,
                    format!(
                        "slice {s} ends at byte {} past the end of allocation {} ({} bytes)",
                        u128::from(s.offset) + u128::from(s.size),
                        s.allocation,
                        a.size
                    ),
                ));
            }
        }
        if write && let AllocationKind::Constant(_) = a.kind {
            return Err(err(
                path,
                field,
                format!("writes constant allocation {}", s.allocation),
            ));
        }
        Ok(())
    }

    fn typed_slice(
        &self,
        s: &Slice,
        dtype: DType,
        path: &ThunkPath,
        field: &str,
        write: bool,
    ) -> Result<(), ValidationError> {
        if !COLLECTIVE_DTYPES.contains(&dtype) {
            return Err(err(
                path,
                "dtype",
                format!("collectives do not support {dtype}"),
            ));
        }
        self.slice(s, path, field, write)?;
        if !s.size.is_multiple_of(dtype.size() as u64) {
            return Err(err(
                path,
                field,
                format!("{} bytes is not a whole number of {dtype} elements", s.size),
            ));
        }
        Ok(())
    }

    fn no_control_flow(&self, path: &ThunkPath, kind: &str) -> Result<(), ValidationError> {
        if self.in_command_buffer {
            return Err(err(
                path,
                "kind",
                format!(
                    "{kind} is not allowed inside a command buffer (only copy, memset, kernel, gemm, custom_call, while, conditional and sequences)"
                ),
            ));
        }
        Ok(())
    }
}

/// The first problem of a module's compile options: a define that is not `NAME` or
/// `NAME=VALUE` (NAME an identifier, VALUE on one line), a header name that is empty, not
/// printable ASCII, holds `"` or `\\`, or is given twice. Returns the field and the message.
fn check_module_options(o: &ModuleOptions) -> Option<(String, String)> {
    for (k, d) in o.defines.iter().enumerate() {
        let (name, value) = d.split_once('=').unwrap_or((d.as_str(), ""));
        let ident = name
            .chars()
            .next()
            .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
            && name.chars().all(|c| c == '_' || c.is_ascii_alphanumeric());
        if !ident || value.contains(['\n', '\r']) {
            return Some((
                format!("defines[{k}]"),
                format!("`{d}` is not NAME or NAME=VALUE (an identifier, a one-line value)"),
            ));
        }
    }
    let mut seen = BTreeSet::new();
    for (k, h) in o.headers.iter().enumerate() {
        let ok = !h.name.is_empty()
            && h.name
                .chars()
                .all(|c| (c.is_ascii_graphic() || c == ' ') && c != '"' && c != '\\');
        if !ok {
            return Some((
                format!("headers[{k}].name"),
                format!(
                    "header name `{}` is empty or not printable ASCII without `\"` and `\\`",
                    h.name.escape_default()
                ),
            ));
        }
        if !seen.insert(h.name.as_str()) {
            return Some((
                format!("headers[{k}].name"),
                format!("header `{}` is given twice", h.name),
            ));
        }
    }
    None
}
