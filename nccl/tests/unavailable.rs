//! A missing or unusable library is `Unavailable`, naming every path tried and why each
//! failed. Needs nothing installed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};
use xthunk_core::Error;
use xthunk_nccl::{Flavor, Nccl, SearchConfig};

fn unavailable_reason(flavor: Flavor, cfg: &SearchConfig) -> String {
    match Nccl::load_with(flavor, cfg) {
        Err(Error::Unavailable { backend, reason }) => {
            assert_eq!(backend, flavor.name());
            reason
        }
        Err(e) => panic!("expected Unavailable, got {e}"),
        Ok(n) => panic!("expected Unavailable, loaded {}", n.describe()),
    }
}

#[test]
fn an_empty_folder_is_unavailable_naming_the_paths() {
    let a = common::scratch("empty-a");
    let b = common::scratch("empty-b");
    let reason = unavailable_reason(Flavor::Nccl, &SearchConfig::only([a.clone(), b.clone()]));
    println!("{reason}");
    for dir in [&a, &b] {
        for name in ["libnccl.so.2", "libnccl.so"] {
            let p = dir.join(name);
            assert!(
                reason.contains(&p.display().to_string()),
                "{p:?} not in: {reason}"
            );
        }
    }
    assert!(reason.contains("no such file"), "{reason}");
    let e = Nccl::load_with(Flavor::Nccl, &SearchConfig::only([a])).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("backend `nccl` is unavailable: no usable libnccl.so.2 found; tried: "),
        "{e}"
    );
}

#[test]
fn no_folder_at_all_says_so() {
    let reason = unavailable_reason(Flavor::Nccl, &SearchConfig::only([]));
    assert!(reason.contains("no folder to search"), "{reason}");
}

#[test]
fn rccl_absent_is_unavailable_naming_every_path_tried() {
    let over = common::scratch("rocm-override");
    let root = common::scratch("rocm-root");
    // The real default search (ROCM_PATH, /opt/rocm/lib, then the dynamic loader), with the
    // override and ROCm root pointing at empty folders.
    let (o, r) = (over.display().to_string(), root.display().to_string());
    let cfg = SearchConfig::from_vars(Flavor::Rccl, |k| match k {
        "XTHUNK_ROCM_PATH" => Some(o.clone()),
        "ROCM_PATH" => Some(r.clone()),
        _ => None,
    });
    match Nccl::load_with(Flavor::Rccl, &cfg) {
        Ok(n) => {
            // A machine with RCCL installed: it loads through the same table.
            println!("RCCL is installed here: {}", n.describe());
            assert_eq!(n.flavor(), Flavor::Rccl);
        }
        Err(Error::Unavailable { backend, reason }) => {
            println!("{reason}");
            assert_eq!(backend, "rccl");
            for p in [
                over.join("librccl.so.1"),
                root.join("lib").join("librccl.so.1"),
                PathBuf::from("/opt/rocm/lib/librccl.so.1"),
            ] {
                assert!(
                    reason.contains(&p.display().to_string()),
                    "{p:?} not in: {reason}"
                );
            }
            // The bare names were given to the dynamic loader, and its answer is shown.
            assert!(
                reason.contains("librccl.so.1, librccl.so (dynamic loader: ")
                    || reason.contains("librccl.so.1 (dynamic loader: "),
                "{reason}"
            );
        }
        Err(e) => panic!("expected Unavailable, got {e}"),
    }
}

#[test]
fn a_file_that_is_not_a_library_is_named_with_the_loader_error() {
    let d = common::scratch("not-elf");
    std::fs::write(d.join("libnccl.so.2"), b"not a shared object").unwrap();
    let reason = unavailable_reason(Flavor::Nccl, &SearchConfig::only([d.clone()]));
    println!("{reason}");
    let p = d.join("libnccl.so.2").display().to_string();
    let at = reason.find(&p).unwrap();
    // Its own reason (the loader's message), not "no such file".
    assert!(
        !reason[at..].starts_with(&format!("{p} (no such file")),
        "{reason}"
    );
}

/// A library that opens but is not NCCL (here the C math library, renamed) is refused with
/// the list of required symbols it lacks.
#[test]
fn a_library_without_the_symbols_is_refused_naming_them() {
    let libm = [
        "/lib/x86_64-linux-gnu/libm.so.6",
        "/usr/lib/x86_64-linux-gnu/libm.so.6",
        "/lib64/libm.so.6",
        "/usr/lib64/libm.so.6",
        "/lib/aarch64-linux-gnu/libm.so.6",
    ]
    .into_iter()
    .map(Path::new)
    .find(|p| p.is_file());
    let Some(libm) = libm else {
        common::say_skipped(
            "a_library_without_the_symbols_is_refused_naming_them",
            "no libm.so.6 found",
        );
        return;
    };
    let d = common::scratch("wrong-lib");
    std::os::unix::fs::symlink(libm, d.join("libnccl.so.2")).unwrap();
    let reason = unavailable_reason(Flavor::Nccl, &SearchConfig::only([d]));
    println!("{reason}");
    assert!(
        reason.contains("lacks required symbols ncclGetVersion, ncclGetUniqueId"),
        "{reason}"
    );
    assert!(reason.contains("ncclCommUserRank"), "{reason}");
}
