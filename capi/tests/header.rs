//! `include/xthunk.h` is exactly what cbindgen makes of this crate (`capi/cbindgen.toml`): the
//! header cannot drift from the Rust side. `XTHUNK_BLESS=1` rewrites it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;

#[test]
fn header_is_cbindgens_output() {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).unwrap();
    let bindings = cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .unwrap();
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    let generated = String::from_utf8(generated).unwrap();
    let path = crate_dir.join("../include/xthunk.h");
    if std::env::var_os("XTHUNK_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == generated,
        "include/xthunk.h is stale: run `XTHUNK_BLESS=1 cargo test -p xthunk-capi --test header`"
    );
    // Every entry point is in it, with the ABI version.
    for f in [
        "xthunk_abi_version",
        "xthunk_runtime_new",
        "xthunk_executable_load_bytes",
        "xthunk_executable_run_host",
        "xthunk_executable_run",
        "xthunk_buffer_read",
        "xthunk_error_cause",
    ] {
        assert!(generated.contains(&format!("{f}(")), "{f} missing");
    }
    assert!(generated.contains("#define XTHUNK_ABI_VERSION 1"));
}

#[test]
fn header_compiles_as_c_and_cpp() {
    let include = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../include");
    for (compiler, lang, std) in [("cc", "c", "-std=c99"), ("c++", "c++", "-std=c++17")] {
        let mut child = std::process::Command::new(compiler)
            .args([
                std,
                "-Wall",
                "-Wextra",
                "-Werror",
                "-pedantic",
                "-fsyntax-only",
                "-x",
                lang,
            ])
            .arg("-I")
            .arg(&include)
            .arg("-")
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {compiler}: {e}"));
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"#include \"xthunk.h\"\nint main(void) { return xthunk_abi_version() == XTHUNK_ABI_VERSION ? 0 : 1; }\n")
            .unwrap();
        assert!(
            child.wait().unwrap().success(),
            "{compiler} ({lang}) rejects xthunk.h"
        );
    }
}
