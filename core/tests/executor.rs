//! The executor: the concurrent schedule against the in-order one on random programs,
//! control flow, command buffers, concurrency from many threads, deadlines and errors.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use proptest::prelude::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use xthunk_core::backend::{Backend, Buffer, Device, DeviceMemory};
use xthunk_core::builder::*;
use xthunk_core::executor::{ExecuteOptions, ExecutorConfig, LoadedExecutable};
use xthunk_core::host::HostBackend;
use xthunk_core::ir::*;
use xthunk_core::kernels::{
    Extent, HostArg, HostKernel, KernelError, KernelLibrary, KernelSignature, Param, ParamKind,
};
use xthunk_core::{Error, Result};

const ALLOC: u64 = 256; // bytes per output allocation
const NALLOC: u32 = 4;

fn device() -> Arc<dyn Device> {
    HostBackend::new().device(0).unwrap()
}

/// Runs `exe` with outputs initialized to `init` and returns their final bytes.
fn run(dev: &Arc<dyn Device>, exe: &LoadedExecutable, init: &[Vec<u8>]) -> Result<Vec<Vec<u8>>> {
    let params = exe.allocate_parameters()?;
    let outs = exe.allocate_outputs()?;
    for (o, bytes) in outs.iter().zip(init) {
        dev.copy_from_host(bytes, o.ptr())?;
    }
    let p: Vec<&dyn DeviceMemory> = params.iter().map(|b| b.as_ref() as _).collect();
    let o: Vec<&dyn DeviceMemory> = outs.iter().map(|b| b.as_ref() as _).collect();
    exe.execute(&p, &o, &ExecuteOptions::default())?;
    outs.iter()
        .map(|b: &Buffer| {
            let mut v = vec![0u8; b.size() as usize];
            dev.copy_to_host(b.ptr(), &mut v)?;
            Ok(v)
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Random programs
// ---------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Gen {
    Copy(u32, u64, u32, u64, u64),
    Memset(u32, u64, u64, u8),
    Add(u32, u64, u32, u64, u32, u64, u64),
    Scale(u32, u64, u64),
    Seq(Vec<Gen>),
    Async(bool, Vec<Gen>),
}

fn arb_gen() -> impl Strategy<Value = Gen> {
    let a = 0u32..NALLOC;
    let elem = 0u64..(ALLOC / 4);
    let leaf = prop_oneof![
        (a.clone(), elem.clone(), a.clone(), elem.clone(), 1u64..16)
            .prop_map(|(x, o, y, p, n)| Gen::Copy(x, o, y, p, n)),
        (a.clone(), elem.clone(), 1u64..16, 0u8..3)
            .prop_map(|(x, o, n, w)| Gen::Memset(x, o, n, w)),
        (
            a.clone(),
            elem.clone(),
            a.clone(),
            elem.clone(),
            a.clone(),
            elem.clone(),
            1u64..16
        )
            .prop_map(|(x, o, y, p, z, q, n)| Gen::Add(x, o, y, p, z, q, n)),
        (a.clone(), elem.clone(), 1u64..16).prop_map(|(x, o, n)| Gen::Scale(x, o, n)),
    ];
    leaf.prop_recursive(3, 40, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Gen::Seq),
            (any::<bool>(), proptest::collection::vec(inner, 0..6))
                .prop_map(|(c, b)| Gen::Async(c, b)),
        ]
    })
}

/// Clamps a slice of `n` f32 elements at element `o` into the allocation.
fn sl(a: u32, o: u64, n: u64) -> (Slice, u64) {
    let max = ALLOC / 4;
    let n = n.min(max);
    let o = o.min(max - n);
    (Slice::new(a, o * 4, n * 4), n)
}

