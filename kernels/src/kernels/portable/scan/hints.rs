//! What the portable-source scan refuses, by identifier, and what to write instead.

/// What an identifier that only one vendor (or one compiler) has should be replaced with, or
/// `None` for an identifier of the subset.
pub(super) fn vendor_hint(id: &str) -> Option<&'static str> {
    let upper_after = |p: &str| {
        id.strip_prefix(p)
            .and_then(|r| r.chars().next())
            .is_some_and(|c| c.is_ascii_uppercase())
    };
    Some(
        if matches!(id, "__shfl" | "__shfl_up" | "__shfl_down" | "__shfl_xor") {
            "the shuffles without a mask are gone from CUDA: use __shfl_sync, __shfl_up_sync, __shfl_down_sync, __shfl_xor_sync (full mask) or xt_shfl*"
        } else if id.starts_with("__shfl") && !is_cuda_warp_op(id) {
            "use __shfl_sync, __shfl_up_sync, __shfl_down_sync or __shfl_xor_sync"
        } else if matches!(id, "__ballot" | "__any" | "__all") {
            "the warp votes without a mask are gone from CUDA: use __ballot_sync, __any_sync, __all_sync (full mask) or xt_ballot, xt_any, xt_all"
        } else if id == "__activemask" {
            "the active lanes differ between targets: keep the warp converged and use a full mask"
        } else if id == "__uni_sync" || id.starts_with("__match_") || id.starts_with("__reduce_") {
            "use a shuffle butterfly, cg::reduce, or the xt_warp_* operations with converged lanes"
        } else if id.strip_prefix("atomic").is_some_and(|r| {
            let op = r.split('_').next().unwrap_or("");
            matches!(
                op,
                "Add"
                    | "Sub"
                    | "Exch"
                    | "Min"
                    | "Max"
                    | "Inc"
                    | "Dec"
                    | "CAS"
                    | "And"
                    | "Or"
                    | "Xor"
            ) && matches!(r.strip_prefix(op), Some("_block" | "_system"))
        }) {
            "the scoped atomics are CUDA-only: use the device-wide atomicAdd, atomicCAS, ... (or xt_atomic_*)"
        } else if is_paired_half(id) {
            "paired halves (__half2, __nv_bfloat162, half2 and their intrinsics) are not covered: use two __half / __nv_bfloat16 values"
        } else if id.starts_with("__h") && id != "__host__" && !is_cuda_half_op(id) {
            "this half-precision intrinsic is not covered: compute in float (__half2float, __float2half) or use the covered ones docs/kernels.md lists"
        } else if (id.starts_with("__half")
            || id.starts_with("__nv_")
            || id.starts_with("__float2half")
            || id.starts_with("__float2bfloat16")
            || id.starts_with("__bfloat16")
            || id == "hip_bfloat16"
            || id == "_Float16")
            && !is_cuda_half_name(id)
        {
            "use __half / __nv_bfloat16 with the conversions of cuda_fp16.h / cuda_bf16.h that docs/kernels.md lists, or xt_f16 / xt_bf16"
        } else if upper_after("cuda") || upper_after("hip") || upper_after("cu") {
            "vendor API calls are not available in kernels"
        } else if matches!(id, "asm" | "__asm__" | "__asm") {
            "inline assembly is vendor-specific"
        } else if id.starts_with("__popc") || id.starts_with("__clz") {
            "use xt_popc, xt_popcll, xt_clz or xt_clzll"
        } else if matches!(
            id,
            "__float_as_uint"
                | "__uint_as_float"
                | "__float_as_int"
                | "__int_as_float"
                | "__double_as_longlong"
                | "__longlong_as_double"
        ) {
            "use xt_f32_bits, xt_bits_f32, xt_f64_bits or xt_bits_f64"
        } else if matches!(id, "min" | "max" | "umin" | "umax" | "llmin" | "llmax") {
            "use xt_min / xt_max (every numeric type), or fminf / fmaxf"
        } else if matches!(
            id,
            "printf" | "clock" | "clock64" | "__trap" | "assert" | "__brkpt"
        ) {
            "no printing, clocks or traps in portable kernels: write to an output buffer"
        } else if is_rounded_intrinsic(id) {
            "explicitly rounded arithmetic is vendor-specific: write the operation (contraction is off everywhere)"
        } else if is_vector_type(id) {
            "this vector type is not covered: use the 1- to 4-element vectors of char, uchar, short, ushort, int, uint, long, ulong, longlong, ulonglong, float, double"
        } else if matches!(
            id,
            "erfinvf"
                | "erfinv"
                | "erfcinvf"
                | "erfcinv"
                | "normcdff"
                | "normcdf"
                | "normcdfinvf"
                | "normcdfinv"
                | "rcbrtf"
                | "rcbrt"
                | "sincospif"
                | "sincospi"
        ) {
            "not a C math function: the portable subset has the C library's float and double math"
        } else if id.starts_with("__builtin_") || id.starts_with("__nvvm") {
            "compiler builtins differ between NVRTC, hipRTC and the CPU compiler (bit counts: xt_popc, xt_clz)"
        } else if matches!(
            id,
            "__CUDA_ARCH__" | "__HIP_DEVICE_COMPILE__" | "__HIP_PLATFORM_AMD__" | "__CUDACC__"
        ) {
            "branch on XT_CUDA / XT_HIP / XT_CPU if you must"
        } else {
            return None;
        },
    )
}

