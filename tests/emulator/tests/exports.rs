//! The built shared library: it exports every symbol the backends look up (read from their
//! sources, so a function a backend starts calling shows up here), nothing named like a
//! compiler (`nvrtc*`, `hiprtc*`, `amd_comgr*`), and works when loaded with dlopen.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::ffi::{CStr, c_char, c_int, c_uint};
use std::path::{Path, PathBuf};

/// The cdylib cargo built with this test binary (`target/<profile>/deps/libxthunk_emulator.so`;
/// `cargo test` does not copy it up to `target/<profile>/`, where an older one may lie).
fn library_path() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    for dir in [deps, deps.parent().unwrap()] {
        let p = dir.join("libxthunk_emulator.so");
        if p.exists() {
            return p;
        }
    }
    panic!("libxthunk_emulator.so not found near {}", exe.display());
}

fn open() -> libloading::Library {
    // SAFETY: loading the emulator runs no initializer with preconditions.
    unsafe { libloading::Library::new(library_path()) }.unwrap()
}

fn exported(lib: &libloading::Library, name: &str) -> bool {
    // SAFETY: only the address is looked up.
    unsafe { lib.get::<*const std::ffi::c_void>(name.as_bytes()) }.is_ok()
}

/// Identifiers in `text` that start with `prefix` and continue with `[A-Za-z0-9_]`.
fn names(text: &str, prefix: &str, min_len: usize) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices(prefix) {
        if i > 0 {
            let before = text.as_bytes()[i - 1];
            if before.is_ascii_alphanumeric() || before == b'_' {
                continue;
            }
        }
        let rest = &text[i..];
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if end >= min_len {
            out.insert(rest[..end].to_string());
        }
    }
    out
}

fn read_sources(dir: &Path) -> String {
    let mut s = String::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.path().extension().is_some_and(|x| x == "rs") {
                s.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
            }
        }
    }
    s
}

#[test]
fn every_symbol_the_backends_call_is_exported() {
    let lib = open();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut wanted: BTreeSet<String> = BTreeSet::new();
    // CUDA: every `sys::cu*` the backend calls through cudarc, and its cuBLAS table.
    let cuda = read_sources(&root.join("backend-cuda/src"));
    for n in names(&cuda, "sys::cu", 8) {
        wanted.insert(n.trim_start_matches("sys::").to_string());
    }
    for n in names(&cuda, "\"cublas", 8) {
        wanted.insert(n.trim_start_matches('"').to_string());
    }
    // ROCm: the names in its symbol tables (`hipXxx: sys::…`, `rocblas_xxx: sys::…`).
    let rocm = read_sources(&root.join("backend-rocm/src"));
    for prefix in ["hip", "rocblas_"] {
        for n in names(&rocm, prefix, 6) {
            if rocm.contains(&format!("{n}: sys::")) && !n.starts_with("hiprtc") {
                wanted.insert(n);
            }
        }
    }
    // NCCL / RCCL: the names in its table.
    let nccl = read_sources(&root.join("nccl/src"));
    for n in names(&nccl, "nccl", 8) {
        if nccl.contains(&format!("{n}: sys::")) {
            wanted.insert(n);
        }
    }
    // Looked up by NVRTC itself in any libcuda.so.1 it can load (it crashes when missing).
    wanted.insert("cuGetExportTable".into());
    let missing: Vec<&String> = wanted.iter().filter(|n| !exported(&lib, n)).collect();
    eprintln!("checked {} symbols the backends use", wanted.len());
    assert!(missing.is_empty(), "the emulator lacks: {missing:?}");
}

#[test]
fn no_compiler_symbols_are_exported() {
    let lib = open();
    for n in [
        "hiprtcCreateProgram",
        "hiprtcCompileProgram",
        "hiprtcGetCode",
        "hiprtcVersion",
        "nvrtcCreateProgram",
        "nvrtcVersion",
        "amd_comgr_get_isa_count",
    ] {
        assert!(!exported(&lib, n), "{n} must not be exported");
    }
}

#[test]
fn the_loaded_library_reports_emulated_devices() {
    let lib = open();
    type Init = unsafe extern "C" fn(c_uint) -> c_uint;
    type Name = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_uint;
    type Version = unsafe extern "C" fn() -> c_int;
    // SAFETY: the emulator's declarations of these functions; valid buffers.
    unsafe {
        let init: libloading::Symbol<Init> = lib.get(b"cuInit").unwrap();
        assert_eq!(init(0), 0);
        let name: libloading::Symbol<Name> = lib.get(b"cuDeviceGetName").unwrap();
        let mut buf = [0 as c_char; 64];
        assert_eq!(name(buf.as_mut_ptr(), 64, 0), 0);
        let s = CStr::from_ptr(buf.as_ptr()).to_str().unwrap();
        assert!(s.contains("xthunk emulated"), "{s}");
        let hip_name: libloading::Symbol<Name> = lib.get(b"hipDeviceGetName").unwrap();
        assert_eq!(hip_name(buf.as_mut_ptr(), 64, 0), 0);
        assert_eq!(
            CStr::from_ptr(buf.as_ptr()).to_str().unwrap(),
            "xthunk emulated AMD device"
        );
        let v: libloading::Symbol<Version> = lib.get(b"xthunk_emu_version").unwrap();
        assert_eq!(v(), 1);
    }
}