fn lower(g: &Gen, next_id: &mut u32, out: &mut Vec<Thunk>) {
    let buf = |s: Slice, access| KernelArg::Buffer { slice: s, access };
    match g {
        Gen::Copy(x, o, y, p, n) => {
            let (src, n) = sl(*x, *o, *n);
            let (dst, _) = sl(*y, *p, n);
            if !src.overlaps(&dst) {
                out.push(Thunk::Copy(CopyThunk { src, dst }));
            }
        }
        Gen::Memset(x, o, n, w) => {
            let (dst, _) = sl(*x, *o, *n);
            let pattern = match w {
                0 => MemsetPattern::U8(0x3c),
                1 => MemsetPattern::U16(0x4000),
                _ => MemsetPattern::U32(0x3f80_0000 + *o as u32),
            };
            out.push(Thunk::Memset(MemsetThunk { dst, pattern }));
        }
        Gen::Add(x, o, y, p, z, q, n) => {
            let (a, n) = sl(*x, *o, *n);
            let (b, _) = sl(*y, *p, n);
            let (c, _) = sl(*z, *q, n);
            out.push(Thunk::Kernel(KernelThunk {
                module: "std".into(),
                name: "add_f32".into(),
                grid: Dim3::x(1),
                block: Dim3::x(64),
                shared_mem: 0,
                args: vec![
                    buf(a, Access::Read),
                    buf(b, Access::Read),
                    buf(c, Access::Write),
                    KernelArg::Scalar(Scalar::I64(n as i64)),
                ],
            }));
        }
        Gen::Scale(x, o, n) => {
            let (s, n) = sl(*x, *o, *n);
            out.push(Thunk::Kernel(KernelThunk {
                module: "std".into(),
                name: "scale_f32".into(),
                grid: Dim3::x(1),
                block: Dim3::x(64),
                shared_mem: 0,
                args: vec![
                    buf(s, Access::ReadWrite),
                    KernelArg::Scalar(Scalar::F32(1.5)),
                    KernelArg::Scalar(Scalar::I64(n as i64)),
                ],
            }));
        }
        Gen::Seq(body) => {
            let mut v = vec![];
            for c in body {
                lower(c, next_id, &mut v);
            }
            out.push(Thunk::Sequence(v));
        }
        Gen::Async(comm, body) => {
            let mut v = vec![];
            for c in body {
                lower(c, next_id, &mut v);
            }
            let id = *next_id;
            *next_id += 1;
            out.push(Thunk::AsyncStart(AsyncStartThunk {
                id,
                kind: if *comm {
                    AsyncKind::Communication
                } else {
                    AsyncKind::Compute
                },
                body: v,
            }));
            out.push(Thunk::AsyncDone(AsyncDoneThunk { id }));
        }
    }
}

fn program(gens: &[Gen]) -> Executable {
    let mut entry = vec![];
    let mut id = 0;
    for g in gens {
        lower(g, &mut id, &mut entry);
    }
    let mut b = ExecutableBuilder::new("random");
    for i in 0..NALLOC {
        b.output(&format!("o{i}"), DType::F32, &[ALLOC / 4]);
    }
    b.standard_module();
    for t in entry {
        b.push(t);
    }
    b.build().expect("generated programs are valid")
}

fn init_bytes(seed: u64) -> Vec<Vec<u8>> {
    (0..NALLOC)
        .map(|a| {
            (0..ALLOC / 4)
                .flat_map(|i| {
                    (((i * 31 + a as u64 * 7 + seed) % 17) as f32 * 0.25 - 2.0).to_le_bytes()
                })
                .collect()
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, .. ProptestConfig::default() })]

    /// The concurrent executor gives byte-identical results to the in-order one on 1, 2 and
    /// 4 streams (and to a plain sequential schedule that ignores async scopes).
    #[test]
    fn concurrent_matches_in_order(gens in proptest::collection::vec(arb_gen(), 1..30), seed in 0u64..1000) {
        let dev = device();
        let exe = program(&gens);
        let init = init_bytes(seed);
        let reference = {
            let l = LoadedExecutable::load_with(dev.clone(), exe.clone(), &ExecutorConfig::in_order()).unwrap();
            run(&dev, &l, &init).unwrap()
        };
        for streams in [1usize, 2, 4] {
            let cfg = ExecutorConfig { streams, sequential_below: 0, ..ExecutorConfig::default() };
            let l = LoadedExecutable::load_with(dev.clone(), exe.clone(), &cfg).unwrap();
            let got = run(&dev, &l, &init).unwrap();
            prop_assert_eq!(&got, &reference, "streams = {}, schedule = {:?}", streams, l.schedule_info());
            // Run again: pooled state reused.
            let again = run(&dev, &l, &init).unwrap();
            prop_assert_eq!(&again, &reference);
        }
    }
}

