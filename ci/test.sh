#!/usr/bin/env bash
# The whole check, as CI runs it: formatting, lints, every test of the workspace, and a smoke
# run of the example program through the release binary. Run it from anywhere.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# ---------------------------------------------------------------------------------------------
# Hooks for the GPU backends' test dependencies. Nothing is installed yet: the issues that add
# the CUDA and ROCm backends fill these in (and must keep this script working without them).
#
# NVRTC from its PyPI wheel (compiles every standard kernel for sm_80/sm_90 without a GPU):
#   python3 -m pip install --target .whl nvidia-cuda-nvrtc-cu12   # .whl/ is git-ignored
#   (then point the CUDA backend's NVRTC search at .whl/nvidia/cuda_nvrtc/lib)
#
# The HIP runtime from Debian (loading, no-device handling, hipRTC for gfx90a without a GPU):
#   apt-get install -y libamdhip64-5
# ---------------------------------------------------------------------------------------------

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
step clippy cargo clippy --workspace --all-targets -- -D warnings
step test cargo test --workspace
step smoke cargo run --release -- run examples/mlp.txtpb

echo
echo "ci/test.sh: all steps passed"
for i in "${!steps[@]}"; do
    printf '  %-8s %8s s\n' "${steps[$i]}" "${times[$i]}"
done
