#!/usr/bin/env bash
# The whole check, as CI runs it: formatting, lints, every test of the workspace, and a smoke
# run of the example program through the release binary. Run it from anywhere.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# ---------------------------------------------------------------------------------------------
# Test dependencies, installed when missing (a fresh Debian machine has only Rust).
#
# NVRTC from its PyPI wheel: the CUDA backend's tests compile every standard kernel for sm_80
# and sm_90 with it, without a GPU. It goes into a cache folder the backend searches.
# ---------------------------------------------------------------------------------------------
export XTHUNK_PIP_PREFIX="${XTHUNK_PIP_PREFIX:-$HOME/.cache/xthunk/pip}"
apt_updated=0
apt_install() {
    if [ "$(id -u)" != 0 ]; then
        echo "ci/test.sh: need root to apt-get install $*" >&2
        return 1
    fi
    if [ "${apt_updated}" = 0 ]; then
        apt-get update -qq
        apt_updated=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}
if ! command -v python3 >/dev/null || ! python3 -m pip --version >/dev/null 2>&1; then
    echo "==> installing python3-pip"
    apt_install python3-pip
fi
if ! python3 -c "import ensurepip, venv" >/dev/null 2>&1; then
    echo "==> installing python3-venv (the Python package's tests run in a venv)"
    apt_install python3-venv
fi
if ! command -v c++ >/dev/null; then
    echo "==> installing g++ (the portable kernels are also checked on the CPU)"
    apt_install g++
fi
# NCCL from its wheel: the NCCL/RCCL table loads it, checks its version and makes unique ids.
# Both wheels share the nvidia/ folder: install them in one command (pip skips files of a
# second --target install into an existing folder).
if ! ls "${XTHUNK_PIP_PREFIX}"/nvidia/cuda_nvrtc/lib/libnvrtc.so.* >/dev/null 2>&1 ||
    ! ls "${XTHUNK_PIP_PREFIX}"/nvidia/nccl/lib/libnccl.so.2 >/dev/null 2>&1; then
    echo "==> installing NVRTC and NCCL (nvidia-cuda-nvrtc-cu12, nvidia-nccl-cu12) into ${XTHUNK_PIP_PREFIX}"
    python3 -m pip install --quiet --disable-pip-version-check --upgrade --target "${XTHUNK_PIP_PREFIX}" \
        nvidia-cuda-nvrtc-cu12 nvidia-nccl-cu12 ||
        python3 -m pip install --quiet --disable-pip-version-check --break-system-packages --upgrade \
            --target "${XTHUNK_PIP_PREFIX}" nvidia-cuda-nvrtc-cu12 nvidia-nccl-cu12
fi
# The HIP runtime from Debian (bookworm main; ROCm 5.2): the ROCm backend's tests load it, see
# it report "no AMD GPU", and compile every standard kernel with its hipRTC for gfx90a and
# other targets; the headers let a test check our struct layouts against them.
if ! dpkg -s libamdhip64-5 libamdhip64-dev libamd-comgr-dev >/dev/null 2>&1; then
    echo "==> installing the HIP runtime (libamdhip64-5, libamdhip64-dev, libamd-comgr-dev)"
    apt_install libamdhip64-5 libamdhip64-dev libamd-comgr-dev
fi
# OpenBLAS from Debian: the host backend's f32/f64 gemm runs through it (found at run time,
# like cuBLAS); its tests compare it with the built-in gemm crate, and skip without it.
if ! dpkg -s libopenblas0-pthread >/dev/null 2>&1 && ! dpkg -s libopenblas0 >/dev/null 2>&1; then
    echo "==> installing OpenBLAS (libopenblas0-pthread) for the host backend's gemm"
    apt_install libopenblas0-pthread
fi
# etcd for multi-process jobs: the etcd crate builds with protoc (etcd-client's build script),
# and its tests start a real etcd server on loopback.
if ! command -v protoc >/dev/null || ! command -v etcd >/dev/null; then
    echo "==> installing protobuf-compiler and etcd-server"
    apt_install protobuf-compiler etcd-server
fi
# The aarch64 check of the Python package (below): Rust's aarch64 standard library and a C
# cross compiler (a dependency's build script assembles a few lines for the target).
if ! command -v aarch64-linux-gnu-gcc >/dev/null; then
    echo "==> installing gcc-aarch64-linux-gnu (the aarch64 check of the Python package)"
    apt_install gcc-aarch64-linux-gnu
fi
if command -v rustup >/dev/null && ! rustup target list --installed | grep -qx aarch64-unknown-linux-gnu; then
    echo "==> adding the aarch64-unknown-linux-gnu Rust target"
    rustup target add aarch64-unknown-linux-gnu