#[test]
fn wide_programs_really_use_several_streams() {
    let gens: Vec<Gen> = (0..8)
        .map(|i| Gen::Scale(i % NALLOC, (i as u64 / 4) * 32, 16))
        .collect();
    let exe = program(&gens);
    let l = LoadedExecutable::load_with(device(), exe, &ExecutorConfig::with_streams(4)).unwrap();
    let info = l.schedule_info();
    assert!(!info.sequential, "{info:?}");
    assert_eq!(info.streams, 4);
}

// ---------------------------------------------------------------------------------------
// Control flow and command buffers
// ---------------------------------------------------------------------------------------

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn scale(t: &Tensor, alpha: f32) -> Thunk {
    Thunk::Kernel(KernelThunk {
        module: "std".into(),
        name: "scale_f32".into(),
        grid: Dim3::x(1),
        block: Dim3::x(64),
        shared_mem: 0,
        args: vec![t.rw(), alpha.into(), (t.elements() as i64).into()],
    })
}

/// `x *= 2` while the counter (decremented each iteration) is positive, with and without a
/// known trip count.
fn while_program(trip_count: Option<u64>, iterations: i32) -> Executable {
    let mut b = ExecutableBuilder::new("while");
    let x = b.parameter("x", DType::F32, &[8]);
    let y = b.output("y", DType::F32, &[8]);
    let counter = b.temp(DType::I32, &[1]);
    let pred = b.temp(DType::Pred, &[1]);
    let neg1 = b.constant(DType::I32, &[1], (-1i32).to_le_bytes().to_vec());
    let zero = b.constant(DType::I32, &[1], 0i32.to_le_bytes().to_vec());
    let m = b.standard_module();
    let _ = m;
    b.copy(x.slice(), y.slice());
    b.memset(counter.slice(), MemsetPattern::U32(iterations as u32));
    let k = |name: &str, args: Vec<KernelArg>| {
        Thunk::Kernel(KernelThunk {
            module: "std".into(),
            name: name.into(),
            grid: Dim3::x(1),
            block: Dim3::x(1),
            shared_mem: 0,
            args,
        })
    };
    // pred = counter > 0, computed as max(counter, 0) -> convert to f32 -> ... keep it
    // simple with integer kernels: tmp = min(counter, 1); pred byte = low byte of tmp.
    let tmp = b.temp(DType::I32, &[1]);
    let one = b.constant(DType::I32, &[1], 1i32.to_le_bytes().to_vec());
    let cond = vec![
        k("max_i32", vec![counter.r(), zero.r(), tmp.w(), 1i64.into()]),
        k("min_i32", vec![tmp.r(), one.r(), tmp.w(), 1i64.into()]),
        Thunk::Copy(CopyThunk {
            src: Slice::new(tmp.slice.allocation, 0, 1),
            dst: pred.slice(),
        }),
    ];
    let body = vec![
        scale(&y, 2.0),
        k(
            "add_i32",
            vec![counter.r(), neg1.r(), counter.w(), 1i64.into()],
        ),
    ];
    b.push(Thunk::While(WhileThunk {
        cond,
        pred: pred.slice(),
        body,
        trip_count,
    }));
    b.build().unwrap()
}

#[test]
fn while_loops_with_and_without_trip_count() {
    let dev = device();
    let x: Vec<f32> = (0..8).map(|i| i as f32 - 3.0).collect();
    let xb: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    for (trip, iters) in [(None, 5), (Some(5), 5), (None, 0), (Some(0), 0), (None, 11)] {
        let l = LoadedExecutable::load(dev.clone(), while_program(trip, iters)).unwrap();
        let out = l
            .run_with_host_data(&[&xb], &ExecuteOptions::default())
            .unwrap();
        let want: Vec<f32> = x.iter().map(|v| v * 2f32.powi(iters)).collect();
        assert_eq!(f32s(&out[0]), want, "trip {trip:?} iterations {iters}");
    }
}