/// `__fadd_rn`, `__dmul_rz`, `__fmaf_rd`, ...: arithmetic with an explicit rounding mode.
fn is_rounded_intrinsic(id: &str) -> bool {
    let Some(r) = id.strip_prefix("__") else {
        return false;
    };
    let Some((op, mode)) = r.rsplit_once('_') else {
        return false;
    };
    matches!(mode, "rn" | "rz" | "ru" | "rd")
        && (op.starts_with('f') || op.starts_with('d'))
        && op.len() > 1
        && op[1..].chars().all(|c| c.is_ascii_lowercase())
}

/// `float2`, `int4`, `make_uint3`, `double2`, ...: CUDA/HIP vector types.
fn is_vector_type(id: &str) -> bool {
    let base = id.strip_prefix("make_").unwrap_or(id);
    let Some(n) = base.chars().last() else {
        return false;
    };
    let stem = &base[..base.len() - 1];
    matches!(n, '1'..='4')
        && matches!(
            stem,
            "float"
                | "double"
                | "int"
                | "uint"
                | "short"
                | "ushort"
                | "char"
                | "uchar"
                | "long"
                | "ulong"
                | "longlong"
                | "ulonglong"
                | "half"
                | "bfloat16"
        )
        && !is_covered_vector(base)
}

/// CUDA's warp operations with a mask that the subset accepts (`cuda.cuh`).
fn is_cuda_warp_op(id: &str) -> bool {
    matches!(
        id,
        "__shfl_sync" | "__shfl_up_sync" | "__shfl_down_sync" | "__shfl_xor_sync"
    )
}

/// The names of `cuda_fp16.h` / `cuda_bf16.h` that the subset accepts (`cuda.cuh`).
pub(super) fn is_cuda_half_name(id: &str) -> bool {
    matches!(
        id,
        "__half"
            | "__nv_bfloat16"
            | "__float2half"
            | "__float2half_rn"
            | "__double2half"
            | "__half2float"
            | "__int2half_rn"
            | "__float2bfloat16"
            | "__float2bfloat16_rn"
            | "__double2bfloat16"
            | "__bfloat162float"
            | "__int2bfloat16_rn"
            | "__half_as_ushort"
            | "__ushort_as_half"
            | "__bfloat16_as_ushort"
            | "__ushort_as_bfloat16"
    )
}

/// `__half2`, `__nv_bfloat162`, `half2`, `__hadd2`, `__floats2half2_rn`, ...: two halves in
/// one 32-bit value, which the subset does not cover.
fn is_paired_half(id: &str) -> bool {
    matches!(
        id,
        "__half2"
            | "__nv_bfloat162"
            | "half2"
            | "nv_bfloat162"
            | "__halves2half2"
            | "__halves2bfloat162"
    ) || (id.starts_with("__h") && id.ends_with('2') && id.len() > 4)
        || id.contains("2half2")
        || id.contains("2bfloat162")
        || id.starts_with("__low2")
        || id.starts_with("__high2")
}

/// The vector types (and `make_*`) NVRTC and hipRTC have built in and the CPU prelude
/// defines: every stem but `half` and `bfloat16`, 1 to 4 elements.
fn is_covered_vector(base: &str) -> bool {
    let stem = &base[..base.len().saturating_sub(1)];
    !matches!(stem, "half" | "bfloat16")
}

/// The arithmetic intrinsics of `cuda_fp16.h` / `cuda_bf16.h` that the subset accepts
/// (`cuda.cuh`), and the names starting `__h` that are not intrinsics.
fn is_cuda_half_op(id: &str) -> bool {
    is_cuda_half_name(id)
        || matches!(
            id,
            "__hadd"
                | "__hsub"
                | "__hmul"
                | "__hdiv"
                | "__hneg"
                | "__habs"
                | "__hfma"
                | "__hmax"
                | "__hmin"
                | "__heq"
                | "__hne"
                | "__hlt"
                | "__hle"
                | "__hgt"
                | "__hge"
                | "__hisnan"
                | "__hisinf"
        )
}
