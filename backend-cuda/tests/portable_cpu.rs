//! The portable kernels executed on the CPU, compared with the host reference.
//!
//! Without a GPU the portable source can still run: this test compiles the whole standard
//! library with the machine's C++ compiler (`$CXX` or `c++`, GCC 12+ or Clang 15+) behind a
//! small shim that plays the GPU — `__global__`/`__device__` vanish, `__shared__` becomes
//! `static`, `threadIdx`/`blockIdx` are thread-locals, every thread of a block is an OS thread
//! and `__syncthreads` a barrier — with `XT_CPU` defined, so the prelude takes its HIP-style path
//! (`_Float16` and `__builtin_bit_cast`). Every kernel then runs on random inputs (specials
//! included: NaN, infinities, signed zeros, huge values, integer extremes, zero divisors) with a
//! non-power-of-two, multi-dimensional launch (4 blocks of 3x2 threads, fewer threads than
//! elements, fewer blocks than rows), arguments marshalled exactly as the CUDA backend does
//! (one 8-byte slot per argument, a pointer to each), and its output is compared with the host
//! implementation: exactly (NaN payloads and the sign of zero aside) for everything but the
//! transcendental functions and row reductions, which get a tolerance of a few units in the
//! last place of the element type.
//!
//! What this does not cover: the CUDA-only path of the prelude (inline PTX f16 conversions,
//! CUDA bit-cast intrinsics), which NVRTC compiles in `nvrtc.rs` but only a GPU runs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use half::{bf16, f16};
use std::ffi::c_void;
use std::path::{Path, PathBuf};
use std::process::Command;
use xthunk_core::ir::{Access, DType, Scalar};
use xthunk_core::kernels::{
    Extent, HostArg, HostKernel, KernelSignature, ParamKind, portable, standard_library,
};

const SHIM: &str = r#"
#include <cmath>
#include <pthread.h>
#include <thread>
#include <vector>
#define XT_CPU 1
#define __global__
#define __device__
#define __shared__ static
struct xt_dim3 { unsigned x, y, z; };
static thread_local xt_dim3 threadIdx, blockIdx;
static xt_dim3 blockDim, gridDim;
static pthread_barrier_t xt_barrier;
static inline void __syncthreads() { pthread_barrier_wait(&xt_barrier); }
"#;

const LAUNCHER: &str = r#"
extern "C" int xt_launch(void (*k)(void**), void** p, unsigned gx, unsigned gy, unsigned gz,
                         unsigned bx, unsigned by, unsigned bz) {
  gridDim = {gx, gy, gz};
  blockDim = {bx, by, bz};
  if (pthread_barrier_init(&xt_barrier, nullptr, bx * by * bz) != 0) return 1;
  for (unsigned z = 0; z < gz; z++)
    for (unsigned y = 0; y < gy; y++)
      for (unsigned x = 0; x < gx; x++) {
        std::vector<std::thread> ts;
        for (unsigned tz = 0; tz < bz; tz++)
          for (unsigned ty = 0; ty < by; ty++)
            for (unsigned tx = 0; tx < bx; tx++)
              ts.emplace_back([=] {
                blockIdx = {x, y, z};
                threadIdx = {tx, ty, tz};
                k(p);
              });
        for (auto& t : ts) t.join();
      }
  pthread_barrier_destroy(&xt_barrier);
  return 0;
}
"#;

fn ctype(t: DType) -> &'static str {
    match t {
        DType::F16 | DType::BF16 => "unsigned short",
        DType::F32 => "float",
        DType::F64 => "double",
        DType::I8 => "signed char",
        DType::U8 | DType::Pred => "unsigned char",
        DType::I32 => "int",
        DType::I64 => "long long",
    }
}

