//! Source hashes and stamp-kernel names (the primitives of [source stamps](super::stamp)): the
//! SHA-256 of a module's portable source and options, and the empty `xt_source_<hash>` kernel
//! appended to each translation unit. A leaf: the unit generator (`mod.rs`) and the stamp
//! checks (`stamp.rs`) both use it.

use crate::ir::ModuleOptions;
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
