//! Against the real `libnccl.so.2` of the PyPI wheel `nvidia-nccl-cu12` (no GPU needed): it
//! loads through the one table, reports its version, makes unique ids, and its error strings
//! come through the result mapping. Skipped visibly without the wheel (`XTHUNK_REQUIRE_NCCL=1`
//! makes that a failure).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use xthunk_core::Error;
use xthunk_nccl::{Flavor, Nccl, NcclVersion, SearchConfig, UNIQUE_ID_BYTES};

fn wheel_nccl(test: &str) -> Option<Arc<Nccl>> {
    let dir = common::wheel_lib_dir(test)?;
    match Nccl::load_with(Flavor::Nccl, &SearchConfig::only([dir])) {
        Ok(n) => Some(n),
        Err(e) => panic!("{test}: the wheel is installed but does not load: {e}"),
    }
}

#[test]
fn loads_the_wheel_and_reports_its_version() {
    let Some(nccl) = wheel_nccl("loads_the_wheel_and_reports_its_version") else {
        return;
    };
    let v = nccl.version();
    println!("loaded {} (ncclGetVersion = {})", nccl.describe(), v.code());
    assert_eq!(nccl.flavor(), Flavor::Nccl);
    assert!(
        nccl.path().ends_with("libnccl.so.2"),
        "{}",
        nccl.path().display()
    );
    assert!(v >= xthunk_nccl::MIN_VERSION);
    // The library and its header come from one wheel: the versions agree.
    if let Some(h) = common::wheel_root().map(|r| r.join("include/nccl.h"))
        && let Some(code) = common::header_version_code(&h)
    {
        assert_eq!(Some(v), NcclVersion::from_code(code), "header says {code}");
        println!("nccl.h NCCL_VERSION_CODE = {code} = {v}");
    }
    // The wheel is 2.2x or later: every optional feature is there.
    if v >= NcclVersion::new(2, 18, 0) {
        assert!(nccl.supports_config());
        assert!(nccl.supports_split());
        assert!(nccl.supports_finalize());
        assert!(nccl.supports_bf16());
    }
}

#[test]
fn unique_ids_are_made_and_differ() {
    let Some(nccl) = wheel_nccl("unique_ids_are_made_and_differ") else {
        return;
    };
    let a = nccl.unique_id().unwrap();
    let b = nccl.unique_id().unwrap();
    assert_eq!(a.len(), UNIQUE_ID_BYTES);
    let nonzero = a.iter().filter(|&&x| x != 0).count();
    println!("ncclGetUniqueId: {nonzero} of {UNIQUE_ID_BYTES} bytes non-zero");
    assert!(nonzero > 0, "an all-zero unique id");
    assert_ne!(a, b, "two unique ids are equal");
}

#[test]
fn error_strings_come_from_the_library() {
    let Some(nccl) = wheel_nccl("error_strings_come_from_the_library") else {
        return;
    };
    for code in 0..=8 {
        let s = nccl.error_string(code);
        println!(
            "ncclGetErrorString({code}) = {s:?} [{}]",
            xthunk_nccl::describe_result(code)
        );
        assert!(s.is_some_and(|s| !s.is_empty()), "code {code}");
    }
}

#[test]
fn the_environment_search_finds_the_wheel() {
    // With no override, the default search covers `$XTHUNK_PIP_PREFIX` (or
    // `$HOME/.cache/xthunk/pip`), where the wheel is installed.
    if common::wheel_lib_dir("the_environment_search_finds_the_wheel").is_none() {
        return;
    }
    let nccl = Nccl::load(Flavor::Nccl).unwrap();
    println!("Nccl::load(Nccl) = {}", nccl.describe());
    // Loaded once per process: the same table comes back.
    assert!(Arc::ptr_eq(&nccl, &Nccl::load(Flavor::Nccl).unwrap()));
}

#[test]
fn bad_arguments_are_refused_before_the_library() {
    let Some(nccl) = wheel_nccl("bad_arguments_are_refused_before_the_library") else {
        return;
    };
    let id = [0u8; UNIQUE_ID_BYTES];
    for (n, r) in [(0, 0), (2, 2)] {
        let e = nccl.init_rank(n, &id, r).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    }
}

/// Without a GPU, `ncclCommInitRank` fails at its first CUDA call (before any network
/// bootstrap): the error names the library, the call and the result. On a machine with a GPU,
/// a single-rank communicator is made and dropped instead.
#[test]
fn single_rank_init_succeeds_on_a_gpu_or_fails_clearly() {
    let Some(nccl) = wheel_nccl("single_rank_init_succeeds_on_a_gpu_or_fails_clearly") else {
        return;
    };
    let id = nccl.unique_id().unwrap();
    match nccl.init_rank(1, &id, 0) {
        Ok(c) => {
            use xthunk_core::collectives::Communicator;
            println!("a GPU is here: single-rank communicator {c:?}");
            assert_eq!((c.rank(), c.size()), (0, 1));
            c.async_error().unwrap();
        }
        Err(e) => {
            let msg = e.to_string();
            println!("without a GPU: {msg}");
            assert!(matches!(e, Error::Backend { .. }), "{e:?}");
            assert!(
                msg.starts_with("nccl: ncclCommInitRank failed: nccl"),
                "{msg}"
            );
        }
    }
}

/// The same through `ncclCommInitRankConfig` with xthunk's smallest `ncclConfig_t`
/// (`blocking = 0`): without a GPU the failure arrives (synchronously or through
/// `ncclCommGetAsyncError`) as a clear error, within the timeout, and nothing is left behind.
#[test]
fn nonblocking_single_rank_init_succeeds_on_a_gpu_or_fails_clearly() {
    let test = "nonblocking_single_rank_init_succeeds_on_a_gpu_or_fails_clearly";
    let Some(nccl) = wheel_nccl(test) else {
        return;
    };
    let id = nccl.unique_id().unwrap();
    let bound = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let b = bound.clone();
    let options = xthunk_nccl::CommOptions::nonblocking(Some(std::time::Duration::from_secs(30)))
        .with_bind_device(move || {
            b.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        });
    let start = std::time::Instant::now();
    let r = nccl.init_rank_with(1, &id, 0, &options);
    assert_eq!(
        bound.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the device hook runs once"
    );
    match r {
        Ok(c) => {
            use xthunk_core::collectives::Communicator;
            println!("a GPU is here: non-blocking single-rank communicator {c:?}");
            assert!(c.is_nonblocking());
            assert_eq!((c.rank(), c.size()), (0, 1));
            c.async_error().unwrap();
            c.finalize().unwrap();
        }
        Err(e) => {
            let msg = e.to_string();
            println!("without a GPU ({:?}): {msg}", start.elapsed());
            assert!(matches!(e, Error::Backend { .. }), "{e:?}");
            assert!(
                msg.starts_with("nccl: ncclCommInitRankConfig failed: nccl"),
                "{msg}"
            );
            // NCCL checks CUDA before it reads the configuration, so without a GPU this does
            // not validate the `ncclConfig_t` layout (tests/layout.rs checks it against the
            // header); it must at least not be refused for it.
            assert!(!msg.contains("ncclConfig_t"), "{msg}");
        }
    }
}
