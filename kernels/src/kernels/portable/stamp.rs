//! Source stamps: every translation unit xthunk compiles ends with an empty kernel
//! `xt_source_<hash>`, `<hash>` the first 16 hex digits of a SHA-256 of the module's portable
//! source (the user's code, or the standard library). Each compiled image (cubin, PTX, HSACO)
//! therefore records the source it was built from in its own symbol table, with no schema
//! field to lose or forge separately from the code: `xthunk compile` drops images whose stamp
//! differs from the module's source, and the loaders refuse them.
//!
//! Images without any stamp (compiled by other tools) cannot be checked; they are used with a
//! warning.

pub use super::hash::{STAMP_PREFIX, module_hash, source_hash, stamp_name};
use crate::ir::{Module, ModuleImage};

/// The stamp the compiled images of `module` must carry: that of its first `source` image,
/// else of the standard library when it has a `standard` image; `None` when it has neither
/// (nothing to check against).
pub fn expected_stamp(module: &Module) -> Option<String> {
    if let Some(code) = module.images.iter().find_map(|i| match i {
        ModuleImage::Source { code } => Some(code),
        _ => None,
    }) {
        return Some(stamp_name(&module_hash(code, &module.options)));
    }
    module
        .images
        .iter()
        .any(|i| matches!(i, ModuleImage::Standard))
        .then(|| stamp_name(&super::standard_hash()))
}

/// What an image's symbols say about the source it was compiled from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stamp {
    /// It carries the expected stamp.
    Matches,
    /// It carries no stamp (compiled by another tool): cannot be checked.
    Missing,
    /// It was compiled from other source: it carries `found`.
    Differs { found: String },
}

/// Checks the function symbols of an image against the `expected` stamp name.
pub fn check_stamp<'a>(expected: &str, symbols: impl IntoIterator<Item = &'a str>) -> Stamp {
    let mut found = None;
    for s in symbols {
        if s == expected {
            return Stamp::Matches;
        }
        if s.starts_with(STAMP_PREFIX) && found.is_none() {
            found = Some(s.to_string());
        }
    }
    match found {
        Some(found) => Stamp::Differs { found },
        None => Stamp::Missing,
    }
}

/// The kernel names PTX text declares (`.entry <name>`).
pub fn ptx_entries(ptx: &str) -> Vec<&str> {
    ptx.split(".entry")
        .skip(1)
        .filter_map(|rest| {
            let rest = rest.trim_start();
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '$'))
                .unwrap_or(rest.len());
            (end > 0).then(|| &rest[..end])
        })
        .collect()
}

/// The error text of a stale image.
pub fn stale_message(module: &str, image: &str, expected: &str, found: &str) -> String {
    format!(
        "module `{module}`: the {image} image was compiled from other source (it records {found}, the module's source is {expected}); rebuild it with `xthunk compile`"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_tell_sources_apart() {
        let a = source_hash("__global__ void k() {}");
        assert_eq!(a.len(), 16);
        assert_eq!(a, source_hash("__global__ void k() {}"));
        assert_ne!(a, source_hash("__global__ void k() { }"));
        let want = stamp_name(&a);
        assert_eq!(check_stamp(&want, ["k", want.as_str()]), Stamp::Matches);
        assert_eq!(check_stamp(&want, ["k"]), Stamp::Missing);
        assert_eq!(
            check_stamp(&want, ["xt_source_0000000000000000", "k"]),
            Stamp::Differs {
                found: "xt_source_0000000000000000".into()
            }
        );
        let ptx = ".visible .entry k(\n.param .u64 p)\n{}\n.visible .entry xt_source_ab12()\n{}";
        assert_eq!(ptx_entries(ptx), ["k", "xt_source_ab12"]);
        let m = Module {
            name: "m".into(),
            images: vec![
                ModuleImage::Ptx { code: ptx.into() },
                ModuleImage::Source {
                    code: "__global__ void k() {}".into(),
                },
            ],
            options: Default::default(),
        };
        assert_eq!(expected_stamp(&m), Some(want));
    }
}
