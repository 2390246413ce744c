//! Registration of the standard kernel library's host implementations.

use super::KernelLibrary;
use std::sync::OnceLock;

/// The standard kernel library (name `xthunk.std`).
pub fn standard_library() -> &'static KernelLibrary {
    static LIB: OnceLock<KernelLibrary> = OnceLock::new();
    LIB.get_or_init(|| {
        let lib = KernelLibrary::new("xthunk.std");
        lib
    })
}
