#!/usr/bin/env bash
# Runs a command with xthunk's driver emulator (emulator/, crate xthunk-emulator) standing in
# for the GPU libraries, so the CUDA and ROCm backends' execution paths run without a GPU:
#
#   ci/with-emulator.sh target/debug/xthunk conformance --backend cuda
#   ci/with-emulator.sh cargo run -- run --backend rocm examples/mlp.txtpb
#
# It builds the emulator (`cargo build -p xthunk-emulator`, debug unless XTHUNK_EMU_PROFILE=release;
# XTHUNK_EMU_NO_BUILD=1 skips the build; XTHUNK_EMU_LIB=PATH uses that library), makes a temporary folder in which every library name the
# backends search is a symlink to the one emulator library:
#
#   libcuda.so libcuda.so.1                      the CUDA driver
#   libcublas.so libcublas.so.12 libcublas.so.13 cuBLAS
#   libnccl.so libnccl.so.2                      NCCL
#   libamdhip64.so libamdhip64.so.5/.6/.7        the HIP runtime
#   librocblas.so librocblas.so.4/.5             rocBLAS
#   librccl.so librccl.so.1                      RCCL
#
# and runs the command with XTHUNK_CUDA_PATH, XTHUNK_ROCM_PATH, XTHUNK_NCCL_PATH and (first in)
# LD_LIBRARY_PATH pointing there (cudarc dlopens libcuda by bare name, so LD_LIBRARY_PATH matters).
#
# Compilers are real, never emulated: NVRTC is found by the CUDA backend's own search (pip's
# nvidia-cuda-nvrtc-cu12 wheel). hipRTC: the emulator exports no hiprtc* symbol, so the folder
# also gets `libhiprtc.so` -> the real hipRTC: a real libhiprtc.so (ROCm >= 6) if one is installed,
# else the real libamdhip64.so.5 (ROCm 5, e.g. Debian's libamdhip64-5, holds hipRTC), which the
# ROCm backend's hipRTC search finds first (it looks for libhiprtc.so* in XTHUNK_ROCM_PATH and the
# HIP runtime's folder before falling back to the HIP runtime's own symbols). comgr is linked
# beside it when found (hipRTC's target check needs it).
#
# Diagnostics: every problem the emulator detects is printed on stderr as a line starting with
# `xthunk-emulator:` and appended to $XTHUNK_EMU_REPORT (default: a file in the temporary folder).
# If the command succeeded but the emulator recorded memory errors (out-of-bounds, use-after-free,
# double-free, invalid-free, not-device-memory, misaligned, foreign-memory, leak), they are listed
# and the script exits 3, unless XTHUNK_EMU_ALLOW_ERRORS=1. Otherwise the command's exit status is
# returned.
#
# XTHUNK_EMU_NO_NCCL=1 leaves NCCL and RCCL out (no libnccl/librccl in the folder, and the
# backends' default searches for them off): collectives are then unavailable.
#
# Emulator settings (see emulator/src/config.rs): XTHUNK_EMU_DEVICES (1), XTHUNK_EMU_STRICT (1),
# XTHUNK_EMU_FAIL_ALLOC=N, XTHUNK_EMU_FAIL_LAUNCH=N, XTHUNK_EMU_MEMORY, XTHUNK_EMU_SM (90),
# XTHUNK_EMU_GFX (gfx90a), XTHUNK_EMU_QUIET, XTHUNK_EMU_LEAK_CHECK, XTHUNK_EMU_MEMORY_POOLS (1).
set -euo pipefail

