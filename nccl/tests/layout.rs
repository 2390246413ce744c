//! The hand-written declarations (`xthunk_nccl::sys`) against the real `nccl.h` of the
//! `nvidia-nccl-cu12` wheel: a small C program compiled with the C compiler prints the sizes,
//! offsets and values the header defines, and every function pointer type is assigned from
//! the header's function (a mismatch is a compile error under `-Werror`; the program links
//! against the wheel's `libnccl.so.2`). `nccl.h` includes
//! `cuda_runtime.h`, which the wheel does not ship: a three-line stand-in declares the two
//! CUDA types it uses. Skipped (printed) without the wheel or a compiler.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::HashMap;
use std::mem::{offset_of, size_of};
use xthunk_nccl::{NcclVersion, sys};

const PROGRAM: &str = r#"
#include <stddef.h>
#include <stdio.h>
#include <nccl.h>

/* Our declarations, as C: each must accept the header's function. */
typedef ncclResult_t (*get_version_t)(int *);
typedef ncclResult_t (*get_unique_id_t)(ncclUniqueId *);
typedef ncclResult_t (*init_rank_t)(ncclComm_t *, int, ncclUniqueId, int);
typedef ncclResult_t (*init_rank_config_t)(ncclComm_t *, int, ncclUniqueId, int, ncclConfig_t *);
typedef ncclResult_t (*split_t)(ncclComm_t, int, int, ncclComm_t *, ncclConfig_t *);
typedef ncclResult_t (*comm_t)(ncclComm_t);
typedef const char *(*error_string_t)(ncclResult_t);
typedef const char *(*last_error_t)(ncclComm_t);
typedef ncclResult_t (*async_error_t)(ncclComm_t, ncclResult_t *);
typedef ncclResult_t (*count_t)(const ncclComm_t, int *);
typedef ncclResult_t (*all_reduce_t)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
typedef ncclResult_t (*all_gather_t)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
typedef ncclResult_t (*broadcast_t)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
typedef ncclResult_t (*send_t)(const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
typedef ncclResult_t (*recv_t)(void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
typedef ncclResult_t (*group_t)(void);

int main(void) {
    get_version_t f0 = ncclGetVersion; get_unique_id_t f1 = ncclGetUniqueId;
    init_rank_t f2 = ncclCommInitRank; init_rank_config_t f3 = ncclCommInitRankConfig;
    split_t f4 = ncclCommSplit; comm_t f5 = ncclCommFinalize, f6 = ncclCommDestroy,
    f7 = ncclCommAbort; error_string_t f8 = ncclGetErrorString; last_error_t f9 = ncclGetLastError;
    async_error_t f10 = ncclCommGetAsyncError; count_t f11 = ncclCommCount, f12 = ncclCommUserRank;
    all_reduce_t f13 = ncclAllReduce, f14 = ncclReduceScatter; all_gather_t f15 = ncclAllGather;
    broadcast_t f16 = ncclBroadcast; send_t f17 = ncclSend; recv_t f18 = ncclRecv;
    group_t f19 = ncclGroupStart, f20 = ncclGroupEnd;
    void *all[] = {(void *)f0, (void *)f1, (void *)f2, (void *)f3, (void *)f4, (void *)f5,
        (void *)f6, (void *)f7, (void *)f8, (void *)f9, (void *)f10, (void *)f11, (void *)f12,
        (void *)f13, (void *)f14, (void *)f15, (void *)f16, (void *)f17, (void *)f18,
        (void *)f19, (void *)f20};
    (void)all;

    ncclConfig_t init = NCCL_CONFIG_INITIALIZER;
    printf("sizeof_unique_id %zu\n", sizeof(ncclUniqueId));
    printf("NCCL_UNIQUE_ID_BYTES %d\n", NCCL_UNIQUE_ID_BYTES);
    printf("sizeof_config %zu\n", sizeof(ncclConfig_t));
    printf("offset_size %zu\n", offsetof(ncclConfig_t, size));
    printf("offset_magic %zu\n", offsetof(ncclConfig_t, magic));
    printf("offset_version %zu\n", offsetof(ncclConfig_t, version));
    printf("offset_blocking %zu\n", offsetof(ncclConfig_t, blocking));
    printf("offset_cgaClusterSize %zu\n", offsetof(ncclConfig_t, cgaClusterSize));
    printf("init_size %zu\n", init.size);
    printf("init_magic %u\n", init.magic);
    printf("init_version %u\n", init.version);
    printf("init_blocking %d\n", init.blocking);
    printf("NCCL_API_MAGIC %u\n", (unsigned)NCCL_API_MAGIC);
    printf("NCCL_CONFIG_UNDEF_INT %d\n", NCCL_CONFIG_UNDEF_INT);
    printf("NCCL_SPLIT_NOCOLOR %d\n", NCCL_SPLIT_NOCOLOR);
    printf("NCCL_VERSION_CODE %d\n", NCCL_VERSION_CODE);
    printf("V_2_8_4 %d\n", NCCL_VERSION(2, 8, 4));
    printf("V_2_14_0 %d\n", NCCL_VERSION(2, 14, 0));
    printf("V_2_32_3 %d\n", NCCL_VERSION(2, 32, 3));
    printf("sizeof_result %zu\n", sizeof(ncclResult_t));
    printf("sizeof_datatype %zu\n", sizeof(ncclDataType_t));
    printf("sizeof_redop %zu\n", sizeof(ncclRedOp_t));
    printf("sizeof_comm %zu\n", sizeof(ncclComm_t));
    printf("sizeof_stream %zu\n", sizeof(cudaStream_t));
#define P(x) printf(#x " %d\n", (int)(x))
    P(ncclSuccess); P(ncclUnhandledCudaError); P(ncclSystemError); P(ncclInternalError);
    P(ncclInvalidArgument); P(ncclInvalidUsage); P(ncclRemoteError); P(ncclInProgress);
    P(ncclTimeout);
    P(ncclInt8); P(ncclUint8); P(ncclInt32); P(ncclUint32); P(ncclInt64); P(ncclUint64);
    P(ncclFloat16); P(ncclFloat32); P(ncclFloat64); P(ncclBfloat16);
    P(ncclSum); P(ncclProd); P(ncclMax); P(ncclMin);
    return 0;
}
"#;

/// Compiles and runs the program; `None` (printed) when something needed is missing.
fn header_facts(test: &str) -> Option<HashMap<String, i64>> {
    let header = common::wheel_header(test)?;
    let include = header.parent()?.to_path_buf();
    let lib = include.parent()?.join("lib");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let dir = common::scratch(test);
    let stubs = dir.join("cuda");
    std::fs::create_dir_all(&stubs).unwrap();
    std::fs::write(
        stubs.join("cuda_runtime.h"),
        "#define CUDART_VERSION 12000\n\
         typedef struct CUstream_st *cudaStream_t;\n\
         typedef struct CUevent_st *cudaEvent_t;\n",
    )
    .unwrap();
    std::fs::write(stubs.join("cuda_fp16.h"), "").unwrap();
    std::fs::write(stubs.join("cuda_bf16.h"), "").unwrap();
    let src = dir.join("layout.c");
    std::fs::write(&src, PROGRAM).unwrap();
    let exe = dir.join("layout");
    let out = std::process::Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Werror"])
        .arg("-I")
        .arg(&stubs)
        .arg("-I")
        .arg(&include)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        // The function pointers are taken from the wheel's library itself.
        .arg(format!("-L{}", lib.display()))
        .arg("-l:libnccl.so.2")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .output();
    match out {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!(
            "{test}: {cc} rejected the layout program against {}:\n{}",
            header.display(),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => {
            common::skip_no_cc(test, &format!("no C compiler ({cc}: {e})"));
            return None;
        }
    }
    let run = std::process::Command::new(&exe).output().unwrap();
    assert!(run.status.success(), "{test}: the layout program failed");
    let text = String::from_utf8(run.stdout).unwrap();
    println!("{} says:\n{text}", header.display());
    Some(
        text.lines()
            .filter_map(|l| {
                let (k, v) = l.split_once(' ')?;
                Some((k.to_string(), v.trim().parse().ok()?))
            })
            .collect(),
    )
}

#[test]
fn declarations_match_the_wheel_header() {
    let Some(h) = header_facts("declarations_match_the_wheel_header") else {
        return;
    };
    let get = |k: &str| {
        *h.get(k)
            .unwrap_or_else(|| panic!("{k} missing from the program output"))
    };

    // ncclUniqueId: 128 bytes, passed by value.
    assert_eq!(get("sizeof_unique_id"), 128);
    assert_eq!(
        get("NCCL_UNIQUE_ID_BYTES"),
        sys::NCCL_UNIQUE_ID_BYTES as i64
    );
    assert_eq!(size_of::<sys::ncclUniqueId>(), 128);
    assert_eq!(xthunk_nccl::UNIQUE_ID_BYTES, 128);

    // The smallest ncclConfig_t is a prefix of the header's: same leading fields at the same
    // offsets, and the initializer puts size, magic and version first.
    type C = sys::ncclConfig_v21400;
    assert_eq!(get("offset_size"), offset_of!(C, size) as i64);
    assert_eq!(get("offset_magic"), offset_of!(C, magic) as i64);
    assert_eq!(get("offset_version"), offset_of!(C, version) as i64);
    assert_eq!(get("offset_blocking"), offset_of!(C, blocking) as i64);
    assert!(get("offset_cgaClusterSize") >= (offset_of!(C, blocking) + 4) as i64);
    assert_eq!(size_of::<C>(), 24);
    assert!(get("sizeof_config") >= size_of::<C>() as i64);
    let ours = C::new(true);
    assert_eq!(get("init_size"), get("sizeof_config"));
    assert_eq!(get("init_magic"), i64::from(ours.magic));
    assert_eq!(get("NCCL_API_MAGIC"), i64::from(sys::NCCL_API_MAGIC));
    assert_eq!(get("init_version"), get("NCCL_VERSION_CODE"));
    assert_eq!(get("init_blocking"), i64::from(sys::NCCL_CONFIG_UNDEF_INT));
    assert_eq!(
        get("NCCL_CONFIG_UNDEF_INT"),
        i64::from(sys::NCCL_CONFIG_UNDEF_INT)
    );
    assert_eq!(
        get("NCCL_SPLIT_NOCOLOR"),
        i64::from(sys::NCCL_SPLIT_NOCOLOR)
    );
    // Our config's version is NCCL_VERSION(2, 14, 0), the layout it has.
    assert_eq!(get("V_2_14_0"), i64::from(ours.version));

    // The version encoding, both forms.
    for (k, v) in [
        ("V_2_8_4", NcclVersion::new(2, 8, 4)),
        ("V_2_14_0", NcclVersion::new(2, 14, 0)),
        ("V_2_32_3", NcclVersion::new(2, 32, 3)),
    ] {
        assert_eq!(get(k), i64::from(v.code()), "{k}");
        assert_eq!(NcclVersion::from_code(get(k) as i32), Some(v), "{k}");
    }
    let code = get("NCCL_VERSION_CODE") as i32;
    println!(
        "header version: {code} = {:?}",
        NcclVersion::from_code(code)
    );
    assert!(NcclVersion::from_code(code).is_some());

    // Enumerations are ints; handles are pointers.
    for k in ["sizeof_result", "sizeof_datatype", "sizeof_redop"] {
        assert_eq!(get(k), size_of::<std::ffi::c_int>() as i64, "{k}");
    }
    assert_eq!(get("sizeof_comm"), size_of::<sys::ncclComm_t>() as i64);
    assert_eq!(get("sizeof_stream"), size_of::<sys::cudaStream_t>() as i64);

    // Every value xthunk uses.
    for (k, v) in [
        ("ncclSuccess", sys::ncclSuccess),
        ("ncclUnhandledCudaError", sys::ncclUnhandledCudaError),
        ("ncclSystemError", sys::ncclSystemError),
        ("ncclInternalError", sys::ncclInternalError),
        ("ncclInvalidArgument", sys::ncclInvalidArgument),
        ("ncclInvalidUsage", sys::ncclInvalidUsage),
        ("ncclRemoteError", sys::ncclRemoteError),
        ("ncclInProgress", sys::ncclInProgress),
        ("ncclTimeout", sys::ncclTimeout),
        ("ncclInt8", sys::ncclInt8),
        ("ncclUint8", sys::ncclUint8),
        ("ncclInt32", sys::ncclInt32),
        ("ncclUint32", sys::ncclUint32),
        ("ncclInt64", sys::ncclInt64),
        ("ncclUint64", sys::ncclUint64),
        ("ncclFloat16", sys::ncclFloat16),
        ("ncclFloat32", sys::ncclFloat32),
        ("ncclFloat64", sys::ncclFloat64),
        ("ncclBfloat16", sys::ncclBfloat16),
        ("ncclSum", sys::ncclSum),
        ("ncclProd", sys::ncclProd),
        ("ncclMax", sys::ncclMax),
        ("ncclMin", sys::ncclMin),
    ] {
        assert_eq!(get(k), i64::from(v), "{k}");
    }
    // The result mapping names every result code by its header name.
    for k in [
        "ncclSuccess",
        "ncclUnhandledCudaError",
        "ncclSystemError",
        "ncclInternalError",
        "ncclInvalidArgument",
        "ncclInvalidUsage",
        "ncclRemoteError",
        "ncclInProgress",
        "ncclTimeout",
    ] {
        assert_eq!(xthunk_nccl::result_info(get(k) as i32).0, k);
    }
}
