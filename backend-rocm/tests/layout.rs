//! The hand-written declarations against the vendor headers: a tiny C program, compiled with
//! the system C compiler, prints the sizes, offsets and enum values `xthunk_rocm::sys` hard
//! codes, from
//!
//! - ROCm 5.2's real `hip/hip_runtime_api.h`, `hip/hiprtc.h` and `amd_comgr.h` (Debian's
//!   `libamdhip64-dev`, `libamd-comgr-dev`) when installed, and
//! - `tests/fixtures/rocm6_device_prop.h`, a transcription of ROCm 6's `hipDeviceProp_tR0600`
//!   and `hipDeviceAttribute_t` (Debian has no ROCm 6 headers), always.
//!
//! Without a C compiler, or without the headers, the affected part prints why it is skipped.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{TempDir, note};
use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::process::Command;
use xthunk_rocm::sys;

fn skip(test: &str, why: &str) {
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
}

/// Compiles and runs `program`, returning its `name value` lines.
fn run_c(test: &str, program: &str, include: &[&Path]) -> Option<BTreeMap<String, i64>> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let dir = TempDir::new("layout");
    let src = dir.path().join("layout.c");
    let exe = dir.path().join("layout");
    std::fs::write(&src, program).unwrap();
    let mut cmd = Command::new(&cc);
    for i in include {
        cmd.arg("-I").arg(i);
    }
    let out = match cmd.arg(&src).arg("-o").arg(&exe).output() {
        Ok(o) => o,
        Err(e) => {
            skip(test, &format!("no C compiler `{cc}` ({e}); install gcc"));
            return None;
        }
    };
    assert!(
        out.status.success(),
        "{test}: compiling failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success());
    Some(
        String::from_utf8_lossy(&run.stdout)
            .lines()
            .filter_map(|l| {
                let (k, v) = l.split_once(' ')?;
                Some((k.to_string(), v.trim().parse().ok()?))
            })
            .collect(),
    )
}

fn check(values: &BTreeMap<String, i64>, expected: &[(&str, i64)]) {
    for (name, want) in expected {
        assert_eq!(values.get(*name), Some(want), "{name}");
    }
}

#[test]
fn rocm6_device_prop_layout_matches_the_fixture() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let program = r#"
#include "rocm6_device_prop.h"
#include <stdio.h>
#define OFF(f) printf(#f " %zu\n", offsetof(xt6_hipDeviceProp_tR0600, f))
int main(void) {
  printf("size %zu\n", sizeof(xt6_hipDeviceProp_tR0600));
  OFF(gcnArchName);
  printf("MultiprocessorCount %d\n", (int)xt6_hipDeviceAttributeMultiprocessorCount);
  printf("WarpSize %d\n", (int)xt6_hipDeviceAttributeWarpSize);
  printf("ManagedMemory %d\n", (int)xt6_hipDeviceAttributeManagedMemory);
  return 0;
}
"#;
    let Some(v) = run_c("rocm6_device_prop_layout", program, &[&fixtures]) else {
        return;
    };
    note(&format!("ROCm 6 layout (fixture): {v:?}"));
    check(
        &v,
        &[
            ("size", sys::props_r0600::SIZE as i64),
            ("gcnArchName", sys::props_r0600::GCN_ARCH_NAME as i64),
            (
                "MultiprocessorCount",
                sys::hipDeviceAttributeMultiprocessorCount as i64,
            ),
            ("WarpSize", sys::hipDeviceAttributeWarpSize as i64),
            ("ManagedMemory", sys::hipDeviceAttributeManagedMemory as i64),
        ],
    );
}

