#!/usr/bin/env bash
# The device check: one command for a machine with a GPU and nothing else prepared.
#
#   ci/device-check.sh                    NVIDIA GPU (the CUDA backend)
#   ci/device-check.sh --backend rocm     AMD GPU
#   ci/device-check.sh --backend host     no GPU: checks this script itself on the CPU
#   ci/device-check.sh --quick            fewer benchmark rounds
#
# 1. The binary: $XTHUNK_BIN when set; else, when `cargo` exists, `cargo build --release` and
#    ./target/release/xthunk; else a prebuilt ./target/release/xthunk (a GPU machine without a
#    Rust toolchain). Fails clearly when there is none.
# 2. Vendor libraries: unless already set, XTHUNK_CUDA_PATH gets the CUDA toolkit's lib64
#    ($CUDA_HOME, /usr/local/cuda) and the lib folders of python3's pip wheels (nvidia/cu13/lib,
#    nvidia/cuda_nvrtc/lib, nvidia/cublas/lib: NVRTC and cuBLAS), XTHUNK_NCCL_PATH the NCCL
#    wheel's (nvidia/nccl/lib), XTHUNK_ROCM_PATH /opt/rocm/lib (or $ROCM_PATH/lib).
# 3. `xthunk devices`, `xthunk conformance --backend B`, a job of 2 processes (`xthunk launch
#    -n 2`: one device per process with 2 or more devices, compared with `run --devices 2`; on
#    one device both processes share it and run a program without collectives), a trace of the
#    MLP with device times (kept as mlp-trace.json) and `xthunk profile` of it, `xthunk bench
#    --backend B --json --collective-memory both` (its allreduce_sweep once with the buffer in
#    device memory, once in collective memory), each under `timeout`.
# 4. A short table LAST: date, machine, binary, conformance counts, and every benchmark's ratio
#    against its goal.
#
# Everything printed also goes to $OUT_DIR/device-check.log, the final table to
# $OUT_DIR/device-check-table.md (ready to paste into docs/device-results.md), the benchmark
# results to $OUT_DIR/bench.json; OUT_DIR is $OUT when set, else ./device-check-out.
#
# Exit status: 0 when conformance passed and every benchmark ran; 1 when a conformance check
# failed, a step failed or timed out; 2 when the backend (or the binary) is not there.
#
# Timeouts (seconds, overridable): XTHUNK_BUILD_TIMEOUT (1800), XTHUNK_DEVICES_TIMEOUT (120),
# XTHUNK_CONFORMANCE_TIMEOUT (600), XTHUNK_JOB_TIMEOUT (180), XTHUNK_BENCH_TIMEOUT (600).
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 2

backend=cuda
bench_args=()
while [[ $# -gt 0 ]]; do
    case "$1" in
    --backend)
        backend="${2:-}"
        shift 2 || true
        ;;
    --backend=*)
        backend="${1#--backend=}"
        shift
        ;;
    --quick)
        bench_args+=(--quick)
        shift
        ;;
    -h | --help)
        sed -n '2,30p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "device-check.sh: unknown argument: $1 (see --help)" >&2
        exit 2
        ;;
    esac
done
case "$backend" in
cuda | rocm | host) ;;
*)
    echo "device-check.sh: --backend must be cuda, rocm or host, got '${backend}'" >&2
    exit 2
    ;;
esac

out_dir="${OUT:-$root/device-check-out}"
mkdir -p "$out_dir" || exit 2
log="$out_dir/device-check.log"
table_file="$out_dir/device-check-table.md"
json="$out_dir/bench.json"
rm -f "$json" "$table_file"

have() { command -v "$1" >/dev/null 2>&1; }

# Runs "$@" under `timeout` (when there is one) with a limit of $1 seconds, echoing its output
# and keeping it in $out_dir/$2.txt. Returns the command's exit status (124: timed out).
step() {
    local limit="$1" name="$2"
    shift 2
    echo
    echo "==> ${name}: $*"
    local start end rc
    start=$(date +%s)
    if have timeout; then
        timeout --kill-after=15 "$limit" "$@" 2>&1 | tee "$out_dir/${name}.txt"
        rc=${PIPESTATUS[0]}
    else
        "$@" 2>&1 | tee "$out_dir/${name}.txt"
        rc=${PIPESTATUS[0]}
    fi
    end=$(date +%s)
    if [[ $rc -eq 124 || $rc -eq 137 ]]; then
        echo "==> ${name}: TIMED OUT after ${limit} s"
    else
        echo "==> ${name}: exit ${rc} ($((end - start)) s)"
    fi
    return "$rc"
}

