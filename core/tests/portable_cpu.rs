//! The standard library's portable source executed on the CPU by the host backend, compared
//! with the host implementations.
//!
//! The kernel definitions of the portable source are loaded as a `ModuleImage::Source`
//! module on the host backend, which compiles them with the machine's C++ compiler behind
//! the CPU shim (`host/src/host/cpu/`: fibers with real `__syncthreads`, blocks on a worker
//! pool). Every kernel then runs on random inputs (specials included: NaN, infinities, signed
//! zeros, huge values, integer extremes, zero divisors) with non-power-of-two,
//! multi-dimensional launches (fewer threads than elements, fewer blocks than rows), its
//! arguments passed as any program passes them (device buffers and immediates), and its
//! output is compared with the host implementation: exactly (NaN payloads and the sign of
//! zero aside) for everything but the transcendental functions and row reductions, which get
//! a tolerance of a few units in the last place of the element type. Outputs start poisoned
//! (random bytes, the same for both runs).
//!
//! Without a C++ compiler the test is reported SKIPPED with the reason (and fails when
//! `XTHUNK_REQUIRE_CXX=1`). What this does not cover: the CUDA-only path of the prelude
//! (inline PTX f16 conversions), which NVRTC compiles in backend-cuda's `nvrtc.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use half::{bf16, f16};
use std::sync::Arc;
use xthunk_core::backend::{Backend, Device, LaunchArg, LaunchDims, LoadedModule};
use xthunk_core::host::HostBackend;
use xthunk_core::ir::{DType, Dim3, MemorySpace, Module, ModuleImage, Scalar};
use xthunk_core::kernels::{Extent, HostArg, HostKernel, ParamKind, portable, standard_library};

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
        if self.next().is_multiple_of(16) {
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
        DType::I16 => (i as i16).to_le_bytes().to_vec(),
        DType::U16 => (i as u16).to_le_bytes().to_vec(),
        DType::U32 => (i as u32).to_le_bytes().to_vec(),
        DType::U64 => (i as u64).to_le_bytes().to_vec(),
        other => panic!("no standard kernel takes {other}"),
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
        DType::I16 => i16::from_le_bytes(b.try_into().unwrap()) as f64,
        DType::U16 => u16::from_le_bytes(b.try_into().unwrap()) as f64,
        DType::U32 => u32::from_le_bytes(b.try_into().unwrap()) as f64,
        DType::U64 => u64::from_le_bytes(b.try_into().unwrap()) as f64,
        other => panic!("no standard kernel takes {other}"),
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
        DType::I16 => Scalar::I16(i as i16),
        DType::U16 => Scalar::U16(i as u16),
        DType::U32 => Scalar::U32(i as u32),
        DType::U64 => Scalar::U64(i as u64),
        other => panic!("no standard kernel takes {other}"),
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

/// Runs one kernel both ways and returns a description of every mismatch.
fn check_kernel(
    dev: &Arc<dyn Device>,
    module: &Arc<dyn LoadedModule>,
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

    // The portable kernel, through the host backend's CPU execution.
    let mut device_bufs = vec![];
    for (_, b) in &emu_bufs {
        let buf = dev
            .allocate(b.len().max(1) as u64, 64, MemorySpace::Device)
            .unwrap();
        if !b.is_empty() {
            dev.copy_from_host(b, buf.ptr()).unwrap();
        }
        device_bufs.push((buf, b.len() as u64));
    }
    let mut it = device_bufs.iter();
    let args: Vec<LaunchArg> = scalars
        .iter()
        .map(|s| match s {
            Some(s) => LaunchArg::Scalar(*s),
            None => {
                let (b, len) = it.next().unwrap();
                LaunchArg::Buffer {
                    ptr: b.ptr(),
                    len: *len,
                }
            }
        })
        .collect();
    let handle = module.kernel(&sig.name).unwrap();
    let stream = dev.create_stream().unwrap();
    let [gx, gy, gz, bx, by, bz] = shape;
    stream
        .launch(
            &handle,
            LaunchDims {
                grid: Dim3::new(gx, gy, gz),
                block: Dim3::new(bx, by, bz),
                shared_mem: 0,
            },
            &args,
        )
        .unwrap();
    stream.synchronize().unwrap();
    for ((buf, len), (_, out)) in device_bufs.iter().zip(emu_bufs.iter_mut()) {
        if *len > 0 {
            dev.copy_to_host(buf.ptr(), out).unwrap();
        }
    }

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

/// The kernel definitions of the standard library's portable source (without the prelude),
/// as user source.
fn standard_definitions() -> String {
    let mut code = String::new();
    for k in standard_library().kernels() {
        code.push_str(&portable::kernel_definition(&k.signature.name).unwrap());
        code.push('\n');
    }
    code
}

#[test]
fn portable_kernels_match_the_host_reference_on_the_cpu() {
    let backend = HostBackend::new();
    let dev = backend.device(0).unwrap();
    let module = Module {
        name: "standard-as-source".into(),
        images: vec![ModuleImage::Source {
            code: standard_definitions(),
        }],
        options: Default::default(),
    };
    let t0 = std::time::Instant::now();
    let loaded = match dev.load_module(&module) {
        Ok(m) => m,
        Err(e @ xthunk_core::Error::Unavailable { .. }) => {
            if std::env::var("XTHUNK_REQUIRE_CXX").is_ok_and(|v| v == "1") {
                panic!("portable kernels on the CPU: {e}");
            }
            eprintln!("SKIPPED portable_kernels_match_the_host_reference_on_the_cpu: {e}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    eprintln!(
        "loaded the standard library's source on the CPU in {:.1?} ({})",
        t0.elapsed(),
        loaded.image()
    );
    let seed = 0x5eed ^ (std::process::id() as u64) << 20;
    eprintln!("seed {seed:#x}");
    let mut rng = Rng(seed);
    let mut failures = vec![];
    let mut count = 0;
    for k in standard_library().kernels() {
        for round in 0..ROUNDS.len() {
            failures.extend(check_kernel(&dev, &loaded, k, &mut rng, round));
        }
        count += 1;
    }
    assert_eq!(count, standard_library().len());
    assert!(count >= 247, "{count} standard kernels");
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