/// `extern "C" void xt_wrap_<k>(void** p)`: calls the kernel with each parameter read from
/// its slot, as the driver does with `kernelParams`.
fn wrapper(sig: &KernelSignature) -> String {
    let args: Vec<String> = sig
        .params
        .iter()
        .enumerate()
        .map(|(i, p)| match &p.kind {
            ParamKind::Buffer { dtype, access, .. } => {
                let c = if *access == Access::Read {
                    "const "
                } else {
                    ""
                };
                format!("*({c}{}**)p[{i}]", ctype(*dtype))
            }
            ParamKind::Scalar(dt) => format!("*({}*)p[{i}]", ctype(*dt)),
        })
        .collect();
    format!(
        "extern \"C\" void xt_wrap_{0}(void** p) {{ {0}({1}); }}\n",
        sig.name,
        args.join(", ")
    )
}

fn build(dir: &Path) -> Result<PathBuf, String> {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let mut src = String::from(SHIM);
    src.push_str(portable::standard_source());
    for k in standard_library().kernels() {
        src.push_str(&wrapper(&k.signature));
    }
    src.push_str(LAUNCHER);
    let cpp = dir.join("emu.cpp");
    std::fs::write(&cpp, src).map_err(|e| e.to_string())?;
    let so = dir.join("libxtemu.so");
    let out = Command::new(&cxx)
        .args([
            "-std=c++20",
            "-O1",
            "-fPIC",
            "-shared",
            "-pthread",
            "-ffp-contract=off",
            "-w",
        ])
        .arg("-o")
        .arg(&so)
        .arg(&cpp)
        .output()
        .map_err(|e| format!("cannot run `{cxx}`: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`{cxx}` failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(so)
}

/// splitmix64.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Mostly uniform in [-4, 4], sometimes a special value.
    fn float(&mut self) -> f64 {
        if self.next() % 16 == 0 {
            const SPECIAL: [f64; 10] = [
                f64::NAN,
                f64::INFINITY,
                f64::NEG_INFINITY,
                0.0,
                -0.0,
                1e10,
                -3e9,
                70000.0,
                1e-30,
                -1.0,
            ];
            SPECIAL[(self.next() % SPECIAL.len() as u64) as usize]
        } else {
            self.unit() * 8.0 - 4.0
        }
    }
    /// Integers: full range, often small, sometimes 0, -1 or the extremes.
    fn int(&mut self) -> i64 {
        match self.next() % 8 {
            0 => 0,
            1 => -1,
            2 => i64::MIN,
            3 => i64::MAX,
            4 | 5 => (self.next() % 21) as i64 - 10,
            _ => self.next() as i64,
        }
    }
}

fn encode(t: DType, v: f64, i: i64) -> Vec<u8> {
    match t {
        DType::F16 => f16::from_f64(v).to_le_bytes().to_vec(),
        DType::BF16 => bf16::from_f64(v).to_le_bytes().to_vec(),
        DType::F32 => (v as f32).to_le_bytes().to_vec(),
        DType::F64 => v.to_le_bytes().to_vec(),
        DType::I8 => (i as i8).to_le_bytes().to_vec(),
        DType::U8 | DType::Pred => (i as u8).to_le_bytes().to_vec(),
        DType::I32 => (i as i32).to_le_bytes().to_vec(),
        DType::I64 => i.to_le_bytes().to_vec(),
    }
}

fn decode(t: DType, b: &[u8]) -> f64 {
    match t {
        DType::F16 => f16::from_le_bytes([b[0], b[1]]).to_f64(),
        DType::BF16 => bf16::from_le_bytes([b[0], b[1]]).to_f64(),
        DType::F32 => f32::from_le_bytes(b.try_into().unwrap()) as f64,
        DType::F64 => f64::from_le_bytes(b.try_into().unwrap()),
        DType::I8 => b[0] as i8 as f64,
        DType::U8 | DType::Pred => b[0] as f64,
        DType::I32 => i32::from_le_bytes(b.try_into().unwrap()) as f64,
        DType::I64 => i64::from_le_bytes(b.try_into().unwrap()) as f64,
    }
}

fn scalar(t: DType, v: f64, i: i64) -> Scalar {
    match t {
        DType::F16 => Scalar::F16(f16::from_f64(v).to_bits()),
        DType::BF16 => Scalar::BF16(bf16::from_f64(v).to_bits()),
        DType::F32 => Scalar::F32(v as f32),
        DType::F64 => Scalar::F64(v),
        DType::I8 => Scalar::I8(i as i8),
        DType::U8 => Scalar::U8(i as u8),
        DType::Pred => Scalar::Pred(i & 1 == 1),
        DType::I32 => Scalar::I32(i as i32),
        DType::I64 => Scalar::I64(i),
    }
}

/// Relative tolerance for kernels that are not exact: a few units in the last place.
fn tolerance(name: &str, t: DType) -> f64 {
    let inexact = [
        "exp_",
        "log_",
        "tanh_",
        "sigmoid_",
        "gelu_",
        "bias_gelu_",
        "cross_entropy_",
        "adamw_",
        "rsqrt_",
        "reduce_sum_",
        "reduce_mean_",
        "softmax_",
        "layer_norm_",
    ];
    if !inexact.iter().any(|p| name.starts_with(p)) || !t.is_float() {
        return 0.0;
    }
    match t {
        DType::F16 => 2.0 * 2f64.powi(-10),
        DType::BF16 => 2.0 * 2f64.powi(-7),
        DType::F32 => 2e-5,
        _ => 1e-12,
    }
}

fn same(a: f64, b: f64, rel: f64) -> bool {
    if a.is_nan() || b.is_nan() {
        return a.is_nan() && b.is_nan();
    }
    if a == b {
        return true;
    }
    rel > 0.0 && (a - b).abs() <= rel * (1.0 + b.abs().max(a.abs()))
}

/// (n, rows, cols, [grid x y z, block x y z]) of each round: fewer threads than elements and
/// blocks than rows, a single thread, more threads than columns, and empty extents.
const ROUNDS: [(i64, i64, i64, [u32; 6]); 5] = [
    (37, 5, 19, [2, 1, 2, 3, 2, 1]),
    (37, 5, 19, [1, 1, 1, 1, 1, 1]),
    (100, 7, 19, [3, 1, 1, 32, 1, 1]),
    (1, 1, 1, [2, 2, 1, 5, 1, 1]),
    (0, 3, 0, [2, 1, 1, 4, 1, 1]),
];

type Launch = unsafe extern "C" fn(
    unsafe extern "C" fn(*mut *mut c_void),
    *mut *mut c_void,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
) -> i32;

/// Runs one kernel both ways and returns a description of every mismatch.
fn check_kernel(
    lib: &libloading::Library,
    k: &HostKernel,
    rng: &mut Rng,
    round: usize,
) -> Vec<String> {
    let sig = &k.signature;
    let (n, rows, cols, shape) = ROUNDS[round];
    // Immediates.
    let mut scalars: Vec<Option<Scalar>> = vec![];
    for p in &sig.params {
        scalars.push(match &p.kind {
            ParamKind::Scalar(dt) => Some(match p.name {
                "n" => Scalar::I64(n),
                "rows" => Scalar::I64(rows),
                "cols" => Scalar::I64(cols),
                "eps" => Scalar::F32(1e-5),
                "vocab" => Scalar::I64(5),
                "dim" => Scalar::I64(cols),
                // AdamW's step count (iota's `step` is of the element type).
                "step" if *dt == DType::I64 => Scalar::I64(3),
                _ => {
                    let v = rng.unit() * 4.0 - 2.0;
                    scalar(*dt, v, rng.int())
                }
            }),
            ParamKind::Buffer { .. } => None,
        });
    }
    // Buffers: random contents (outputs start poisoned, identically for both runs).
    let mut bufs: Vec<(DType, Vec<u8>)> = vec![];
    for p in &sig.params {
        if let ParamKind::Buffer { dtype, elems, .. } = &p.kind {
            let Extent::Product(idx) = elems else {
                panic!("fixed extent")
            };
            let count: i64 = idx
                .iter()
                .map(|&j| scalars[j].and_then(|s| s.as_i64()).unwrap())
                .product();
            let mut bytes = vec![];
            for _ in 0..count {
                let (v, i) = (rng.float(), rng.int());
                bytes.extend(encode(*dtype, v, i));
            }
            bufs.push((*dtype, bytes));
        }
    }
    let mut host_bufs = bufs.clone();
    let mut emu_bufs = bufs;

    // Host reference.
    let mut it = host_bufs.iter_mut();
    let host_args: Vec<HostArg> = scalars
        .iter()
        .map(|s| match s {
            Some(s) => HostArg::Scalar(*s),
            None => {
                let (_, b) = it.next().unwrap();
                HostArg::Buffer {
                    ptr: b.as_mut_ptr(),
                    len: b.len(),
                }
            }
        })
        .collect();
    // SAFETY: every buffer is a live, distinct Vec of the declared size.
    unsafe { (k.func)(&host_args) }.unwrap();

    // The portable kernel, marshalled as the CUDA backend does.
    let mut it = emu_bufs.iter_mut();
    let mut slots: Vec<u64> = scalars
        .iter()
        .map(|s| match s {
            Some(s) => {
                let mut b = [0u8; 8];
                let v = s.to_le_bytes();
                b[..v.len()].copy_from_slice(&v);
                u64::from_le_bytes(b)
            }
            None => it.next().unwrap().1.as_mut_ptr() as u64,
        })
        .collect();
    let mut params: Vec<*mut c_void> = slots.iter_mut().map(|s| (s as *mut u64).cast()).collect();
    // SAFETY: symbols of the library built above, with these exact signatures.
    let r = unsafe {
        let launch = *lib.get::<Launch>(b"xt_launch").unwrap();
        let wrap = *lib
            .get::<unsafe extern "C" fn(*mut *mut c_void)>(
                format!("xt_wrap_{}", sig.name).as_bytes(),
            )
            .unwrap();
        let [gx, gy, gz, bx, by, bz] = shape;
        launch(wrap, params.as_mut_ptr(), gx, gy, gz, bx, by, bz)
    };
    assert_eq!(r, 0);

    let mut errors = vec![];
    let rel = tolerance(&sig.name, bufs_dtype(&host_bufs));
    let mut bi = 0;
    for p in &sig.params {
        let ParamKind::Buffer { dtype, access, .. } = &p.kind else {
            continue;
        };
        let (h, e) = (&host_bufs[bi].1, &emu_bufs[bi].1);
        bi += 1;
        if !access.writes() {
            continue;
        }
        let es = dtype.size();
        for (j, (hb, eb)) in h.chunks(es).zip(e.chunks(es)).enumerate() {
            let (hv, ev) = (decode(*dtype, hb), decode(*dtype, eb));
            let exact_int = !dtype.is_float() && hb != eb;
            if exact_int || !same(ev, hv, rel) {
                errors.push(format!(
                    "{}: `{}`[{j}] = {ev:e} (portable) vs {hv:e} (host); n={n} rows={rows} cols={cols} launch {shape:?}",
                    sig.name, p.name
                ));
                if errors.len() > 4 {
                    return errors;
                }
            }
        }
    }
    errors
}

fn bufs_dtype(b: &[(DType, Vec<u8>)]) -> DType {
    b.last().map(|(t, _)| *t).unwrap_or(DType::F32)
}

#[test]
fn portable_kernels_match_the_host_reference_on_the_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = std::time::Instant::now();
    let so = match build(dir.path()) {
        Ok(so) => so,
        Err(e) => {
            if std::env::var("XTHUNK_REQUIRE_CXX").is_ok_and(|v| v == "1") {
                panic!("portable kernels on the CPU: {e}");
            }
            eprintln!(
                "SKIPPED portable_kernels_match_the_host_reference_on_the_cpu: no usable C++ compiler ({e})"
            );
            return;
        }
    };
    eprintln!(
        "built the CPU emulation of the portable source in {:.1?}",
        t0.elapsed()
    );
    // SAFETY: the library was just built from our own source; its initializers are trivial.
    let lib = unsafe { libloading::Library::new(&so) }.unwrap();
    let mut rng = Rng(0x5eed);
    let mut failures = vec![];
    let mut count = 0;
    for k in standard_library().kernels() {
        for round in 0..ROUNDS.len() {
            failures.extend(check_kernel(&lib, k, &mut rng, round));
        }
        count += 1;
    }
    assert_eq!(count, 247);
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!(
        "all {count} portable kernels match the host reference ({} launches each)",
        ROUNDS.len()
    );
}