fi
# The etcd TLS tests make their certificates with the openssl command.
if ! command -v openssl >/dev/null; then
    echo "==> installing openssl (certificates for the etcd TLS tests)"
    apt_install openssl
fi
# Missing NVRTC, NCCL, HIP, etcd or C++ compiler must fail the tests here, not skip them.
export XTHUNK_REQUIRE_NVRTC=1 XTHUNK_REQUIRE_CXX=1 XTHUNK_REQUIRE_ROCM=1 XTHUNK_REQUIRE_NCCL=1
export XTHUNK_REQUIRE_EMULATOR=1 XTHUNK_REQUIRE_ETCD=1 XTHUNK_KILL_REPEATS=10

steps=()
times=()
current=""
set -o errtrace # the ERR trap below also fires inside step()
trap 'echo "ci/test.sh: step ${current:-?} FAILED" >&2' ERR

# Runs one named step and records how long it took; the first failing step stops the script.
step() {
    local name="$1"
    shift
    current="${name}"
    echo "==> ${name}: $*"
    local start end
    start=$(date +%s.%N)
    "$@"
    end=$(date +%s.%N)
    steps+=("${name}")
    times+=("$(awk -v a="${start}" -v b="${end}" 'BEGIN { printf "%.1f", b - a }')")
    echo "==> ${name}: ok (${times[-1]} s)"
}