# A `:`-joined list of the arguments that are existing folders, without repeats and without
# folders holding a libcuda.so* (the backend looks for the driver in XTHUNK_CUDA_PATH first,
# and a toolkit's stub libcuda there would shadow the real driver).
join_dirs() {
    local out="" d
    for d in "$@"; do
        [[ -n "$d" && -d "$d" ]] || continue
        case ":$out:" in *":$d:"*) continue ;; esac
        if compgen -G "$d/libcuda.so*" >/dev/null; then
            echo "device-check.sh: not searching $d first: it holds a libcuda.so (a stub?)" >&2
            continue
        fi
        out="${out:+$out:}$d"
    done
    printf '%s' "$out"
}

setup_libraries() {
    local cuda_dirs=() nccl_dirs=() pkg sub
    local home
    for home in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda; do
        [[ -n "$home" ]] && cuda_dirs+=("$home/lib64")
    done
    # The `nvidia` namespace package of python3's pip wheels (several folders are possible;
    # it has no __file__, so its __path__ is used).
    local pkgs=""
    if have python3; then
        pkgs="$(python3 - <<'EOF' 2>/dev/null
try:
    import nvidia
    for p in list(getattr(nvidia, "__path__", []) or []):
        print(p)
except Exception:
    pass
EOF
)"
    fi
    while IFS= read -r pkg; do
        [[ -n "$pkg" ]] || continue
        for sub in cu13/lib cuda_nvrtc/lib cublas/lib cu12/lib; do
            cuda_dirs+=("$pkg/$sub")
        done
        nccl_dirs+=("$pkg/nccl/lib" "$pkg/cu13/lib")
    done <<<"$pkgs"
    if [[ -z "${XTHUNK_CUDA_PATH:-}" ]]; then
        XTHUNK_CUDA_PATH="$(join_dirs "${cuda_dirs[@]}")"
        export XTHUNK_CUDA_PATH
    fi
    if [[ -z "${XTHUNK_NCCL_PATH:-}" ]]; then
        XTHUNK_NCCL_PATH="$(join_dirs "${nccl_dirs[@]}")"
        export XTHUNK_NCCL_PATH
    fi
    if [[ "$backend" == rocm && -z "${XTHUNK_ROCM_PATH:-}" ]]; then
        XTHUNK_ROCM_PATH="$(join_dirs "${ROCM_PATH:+$ROCM_PATH/lib}" /opt/rocm/lib)"
        export XTHUNK_ROCM_PATH
    fi
    echo "python3 nvidia wheel folders: ${pkgs:-(none found)}" | tr '\n' ' '
    echo
    echo "XTHUNK_CUDA_PATH=${XTHUNK_CUDA_PATH:-}"
    echo "XTHUNK_NCCL_PATH=${XTHUNK_NCCL_PATH:-}"
    [[ "$backend" == rocm ]] && echo "XTHUNK_ROCM_PATH=${XTHUNK_ROCM_PATH:-}"
    return 0
}

machine_line() {
    local gpu="" cpu
    if have nvidia-smi; then
        gpu="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null |
            sed 's/^/GPU: /; s/, / driver /' | paste -sd ';' -)"
    fi
    if [[ -z "$gpu" ]] && have rocm-smi; then
        gpu="$(rocm-smi --showproductname 2>/dev/null | grep -iE 'card series|gfx' | head -2 |
            sed 's/  */ /g' | paste -sd ';' -)"
    fi
    cpu="$(grep -m1 '^model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //')"
    printf '%s; %s x %s CPUs; %s' "$(uname -n)" "${cpu:-unknown CPU}" \
        "$(nproc 2>/dev/null || echo '?')" "${gpu:-no nvidia-smi/rocm-smi GPU listed}"
}