if [[ $# -eq 0 ]]; then
    sed -n '2,/^set -euo/{/^#/p}' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 2
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
profile="${XTHUNK_EMU_PROFILE:-debug}"
target_dir="${CARGO_TARGET_DIR:-$root/target}"

if [[ "${XTHUNK_EMU_NO_BUILD:-0}" != 1 ]]; then
    build=(cargo build -q -p xthunk-emulator --manifest-path "$root/Cargo.toml")
    if [[ "$profile" == release ]]; then
        build+=(--release)
    fi
    "${build[@]}" >&2
fi

lib="${XTHUNK_EMU_LIB:-$target_dir/$profile/libxthunk_emulator.so}"
if [[ ! -f "$lib" ]]; then
    echo "with-emulator.sh: $lib not found (build failed, or XTHUNK_EMU_PROFILE/CARGO_TARGET_DIR differ)" >&2
    exit 2
fi

dir="$(mktemp -d "${TMPDIR:-/tmp}/xthunk-emulator.XXXXXX")"
cleanup() {
    if [[ "${XTHUNK_EMU_KEEP_DIR:-0}" == 1 ]]; then
        echo "with-emulator.sh: kept $dir" >&2
    else
        rm -rf "$dir"
    fi
}
trap cleanup EXIT

names=(libcuda.so libcuda.so.1
    libcublas.so libcublas.so.12 libcublas.so.13
    libamdhip64.so libamdhip64.so.5 libamdhip64.so.6 libamdhip64.so.7
    librocblas.so librocblas.so.4 librocblas.so.5)
if [[ "${XTHUNK_EMU_NO_NCCL:-0}" == 1 ]]; then
    # No NCCL/RCCL at all: the folder has none, and the backends' other searches are off.
    export XTHUNK_NCCL_NO_DEFAULT_SEARCH=1 XTHUNK_ROCM_NO_DEFAULT_SEARCH=1
else
    names+=(libnccl.so libnccl.so.2 librccl.so librccl.so.1)
fi
for name in "${names[@]}"; do
    ln -s "$lib" "$dir/$name"
done

# The real hipRTC and comgr, if installed (never the emulator: it has no hiprtc* symbols).
find_real() {
    local n d
    for n in "$@"; do
        for d in ${ROCM_PATH:+"$ROCM_PATH/lib"} /opt/rocm/lib /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib; do
            if [[ -e "$d/$n" ]]; then
                readlink -f "$d/$n"
                return 0
            fi
        done
        if command -v ldconfig >/dev/null 2>&1; then
            d="$(ldconfig -p 2>/dev/null | awk -v n="$n" '$1 == n { print $NF; exit }')"
            if [[ -n "$d" && -e "$d" ]]; then
                readlink -f "$d"
                return 0
            fi
        fi
    done
    return 1
}
if hiprtc="$(find_real libhiprtc.so.7 libhiprtc.so.6 libhiprtc.so libamdhip64.so.5)"; then
    ln -s "$hiprtc" "$dir/libhiprtc.so"
fi
if comgr="$(find_real libamd_comgr.so.3 libamd_comgr.so.2 libamd_comgr.so)"; then
    ln -s "$comgr" "$dir/$(basename "$comgr" | sed -E 's/^(libamd_comgr\.so\.[0-9]+).*/\1/')"
fi

export XTHUNK_CUDA_PATH="$dir"
export XTHUNK_ROCM_PATH="$dir"
export XTHUNK_NCCL_PATH="$dir"
export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export XTHUNK_EMULATOR_LIB="$lib"
report="${XTHUNK_EMU_REPORT:-$dir/report.txt}"
export XTHUNK_EMU_REPORT="$report"
: >>"$report"
start_lines="$(wc -l <"$report")"

set +e
"$@"
rc=$?
set -e

kinds='^xthunk-emulator: (out-of-bounds|use-after-free|double-free|invalid-free|not-device-memory|misaligned|foreign-memory|leak) '
errors="$(tail -n "+$((start_lines + 1))" "$report" | grep -E "$kinds" || true)"
if [[ -n "$errors" ]]; then
    count="$(printf '%s\n' "$errors" | wc -l)"
    echo "with-emulator.sh: the driver emulator recorded $count memory error(s):" >&2
    printf '%s\n' "$errors" | head -n 50 >&2
    if [[ $rc -eq 0 && "${XTHUNK_EMU_ALLOW_ERRORS:-0}" != 1 ]]; then
        exit 3
    fi
fi
exit "$rc"
