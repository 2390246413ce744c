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

/// Every `.rs` file below `dir` (subfolders included), concatenated; fails when there is
/// none (a moved crate must not silently check nothing).
fn read_sources(dir: &Path) -> String {
    fn walk(dir: &Path, out: &mut String, files: &mut usize) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        let mut paths: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
        paths.sort();
        for p in paths {
            if p.is_dir() {
                walk(&p, out, files);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push_str(&std::fs::read_to_string(&p).unwrap());
                out.push('\n');
                *files += 1;
            }
        }
    }
    let (mut s, mut files) = (String::new(), 0);
    walk(dir, &mut s, &mut files);
    assert!(files > 0, "no sources in {}", dir.display());
    s
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The symbols of every `symbol_table! { … }` (core's one symbol-table mechanism) in
/// `text`, one set per table, in order: the field names, which are the C symbols bound.
fn tables(text: &str) -> Vec<BTreeSet<String>> {
    let mut out = vec![];
    for (start, _) in text.match_indices("symbol_table! {") {
        let body = &text[start + "symbol_table! ".len()..];
        let mut depth = 0usize;
        let mut end = body.len();
        for (i, c) in body.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i;
                        break;
                    }
                }
                _ => {}
            }
        }
        let mut symbols = BTreeSet::new();
        for line in body[..end].lines() {
            let mut line = line.trim();
            if line.starts_with("//") {
                continue;
            }
            // `#[since(…)] name: type,` (or the attribute alone on its line).
            if let Some(rest) = line.strip_prefix("#[") {
                let Some(close) = rest.find(")]") else {
                    continue;
                };
                line = rest[close + 2..].trim();
            }
            let name_len = line.find(|c: char| !is_ident(c)).unwrap_or(line.len());
            let (name, rest) = line.split_at(name_len);
            if !name.is_empty()
                && rest.starts_with(':')
                && !rest.starts_with("::")
                && line.ends_with(',')
            {
                symbols.insert(name.to_string());
            }
        }
        out.push(symbols);
    }
    out
}

/// The union of `tables`.
fn all(tables: &[BTreeSet<String>]) -> BTreeSet<String> {
    tables.iter().flatten().cloned().collect()
}

/// The quoted names of the list that starts at `marker` in `text` (up to its `];`).
fn listed(text: &str, marker: &str) -> BTreeSet<String> {
    let Some(start) = text.find(marker) else {
        return BTreeSet::new();
    };
    let body = &text[start..];
    let body = &body[..body.find("];").unwrap_or(body.len())];
    body.split('"')
        .skip(1)
        .step_by(2)
        .filter(|n| !n.is_empty() && n.chars().all(is_ident))
        .map(str::to_string)
        .collect()
}

/// Driver functions called as `sys::cuXxx` (a `cu` then a capital: not cuBLAS's
/// `sys::cublas…` declarations, not types like `sys::CUstream`).
fn driver_calls(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices("sys::cu") {
        let rest = &text[i + "sys::".len()..];
        let end = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
        let name = &rest[..end];
        if name[2..].starts_with(|c: char| c.is_ascii_uppercase()) {
            out.insert(name.to_string());
        }
    }
    out
}

/// Symbols of the runtime compilers, which the emulator must not stand in for.
fn is_compiler(name: &str) -> bool {
    ["nvrtc", "hiprtc", "amd_comgr"]
        .iter()
        .any(|p| name.starts_with(p))
}

/// What the backends declare, read from their sources.
struct Declared {
    /// The CUDA backend's driver symbols: its `DRIVER_SYMBOLS` list and every `sys::cu*` it
    /// calls through cudarc (guarded ones included).
    cuda_driver: BTreeSet<String>,
    /// The symbols of every table of the CUDA backend (NVRTC, cuBLAS), of the ROCm backend
    /// (HIP, hipRTC, comgr, rocBLAS) and of the NCCL/RCCL crate.
    cuda_tables: Vec<BTreeSet<String>>,
    rocm_tables: Vec<BTreeSet<String>>,
    nccl_tables: Vec<BTreeSet<String>>,
}

fn declared() -> Declared {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cuda = read_sources(&root.join("backend-cuda/src"));
    let mut cuda_driver = listed(&cuda, "pub const DRIVER_SYMBOLS");
    cuda_driver.extend(driver_calls(&cuda));
    let d = Declared {
        cuda_driver,
        cuda_tables: tables(&cuda),
        rocm_tables: tables(&read_sources(&root.join("backend-rocm/src"))),
        nccl_tables: tables(&read_sources(&root.join("nccl/src"))),
    };
    // The scan must find what is there: every table, and a known symbol of each.
    assert!(d.cuda_driver.len() >= 40, "driver: {:?}", d.cuda_driver);
    for (what, tables, count, known) in [
        (
            "backend-cuda",
            &d.cuda_tables,
            2,
            &["nvrtcCompileProgram", "cublasGemmEx"][..],
        ),
        (
            "backend-rocm",
            &d.rocm_tables,
            4,
            &[
                "hipModuleLaunchKernel",
                "hiprtcCompileProgram",
                "amd_comgr_get_isa_count",
                "rocblas_gemm_ex",
            ][..],
        ),
        ("nccl", &d.nccl_tables, 1, &["ncclAllReduce"][..]),
    ] {
        assert_eq!(tables.len(), count, "{what}: {tables:?}");
        assert!(tables.iter().all(|t| !t.is_empty()), "{what}: {tables:?}");
        let found = all(tables);
        for k in known {
            assert!(found.contains(*k), "{what}: {k} not found in {found:?}");
        }
    }
    for k in ["cuInit", "cuLaunchKernel", "cuGraphExecUpdate_v2"] {
        assert!(d.cuda_driver.contains(k), "{k}: {:?}", d.cuda_driver);
    }
    d
}

#[test]
fn every_symbol_the_backends_call_is_exported() {
    let lib = open();
    let d = declared();
    let mut wanted: BTreeSet<String> = d.cuda_driver.clone();
    for t in [&d.cuda_tables, &d.rocm_tables, &d.nccl_tables] {
        wanted.extend(all(t).into_iter().filter(|n| !is_compiler(n)));
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
    // Every compiler symbol the backends' tables declare…
    let d = declared();
    let compilers: Vec<String> = [&d.cuda_tables, &d.rocm_tables]
        .into_iter()
        .flat_map(|t| all(t))
        .filter(|n| is_compiler(n))
        .collect();
    assert!(compilers.len() >= 10, "{compilers:?}");
    for n in &compilers {
        assert!(!exported(&lib, n), "{n} must not be exported");
    }
    // …and these, whatever the tables say.
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