main() {
    local started
    started="$(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "device-check.sh: backend ${backend}, ${started}, output in ${out_dir}"
    echo "machine: $(machine_line)"

    # 1. The binary.
    local bin build_note
    if [[ -n "${XTHUNK_BIN:-}" ]]; then
        bin="$XTHUNK_BIN"
        build_note="given by XTHUNK_BIN"
    elif have cargo; then
        if ! step "${XTHUNK_BUILD_TIMEOUT:-1800}" build cargo build --release; then
            echo "device-check.sh: cargo build --release failed"
            return 1
        fi
        bin="$root/target/release/xthunk"
        build_note="built here (cargo build --release)"
    else
        bin="$root/target/release/xthunk"
        build_note="prebuilt (no cargo on this machine)"
    fi
    if [[ ! -x "$bin" ]]; then
        echo "device-check.sh: no xthunk binary: ${bin} does not exist or is not executable."
        echo "  Build one with 'cargo build --release' (on a machine with the same OS and libc),"
        echo "  and put it at target/release/xthunk, or point XTHUNK_BIN at it."
        return 2
    fi
    local version commit
    version="$("$bin" --version 2>/dev/null || echo "xthunk (version unknown)")"
    commit="unknown (no git checkout)"
    if have git && git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
        commit="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
        if [[ -n "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
            commit="$commit + uncommitted changes"
        fi
    fi
    echo "binary: ${bin} (${version}; ${build_note}); source: ${commit}"

    # 2. Vendor libraries.
    echo
    echo "==> libraries"
    setup_libraries

    # 3. Devices, conformance, benchmarks.
    step "${XTHUNK_DEVICES_TIMEOUT:-120}" devices "$bin" devices
    local devices_rc=$?

    step "${XTHUNK_CONFORMANCE_TIMEOUT:-600}" conformance "$bin" conformance --backend "$backend"
    local conf_rc=$?
    local conf_summary conf_label
    conf_label="$(grep -m1 '^conformance: ' "$out_dir/conformance.txt" 2>/dev/null || true)"
    conf_summary="$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$out_dir/conformance.txt" 2>/dev/null | tail -1)"
    local conf_result
    case $conf_rc in
    0) conf_result="PASSED" ;;
    1) conf_result="FAILED" ;;
    2) conf_result="DID NOT RUN (backend unavailable)" ;;
    124 | 137) conf_result="TIMED OUT" ;;
    *) conf_result="ERROR (exit ${conf_rc})" ;;
    esac

    # A job of 2 processes on this backend (embedded coordinator, no etcd). With 2 or more
    # devices: one device per process (each takes its local rank's), dp_step with NCCL/RCCL
    # across the processes, outputs compared with `run --devices 2` file by file. With one
    # device: NCCL/RCCL refuse two ranks of one communicator on one device, so both processes
    # run the collective-free MLP on device 0 (the job path on the GPU, without collectives).
    local ndev job_rc job_result
    ndev="$(awk -v b="${backend}:" '$1 == b { on = 1; next } /^[a-z]+:/ { on = 0 } on && /^  \[/ { n++ } END { print n + 0 }' "$out_dir/devices.txt" 2>/dev/null)"
    rm -rf "$out_dir/job-launch" "$out_dir/job-spmd"
    if [[ "${ndev:-0}" -ge 2 ]]; then
        step "${XTHUNK_JOB_TIMEOUT:-180}" job bash -c "'$bin' launch -n 2 -- run --backend '$backend' \
            --collective-timeout 60 --output-dir '$out_dir/job-launch' '$root/examples/dp_step.txtpb' &&
            '$bin' run --backend '$backend' --devices 2 --output-dir '$out_dir/job-spmd' \
            '$root/examples/dp_step.txtpb' && diff -r '$out_dir/job-launch' '$out_dir/job-spmd' &&
            echo 'job: 2 processes x 1 device: outputs identical to run --devices 2'"
    else
        step "${XTHUNK_JOB_TIMEOUT:-180}" job bash -c "'$bin' launch -n 2 -- run --backend '$backend' \
            --device 0 --output-dir '$out_dir/job-launch' '$root/examples/mlp.txtpb' &&
            echo 'job: 2 processes on device 0 (one device: no NCCL across processes)'"
    fi
    job_rc=$?
    case $job_rc in
    0) job_result="PASSED ($(tail -1 "$out_dir/job.txt" 2>/dev/null))" ;;
    124 | 137) job_result="TIMED OUT" ;;
    *) job_result="FAILED (exit ${job_rc}): $(grep -m1 '^error' "$out_dir/job.txt" 2>/dev/null | cut -c1-200)" ;;
    esac

    # A trace with device times (timing events around every thunk) and the profile table of the
    # MLP on this backend: the trace file is kept in $out_dir for ui.perfetto.dev.
    local trace_rc trace_result
    step "${XTHUNK_TRACE_TIMEOUT:-120}" trace bash -c "'$bin' run --backend '$backend' --iterations 3 \
        --trace '$out_dir/mlp-trace.json' --trace-device-times '$root/examples/mlp.txtpb' >/dev/null &&
        '$bin' profile --backend '$backend' --iterations 20 '$root/examples/mlp.txtpb'"
    trace_rc=$?
    case $trace_rc in
    0) trace_result="PASSED ($(grep -m1 'sum of per-thunk' "$out_dir/trace.txt" 2>/dev/null | cut -c1-160))" ;;
    124 | 137) trace_result="TIMED OUT" ;;
    *) trace_result="FAILED (exit ${trace_rc}): $(grep -m1 '^error' "$out_dir/trace.txt" 2>/dev/null | cut -c1-200)" ;;
    esac

    # allreduce_sweep (8 B..256 MiB over every device) with collective memory off and on.
    step "${XTHUNK_BENCH_TIMEOUT:-600}" bench "$bin" bench --backend "$backend" --json "$json" \
        --collective-memory both "${bench_args[@]}"
    local bench_rc=$?
    local bench_result
    case $bench_rc in
    0) bench_result="ran" ;;
    1) bench_result="a benchmark FAILED" ;;
    2) bench_result="DID NOT RUN (backend unavailable)" ;;
    124 | 137) bench_result="TIMED OUT" ;;
    *) bench_result="ERROR (exit ${bench_rc})" ;;
    esac

    # 4. The table, last.
    {
        echo "### ${started}: ${backend}"
        echo
        echo '```'
        echo "date:        ${started} (finished $(date -u '+%H:%M UTC'))"
        echo "machine:     $(machine_line)"
        echo "xthunk:      ${version}, source ${commit}, ${build_note}"
        echo "devices:     exit ${devices_rc}; $(grep -E "^${backend}: " "$out_dir/devices.txt" 2>/dev/null | head -1 | cut -c1-160)"
        echo "conformance: ${conf_result}; ${conf_summary:-no summary line}"
        [[ -n "$conf_label" ]] && echo "             ${conf_label#conformance: }"
        grep -E '^  (FAILED|UNEXPECTED)' "$out_dir/conformance.txt" 2>/dev/null | head -20 |
            sed 's/^/             /'
        echo "job:         ${job_result}"
        echo "trace:       ${trace_result}"
        echo "benchmarks:  ${bench_result}"
        # The bench's own table: from its header line to the line before the definitions.
        awk '/^== xthunk bench:/ { on = 1 } /^what each row measures:/ { on = 0 } on' \
            "$out_dir/bench.txt" 2>/dev/null | sed 's/^/  /'
        grep -E '^bench: backend .* SKIPPED' "$out_dir/bench.txt" 2>/dev/null | sed 's/^/  /'
        # The all-reduce sweeps' tables (per size: time, algbw, busbw; xthunk and raw).
        awk '/^allreduce_sweep: / { on = 1 } /^$/ { on = 0 } on' "$out_dir/bench.txt" 2>/dev/null |
            sed 's/^/  /'
        echo '```'
    } >"$table_file"
    echo
    echo "==================== device check: ${backend} ===================="
    cat "$table_file"
    echo "(full log: ${log}; this table: ${table_file}; benchmark JSON: ${json})"

    if [[ $conf_rc -eq 2 || $bench_rc -eq 2 ]] && [[ $conf_rc -ne 1 ]]; then
        return 2
    fi
    if [[ $conf_rc -ne 0 || $bench_rc -ne 0 || $devices_rc -ne 0 || $job_rc -ne 0 || $trace_rc -ne 0 ]]; then
        return 1
    fi
    return 0
}

main 2>&1 | tee "$log"
exit "${PIPESTATUS[0]}"