fn conditional_program(index_type: DType) -> Executable {
    let mut b = ExecutableBuilder::new("cond");
    let idx = b.parameter("index", index_type, &[1]);
    let y = b.output("y", DType::F32, &[4]);
    b.standard_module();
    let fill = |v: f32| {
        Thunk::Kernel(KernelThunk {
            module: "std".into(),
            name: "fill_f32".into(),
            grid: Dim3::x(1),
            block: Dim3::x(4),
            shared_mem: 0,
            args: vec![y.w(), v.into(), 4i64.into()],
        })
    };
    let branches = if index_type == DType::Pred {
        vec![vec![fill(10.0)], vec![fill(20.0)]]
    } else {
        vec![
            vec![fill(0.0)],
            vec![Thunk::Sequence(vec![fill(1.0)])],
            vec![fill(2.0)],
        ]
    };
    b.push(Thunk::Conditional(ConditionalThunk {
        index: idx.slice(),
        index_type,
        branches,
    }));
    b.build().unwrap()
}

#[test]
fn conditional_selects_branches_and_clamps_out_of_range() {
    let dev = device();
    let l = LoadedExecutable::load(dev.clone(), conditional_program(DType::I32)).unwrap();
    for (i, want) in [
        (0i32, 0.0f32),
        (1, 1.0),
        (2, 2.0),
        (3, 2.0),
        (-1, 2.0),
        (i32::MAX, 2.0),
    ] {
        let out = l
            .run_with_host_data(&[&i.to_le_bytes()], &ExecuteOptions::default())
            .unwrap();
        assert_eq!(f32s(&out[0]), vec![want; 4], "index {i}");
    }
    let l = LoadedExecutable::load(dev, conditional_program(DType::Pred)).unwrap();
    for (p, want) in [(1u8, 10.0f32), (0, 20.0), (7, 10.0)] {
        let out = l
            .run_with_host_data(&[&[p]], &ExecuteOptions::default())
            .unwrap();
        assert_eq!(f32s(&out[0]), vec![want; 4], "pred {p}");
    }
}

fn chain_program(n: usize, command_buffer: bool) -> Executable {
    let mut b = ExecutableBuilder::new("chain");
    let x = b.parameter("x", DType::F32, &[16]);
    let y = b.output("y", DType::F32, &[16]);
    let t = b.temp(DType::F32, &[16]);
    b.standard_module();
    let mut body = vec![Thunk::Copy(CopyThunk {
        src: x.slice(),
        dst: t.slice(),
    })];
    for i in 0..n {
        body.push(scale(&t, 1.0 + (i % 3) as f32 * 0.25));
    }
    body.push(Thunk::Copy(CopyThunk {
        src: t.slice(),
        dst: y.slice(),
    }));
    if command_buffer {
        b.push(Thunk::CommandBuffer(CommandBufferThunk { body }));
    } else {
        for t in body {
            b.push(t);
        }
    }
    b.build().unwrap()
}

#[test]
fn command_buffer_matches_direct_and_rerecords_on_new_addresses() {
    let dev = device();
    let direct = LoadedExecutable::load(dev.clone(), chain_program(20, false)).unwrap();
    let cmd = LoadedExecutable::load(dev.clone(), chain_program(20, true)).unwrap();
    for round in 0..4 {
        // Fresh parameter and output buffers each round: new addresses force re-recording.
        let x: Vec<u8> = (0..16)
            .flat_map(|i| ((i + round) as f32 * 0.01).to_le_bytes())
            .collect();
        let a = direct
            .run_with_host_data(&[&x], &ExecuteOptions::default())
            .unwrap();
        let b = cmd
            .run_with_host_data(&[&x], &ExecuteOptions::default())
            .unwrap();
        assert_eq!(a, b, "round {round}");
    }
}

// ---------------------------------------------------------------------------------------
// Concurrency, deadlines, errors
// ---------------------------------------------------------------------------------------