step fmt cargo fmt --all --check
# No import cycle between the modules of any crate (docs/architecture.md, rule 4).
step modcycles python3 ci/modcycles.py .
step clippy cargo clippy --workspace --all-targets --all-features -- -D warnings
step test cargo test --workspace --all-features
step smoke cargo run --release -- run examples/mlp.txtpb
# The CUDA and ROCm backends' execution paths through the driver emulator (emulated devices,
# labelled as such; never reported as GPU results).
step emu-cuda env XTHUNK_EMU_DEVICES=4 ci/with-emulator.sh "${CARGO_TARGET_DIR:-target}/debug/xthunk" conformance --backend cuda
step emu-rocm env XTHUNK_EMU_DEVICES=4 ci/with-emulator.sh "${CARGO_TARGET_DIR:-target}/debug/xthunk" conformance --backend rocm
# Collective memory's gating: the emulator playing an NCCL older than ncclMemAlloc and windows
# (old) and an RCCL whose windows are empty (rccl-no-windows); the same checks pass on both
# backends, each logging once what it did without.
collective_memory_modes() {
    for mode in old rccl-no-windows; do
        for backend in cuda rocm; do
            env XTHUNK_EMU_DEVICES=4 XTHUNK_EMU_NCCL_MODE="${mode}" ci/with-emulator.sh \
                "${CARGO_TARGET_DIR:-target}/debug/xthunk" conformance --backend "${backend}" \
                --filter memory/collective
        done
    done
}
step emu-collective-memory-modes collective_memory_modes
# The conformance area kernels/user/ (conformance/kernels/user/checked_set.cu) on emulated CUDA (32-lane
# warps) and ROCm (64): the source NVRTC and hipRTC compiled, executed; and broken copies of a
# standard and of a user kernel failing their checks there.
step emu-user-kernels env XTHUNK_USER_KERNELS_REQUIRE_DEVICES=1 ci/with-emulator.sh cargo test -q --all-features -p xthunk --test user_kernels
# The ragged all-to-all's checks on 5 to 8 ranks (the steps above give 4 devices, which skip
# them): 8 emulated devices, CUDA then ROCm.
emu_ragged() {
    for backend in cuda rocm; do
        env XTHUNK_EMU_DEVICES=8 ci/with-emulator.sh "${CARGO_TARGET_DIR:-target}/debug/xthunk" \
            conformance --backend "${backend}" --filter collectives/ragged_all_to_all || return 1
    done
}
step emu-ragged emu_ragged
# The Python package (python/, built by maturin into a venv kept in the cache folder) and its
# pytest tests; then the MLP, and the user programs of stablehlo/jax/ through xthunk.jax.jit,
# on the emulated CUDA and ROCm backends.
venv="${XTHUNK_VENV:-$HOME/.cache/xthunk/venv}"
python_package() {
    if [ ! -x "${venv}/bin/python" ]; then
        python3 -m venv "${venv}"
    fi
    # jax and jaxlib (CPU): the reference of the StableHLO tests (stablehlo/jax/); flatbuffers
    # for jax.export's serializer (the portable-artifact tests).
    if ! "${venv}/bin/python" -c "import maturin, numpy, pytest, ml_dtypes, jax, jaxlib, scipy, mpmath, flatbuffers" 2>/dev/null; then
        "${venv}/bin/python" -m pip install --quiet --disable-pip-version-check maturin numpy pytest ml_dtypes jax jaxlib scipy mpmath flatbuffers
    fi
    # A release build, as `pip install .` makes it: the Python tests below run on what users get.
    VIRTUAL_ENV="${venv}" PATH="${venv}/bin:${PATH}" maturin develop --release --quiet
}
step py-build python_package
# The bench rows against XLA:CPU, now that the venv has jax (the test step ran before it and may
# have skipped them): here a skipped comparison fails.
step bench-xla env XTHUNK_REQUIRE_JAX=1 XTHUNK_VENV="${venv}" cargo test -q -p xthunk --test stablehlo bench_rows
step pytest env XTHUNK_CLI="${CARGO_TARGET_DIR:-target}/debug/xthunk" "${venv}/bin/python" -m pytest -q python/tests
step py-emu env XTHUNK_EMU_DEVICES=4 XTHUNK_PY_REQUIRE_EMULATOR=1 ci/with-emulator.sh "${venv}/bin/python" -m pytest -q python/tests/test_emulated.py python/tests/test_jax.py::test_program_emulated
# The StableHLO test set's comparison (bit-exact, ULP and relative bounds) checked on its own.
step jax-compare "${venv}/bin/python" -m pytest -q stablehlo/jax/test_compare.py
# Portable artifacts: programs exported with jax.export run from their bytes (the serialized
# Exported and the bare VHLO bytecode) through the CLI and Python, against JAX and the text.
step jax-portable env XTHUNK_CLI="${CARGO_TARGET_DIR:-target}/debug/xthunk" "${venv}/bin/python" -m pytest -q stablehlo/jax/test_portable.py
# StableHLO through xthunk against JAX's CPU results (stablehlo/jax/README.md): one random case
# per op and type plus the user programs on the host; one random case per op (any type) plus
# the programs on emulated CUDA and ROCm (each case lowered by JAX once, run on both); the
# programs compiled ahead of time for sm_90 and gfx90a into one .pb, run on all three (the GPU
# backends must load the compiled images). Refusals at import are listed by op and do not fail
# a step (the set covers types and ops xthunk does not have yet); a wrong result does.
jaxset=(stablehlo/jax/run.py --xthunk "${CARGO_TARGET_DIR:-target}/debug/xthunk" --allow-unsupported)
step jax-host "${venv}/bin/python" "${jaxset[@]}" --backend host --count 1 --programs
step jax-emu env XTHUNK_EMU_DEVICES=1 ci/with-emulator.sh "${venv}/bin/python" "${jaxset[@]}" --backend cuda,rocm --count 1 --per-op 1 --programs
step jax-aot env XTHUNK_EMU_DEVICES=1 ci/with-emulator.sh "${venv}/bin/python" "${jaxset[@]}" --backend host,cuda,rocm --programs-only --compile sm_90,gfx90a
# Sharded JAX programs (stablehlo/jax/spmd.py; docs/stablehlo.md "Sharded programs"): a
# shard_map MLP training step with pmean, psum, all_gather, ppermute and a pmap program on 4
# forced CPU devices against JAX, through `run --devices 4` and `launch -n 4 -- run`, on the
# host and on emulated CUDA (NCCL within one process, then across four processes).
spmdset=(stablehlo/jax/spmd.py --xthunk "${CARGO_TARGET_DIR:-target}/debug/xthunk" --cases '^(train_step|psum|all_gather|ppermute|pmap)$' --mode devices,launch)
step jax-spmd "${venv}/bin/python" "${spmdset[@]}" --backend host
step jax-spmd-emu env XTHUNK_EMU_DEVICES=4 ci/with-emulator.sh "${venv}/bin/python" "${spmdset[@]}" --backend cuda
scratch="$(mktemp -d "${TMPDIR:-/tmp}/xthunk-ci.XXXXXX")"
trap 'rm -rf "${scratch}"' EXIT
# Release wheels are built for x86_64 (above) and aarch64: the Python package and everything it
# links must compile for aarch64 (a cross `cargo check`; PyO3's abi3 build needs no aarch64
# Python).
aarch64_check() {
    if ! rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-linux-gnu; then
        echo "aarch64-check: SKIPPED: no aarch64-unknown-linux-gnu Rust target (rustup could not add it)"
        return 0
    fi
    CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc PYO3_CROSS_PYTHON_VERSION=3.9 \
        cargo check -q --release -p xthunk-python --target aarch64-unknown-linux-gnu
}
step aarch64-check aarch64_check
step compile-smoke bash -c "cargo run -q --release -- compile examples/mlp.txtpb --target sm_80 --target sm_90 --target gfx90a -o '${scratch}/mlp-aot.pb' && cargo run -q --release -- run '${scratch}/mlp-aot.pb'"

echo
echo "ci/test.sh: all steps passed"
for i in "${!steps[@]}"; do
    printf '  %-8s %8s s\n' "${steps[$i]}" "${times[$i]}"
done
