//! The validation of input–output aliases ([`IoAlias`](super::IoAlias), in `types.rs`: an
//! output that may reuse a parameter's buffer) (same size, dtype, shape and memory space; each parameter and each output
//! aliased at most once).

use super::error::{ValidationError, err};
use super::executable::Executable;
use super::path::ThunkPath;

/// Checks `exe.aliases` against the signature (run after the signature's own checks).
pub(super) fn check_aliases(exe: &Executable) -> Result<(), ValidationError> {
    let root = ThunkPath::default();
    let sig = &exe.signature;
    let mut param_seen = vec![None; sig.parameters.len()];
    let mut output_seen = vec![None; sig.outputs.len()];
    for (i, a) in exe.aliases.iter().enumerate() {
        let f = format!("aliases[{i}]");
        let (Some(o), Some(p)) = (
            sig.outputs.get(a.output as usize),
            sig.parameters.get(a.parameter as usize),
        ) else {
            return Err(err(
                &root,
                f,
                format!(
                    "output {} and parameter {}: the program has {} outputs and {} parameters",
                    a.output,
                    a.parameter,
                    sig.outputs.len(),
                    sig.parameters.len()
                ),
            ));
        };
        let both = format!(
            "output {} `{}` and parameter {} `{}`",
            a.output, o.name, a.parameter, p.name
        );
        if let Some(j) = param_seen[a.parameter as usize].replace(i) {
            return Err(err(
                &root,
                f,
                format!(
                    "{both}: parameter {} is already aliased by aliases[{j}] (a parameter's \
                     buffer can hold one output)",
                    a.parameter
                ),
            ));
        }
        if let Some(j) = output_seen[a.output as usize].replace(i) {
            return Err(err(
                &root,
                f,
                format!(
                    "{both}: output {} is already aliased by aliases[{j}]",
                    a.output
                ),
            ));
        }
        if o.dtype != p.dtype || o.dims != p.dims {
            return Err(err(
                &root,
                f,
                format!(
                    "{both} differ: {:?} x {} against {:?} x {} (an alias needs the same \
                     dtype and shape)",
                    o.dims, o.dtype, p.dims, p.dtype
                ),
            ));
        }
        let (oa, pa) = (
            exe.allocations.get(o.allocation as usize),
            exe.allocations.get(p.allocation as usize),
        );
        if let (Some(oa), Some(pa)) = (oa, pa)
            && (oa.size != pa.size
                || oa.alignment > pa.alignment
                || oa.memory_space != pa.memory_space)
        {
            return Err(err(
                &root,
                f,
                format!(
                    "{both}: their allocations differ ({} bytes aligned to {} in {} against {} \
                     bytes aligned to {} in {})",
                    oa.size, oa.alignment, oa.memory_space, pa.size, pa.alignment, pa.memory_space
                ),
            ));
        }
    }
    Ok(())
}