#[test]
fn one_executable_from_eight_threads() {
    let dev = device();
    let exe = Arc::new(LoadedExecutable::load(dev.clone(), chain_program(50, false)).unwrap());
    let cmd = Arc::new(LoadedExecutable::load(dev, chain_program(50, true)).unwrap());
    let input = |t: usize| -> Vec<u8> {
        (0..16)
            .flat_map(|i| ((i * 3 + t) as f32 * 0.001).to_le_bytes())
            .collect()
    };
    let expected: Vec<Vec<u8>> = (0..8)
        .map(|t| {
            exe.run_with_host_data(&[&input(t)], &ExecuteOptions::default())
                .unwrap()[0]
                .clone()
        })
        .collect();
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let exe = exe.clone();
            let cmd = cmd.clone();
            let want = expected[t].clone();
            let x = input(t);
            std::thread::spawn(move || {
                for i in 0..100 {
                    let l = if i % 2 == 0 { &exe } else { &cmd };
                    let out = l
                        .run_with_host_data(&[&x], &ExecuteOptions::default())
                        .unwrap();
                    assert_eq!(out[0], want, "thread {t} iteration {i}");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

static RELEASE: AtomicBool = AtomicBool::new(false);

/// A host test kernel that blocks until [`RELEASE`] is set.
unsafe fn block_kernel(_args: &[HostArg]) -> std::result::Result<(), KernelError> {
    let start = Instant::now();
    while !RELEASE.load(Ordering::SeqCst) {
        if start.elapsed() > Duration::from_secs(30) {
            return Err(KernelError::Failed("never released".into()));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

unsafe fn fail_kernel(_args: &[HostArg]) -> std::result::Result<(), KernelError> {
    Err(KernelError::Failed("injected failure".into()))
}

fn test_backend() -> HostBackend {
    let backend = HostBackend::new();
    let mut lib = KernelLibrary::new("test");
    let sig = |name: &str| KernelSignature {
        name: name.into(),
        params: vec![Param {
            name: "x",
            kind: ParamKind::Buffer {
                dtype: DType::F32,
                access: Access::ReadWrite,
                elems: Extent::Fixed(4),
            },
        }],
    };
    lib.register(HostKernel {
        signature: sig("block"),
        func: block_kernel,
    });
    lib.register(HostKernel {
        signature: sig("fail"),
        func: fail_kernel,
    });
    backend.register_library(lib);
    backend
}

fn test_program(kernel: &str) -> Executable {
    let mut b = ExecutableBuilder::new("blocking");
    let y = b.output("y", DType::F32, &[4]);
    let t = b.temp(DType::F32, &[4]);
    b.module(Module {
        name: "test".into(),
        images: vec![ModuleImage::Host {
            library: "test".into(),
        }],
        options: Default::default(),
    });
    b.memset(t.slice(), MemsetPattern::U32(0));
    b.push(Thunk::Kernel(KernelThunk {
        module: "test".into(),
        name: kernel.into(),
        grid: Dim3::x(1),
        block: Dim3::x(1),
        shared_mem: 0,
        args: vec![t.rw()],
    }));
    b.copy(t.slice(), y.slice());
    b.build().unwrap()
}

#[test]
fn deadline_names_the_pending_thunk() {
    let backend = test_backend();
    let dev = backend.device(0).unwrap();
    let baseline = dev.memory_stats().live_bytes;
    {
        let l = LoadedExecutable::load(dev.clone(), test_program("block")).unwrap();
        let start = Instant::now();
        let err = l
            .run_with_host_data(
                &[],
                &ExecuteOptions {
                    deadline: Some(Duration::from_millis(200)),
                    ..Default::default()
                },
            )
            .unwrap_err();
        let took = start.elapsed();
        assert!(took < Duration::from_millis(200 + 300), "took {took:?}");
        let msg = err.to_string();
        assert!(matches!(err, Error::DeadlineExceeded { .. }), "{msg}");
        assert!(
            msg.contains("entry[1]") && msg.contains("test.block"),
            "{msg}"
        );
    }
    RELEASE.store(true, Ordering::SeqCst);
    // The reaper frees the abandoned execution's memory once the kernel returns.
    let start = Instant::now();
    while dev.memory_stats().live_bytes != baseline && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(dev.memory_stats().live_bytes, baseline);
}

#[test]
fn kernel_errors_are_reported_and_nothing_leaks() {
    let backend = test_backend();
    let dev = backend.device(0).unwrap();
    let baseline = dev.memory_stats().live_bytes;
    {
        let l = LoadedExecutable::load(dev.clone(), test_program("fail")).unwrap();
        for _ in 0..3 {
            let err = l
                .run_with_host_data(&[], &ExecuteOptions::default())
                .unwrap_err();
            let msg = err.to_string();
            assert!(
                msg.contains("injected failure") && msg.contains("kernel `fail`"),
                "{msg}"
            );
        }
        // A later good run on the same device still works.
        let ok = LoadedExecutable::load(dev.clone(), chain_program(3, false)).unwrap();
        ok.run_with_host_data(&[&[0u8; 64]], &ExecuteOptions::default())
            .unwrap();
    }
    assert_eq!(dev.memory_stats().live_bytes, baseline);
}

/// Straight-line programs of at least `AUTO_COMMAND_BUFFER_MIN` plain thunks run as one
/// implicit command buffer by default: same bytes as the in-order executor, also when the
/// buffers change between executions (re-recording) and with a deadline (thunk by thunk).
#[test]
fn implicit_command_buffer_matches_in_order() {
    use xthunk_core::executor::AUTO_COMMAND_BUFFER_MIN;
    let dev = device();
    let exe = chain_program(AUTO_COMMAND_BUFFER_MIN + 10, false);
    let fused = LoadedExecutable::load(dev.clone(), exe.clone()).unwrap();
    assert!(fused.schedule_info().implicit_command_buffer);
    let plain = LoadedExecutable::load_with(dev, exe, &ExecutorConfig::in_order()).unwrap();
    assert!(!plain.schedule_info().implicit_command_buffer);
    for round in 0..3 {
        let x: Vec<u8> = (0..16)
            .flat_map(|i| ((i * 7 + round) as f32 * 0.01).to_le_bytes())
            .collect();
        let want = plain
            .run_with_host_data(&[&x], &ExecuteOptions::default())
            .unwrap();
        let got = fused
            .run_with_host_data(&[&x], &ExecuteOptions::default())
            .unwrap();
        assert_eq!(got, want, "round {round}");
        let opts = ExecuteOptions {
            deadline: Some(Duration::from_secs(30)),
            ..Default::default()
        };
        assert_eq!(fused.run_with_host_data(&[&x], &opts).unwrap(), want);
    }
}

/// `execution_seed` writes a value of its own for every execution of a loaded program (run
/// `n` of a load gets `execution_seed(n)`), the same sequence after a new load, and a
/// program built with a wrong destination is refused naming the call.
#[test]
fn execution_seed_differs_per_execution_and_repeats_per_load() {
    let dev = device();
    let program = || {
        let mut b = ExecutableBuilder::new("seed");
        let s = b.output("s", DType::U64, &[]);
        b.try_execution_seed(&s).unwrap();
        b.build().unwrap()
    };
    let seeds = |l: &LoadedExecutable, n: usize| -> Vec<u64> {
        (0..n)
            .map(|_| {
                let out = l
                    .run_with_host_data(&[], &ExecuteOptions::default())
                    .unwrap();
                u64::from_le_bytes(out[0][..8].try_into().unwrap())
            })
            .collect()
    };
    let first = seeds(&LoadedExecutable::load(dev.clone(), program()).unwrap(), 4);
    let want: Vec<u64> = (0..4).map(execution_seed).collect();
    assert_eq!(first, want);
    let distinct: std::collections::BTreeSet<u64> = first.iter().copied().collect();
    assert_eq!(distinct.len(), 4, "{first:x?}");
    let again = seeds(&LoadedExecutable::load(dev, program()).unwrap(), 2);
    assert_eq!(again, first[..2]);

    let mut b = ExecutableBuilder::new("bad");
    let s = b.output("s", DType::I32, &[2]);
    let e = b.try_execution_seed(&s).unwrap_err();
    assert_eq!((e.call, e.arg), ("execution_seed", "dst"));
}
