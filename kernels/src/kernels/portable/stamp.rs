//! Source stamps: every translation unit xthunk compiles ends with an empty kernel
//! `xt_source_<hash>`, `<hash>` the first 16 hex digits of a SHA-256 of the module's portable
//! source (the user's code, or the standard library). Each compiled image (cubin, PTX, HSACO)
//! therefore records the source it was built from in its own symbol table, with no schema
//! field to lose or forge separately from the code: `xthunk compile` drops images whose stamp
//! differs from the module's source, and the loaders refuse them.
//!
//! Images without any stamp (compiled by other tools) cannot be checked; they are used with a
//! warning.

use crate::ir::{Module, ModuleImage, ModuleOptions};
use sha2::{Digest, Sha256};

/// The name prefix of stamp kernels.
pub const STAMP_PREFIX: &str = "xt_source_";

/// The hash of a module's portable source (16 lowercase hex digits).
pub fn source_hash(code: &str) -> String {
    let d = Sha256::new()
        .chain_update(b"xthunk portable source\0")
        .chain_update(code.as_bytes())
        .finalize();
    d.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// The hash of a module's portable source and compile options: [`source_hash`] of the code
/// alone when the options are the defaults.
pub fn module_hash(code: &str, options: &ModuleOptions) -> String {
    if *options == ModuleOptions::default() {
        return source_hash(code);
    }
    let mut text = String::from(code);
    text.push_str("\0options\0");
    for d in &options.defines {
        text.push_str(&format!("define {} {d}\0", d.len()));
    }
    text.push_str(if options.fast_math {
        "fast\0"
    } else {
        "precise\0"
    });
    for h in &options.headers {
        text.push_str(&format!(
            "header {} {} {} {}\0",
            h.name.len(),
            h.name,
            h.code.len(),
            h.code
        ));
    }
    source_hash(&text)
}

/// The stamp kernel's name for a source hash.
pub fn stamp_name(hash: &str) -> String {
    format!("{STAMP_PREFIX}{hash}")
}

/// The stamp kernel's definition, appended to a translation unit.
pub(super) fn stamp_definition(hash: &str) -> String {
    format!(
        "\n// The source stamp of every image compiled from this unit.\nextern \"C\" __global__ void {}() {{}}\n",
        stamp_name(hash)
    )
}

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