#[test]
fn declarations_match_the_installed_rocm5_headers() {
    let test = "declarations_match_the_installed_rocm5_headers";
    let inc = Path::new("/usr/include");
    if !inc.join("hip/hip_runtime_api.h").exists() {
        return skip(
            test,
            "no /usr/include/hip/hip_runtime_api.h (install libamdhip64-dev)",
        );
    }
    let comgr = inc.join("amd_comgr.h").exists();
    let program = format!(
        r#"
#define __HIP_PLATFORM_AMD__ 1
#include <hip/hip_runtime_api.h>
#include <hip/hiprtc.h>
{comgr_include}
#include <stdio.h>
#include <stddef.h>
#define V(x) printf(#x " %lld\n", (long long)(x))
int main(void) {{
  printf("size %zu\n", sizeof(hipDeviceProp_t));
  printf("gcnArchName %zu\n", offsetof(hipDeviceProp_t, gcnArchName));
  printf("gcnArchNameLen %zu\n", sizeof(((hipDeviceProp_t*)0)->gcnArchName));
  V(hipSuccess); V(hipErrorNoDevice); V(hipErrorInvalidDevice); V(hipErrorNotReady);
  V(hipErrorStreamCaptureUnsupported); V(hipErrorStreamCaptureInvalidated);
  V(hipErrorOutOfMemory);
  V(hipMemcpyDeviceToDevice); V(hipMemcpyDefault);
  V(hipHostMallocPortable); V(hipHostMallocMapped); V(hipMemAttachGlobal);
  V(hipStreamNonBlocking); V(hipEventDisableTiming); V(hipStreamCaptureModeThreadLocal);
  V(hipDeviceAttributeManagedMemory); V(hipDeviceAttributeMultiprocessorCount);
  V(hipDeviceAttributeWarpSize);
  V(HIPRTC_SUCCESS); V(HIPRTC_ERROR_COMPILATION);
  V(sizeof(hipError_t)); V(sizeof(hipDeviceAttribute_t)); V(sizeof(hipMemcpyKind));
  V(sizeof(hiprtcResult)); V(sizeof(hipStreamCaptureMode)); V(sizeof(hipDeviceptr_t));
  {comgr_values}
  return 0;
}}
"#,
        comgr_include = if comgr { "#include <amd_comgr.h>" } else { "" },
        comgr_values = if comgr {
            "V(AMD_COMGR_STATUS_SUCCESS); V(sizeof(amd_comgr_status_t));"
        } else {
            ""
        },
    );
    let Some(v) = run_c(test, &program, &[inc]) else {
        return;
    };
    note(&format!("ROCm 5.2 headers: {v:?}"));
    check(
        &v,
        &[
            ("size", sys::props_r0000::SIZE as i64),
            ("gcnArchName", sys::props_r0000::GCN_ARCH_NAME as i64),
            ("gcnArchNameLen", sys::GCN_ARCH_NAME_LEN as i64),
            ("hipSuccess", sys::hipSuccess as i64),
            ("hipErrorNoDevice", sys::hipErrorNoDevice as i64),
            ("hipErrorInvalidDevice", sys::hipErrorInvalidDevice as i64),
            ("hipErrorNotReady", sys::hipErrorNotReady as i64),
            (
                "hipErrorStreamCaptureUnsupported",
                sys::hipErrorStreamCaptureUnsupported as i64,
            ),
            (
                "hipErrorStreamCaptureInvalidated",
                sys::hipErrorStreamCaptureInvalidated as i64,
            ),
            ("hipErrorOutOfMemory", 2),
            (
                "hipMemcpyDeviceToDevice",
                sys::hipMemcpyDeviceToDevice as i64,
            ),
            ("hipMemcpyDefault", sys::hipMemcpyDefault as i64),
            ("hipHostMallocPortable", sys::hipHostMallocPortable as i64),
            ("hipHostMallocMapped", sys::hipHostMallocMapped as i64),
            ("hipMemAttachGlobal", sys::hipMemAttachGlobal as i64),
            ("hipStreamNonBlocking", sys::hipStreamNonBlocking as i64),
            ("hipEventDisableTiming", sys::hipEventDisableTiming as i64),
            (
                "hipStreamCaptureModeThreadLocal",
                sys::hipStreamCaptureModeThreadLocal as i64,
            ),
            (
                "hipDeviceAttributeManagedMemory",
                sys::hipDeviceAttributeManagedMemory as i64,
            ),
            (
                "hipDeviceAttributeMultiprocessorCount",
                sys::hipDeviceAttributeMultiprocessorCount as i64,
            ),
            (
                "hipDeviceAttributeWarpSize",
                sys::hipDeviceAttributeWarpSize as i64,
            ),
            ("HIPRTC_SUCCESS", sys::HIPRTC_SUCCESS as i64),
            ("HIPRTC_ERROR_COMPILATION", 6),
            // Enums are plain ints; pointers are 8 bytes.
            ("sizeof(hipError_t)", 4),
            ("sizeof(hipDeviceAttribute_t)", 4),
            ("sizeof(hipMemcpyKind)", 4),
            ("sizeof(hiprtcResult)", 4),
            ("sizeof(hipStreamCaptureMode)", 4),
            ("sizeof(hipDeviceptr_t)", 8),
        ],
    );
    if comgr {
        check(
            &v,
            &[
                (
                    "AMD_COMGR_STATUS_SUCCESS",
                    sys::AMD_COMGR_STATUS_SUCCESS as i64,
                ),
                ("sizeof(amd_comgr_status_t)", 4),
            ],
        );
    } else {
        skip(
            test,
            "no /usr/include/amd_comgr.h (install libamd-comgr-dev): comgr constants unchecked",
        );
    }
    // Every hipError_t name the header defines is mapped to the same number in `result`.
    let header = std::fs::read_to_string(inc.join("hip/hip_runtime_api.h")).unwrap();
    let mut checked = 0;
    for line in header.lines() {
        let l = line.trim();
        let Some(rest) = l.strip_prefix("hipError") else {
            continue;
        };
        let Some((name, value)) = rest.split_once('=') else {
            continue;
        };
        let name = format!("hipError{}", name.trim());
        let value = value
            .trim()
            .trim_end_matches(',')
            .split_whitespace()
            .next()
            .unwrap_or("");
        let Ok(code) = value.trim_end_matches(',').parse::<i32>() else {
            continue;
        };
        let (mapped, _) = xthunk_rocm::result::hip_error_info(code);
        // Deprecated aliases share a number with their replacement.
        let aliases = [
            ("hipErrorMemoryAllocation", "hipErrorOutOfMemory"),
            ("hipErrorInitializationError", "hipErrorNotInitialized"),
            ("hipErrorMapBufferObjectFailed", "hipErrorMapFailed"),
            ("hipErrorInvalidResourceHandle", "hipErrorInvalidHandle"),
        ];
        let want = aliases
            .iter()
            .find(|(a, _)| *a == name)
            .map(|(_, r)| r.to_string())
            .unwrap_or(name.clone());
        assert_eq!(mapped, want, "code {code}");
        checked += 1;
    }
    assert!(
        checked > 60,
        "only {checked} hipError_t values found in the header"
    );
}
