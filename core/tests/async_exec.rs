//! Asynchronous execution (issue 28, item 1): `LoadedExecutable::execute_async` and its
//! `Execution` handle — the result against an independent reference (waited, polled, awaited
//! as a `Future`), cancel and deadline as distinct errors, two executions of one executable
//! overlapping, the completion callback, and a cancel token on the blocking path.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;
use xthunk_core::Error;
use xthunk_core::backend::{Backend, Buffer, Device};
use xthunk_core::builder::*;
use xthunk_core::executor::{CancelToken, ExecuteOptions, Execution, LoadedExecutable, RunBuffers};
use xthunk_core::host::HostBackend;
use xthunk_core::ir::*;

fn device() -> Arc<dyn Device> {
    HostBackend::new().device(0).unwrap()
}

fn kernel(name: &str, args: Vec<KernelArg>) -> Thunk {
    Thunk::Kernel(KernelThunk {
        module: "std".into(),
        name: name.into(),
        grid: Dim3::x(1),
        block: Dim3::x(64),
        shared_mem: 0,
        args,
    })
}

/// `y = x * 2^n`: a host-driven `while` that doubles `y` while the counter (from parameter
/// `n`, decremented each trip) is positive. With a large `n` it runs for hours.
fn doubling_program() -> Executable {
    let mut b = ExecutableBuilder::new("doubling");
    let x = b.parameter("x", DType::F32, &[8]);
    let n = b.parameter("n", DType::I32, &[1]);
    let y = b.output("y", DType::F32, &[8]);
    let counter = b.temp(DType::I32, &[1]);
    let tmp = b.temp(DType::I32, &[1]);
    let pred = b.temp(DType::Pred, &[1]);
    let neg1 = b.constant(DType::I32, &[1], (-1i32).to_le_bytes().to_vec());
    let zero = b.constant(DType::I32, &[1], 0i32.to_le_bytes().to_vec());
    let one = b.constant(DType::I32, &[1], 1i32.to_le_bytes().to_vec());
    b.standard_module();
    b.copy(x.slice(), y.slice());
    b.copy(n.slice(), counter.slice());
    let cond = vec![
        kernel("max_i32", vec![counter.r(), zero.r(), tmp.w(), 1i64.into()]),
        kernel("min_i32", vec![tmp.r(), one.r(), tmp.w(), 1i64.into()]),
        Thunk::Copy(CopyThunk {
            src: Slice::new(tmp.slice.allocation, 0, 1),
            dst: pred.slice(),
        }),
    ];
    let body = vec![
        kernel("scale_f32", vec![y.rw(), 2.0f32.into(), 8i64.into()]),
        kernel(
            "add_i32",
            vec![counter.r(), neg1.r(), counter.w(), 1i64.into()],
        ),
    ];
    b.push(Thunk::While(WhileThunk {
        cond,
        pred: pred.slice(),
        body,
        trip_count: None,
    }));
    b.build().unwrap()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// The buffers of one run: `x` and `n` uploaded, `y` poisoned with NaN.
fn buffers(
    dev: &Arc<dyn Device>,
    exe: &LoadedExecutable,
    x: &[f32],
    n: i32,
) -> (Vec<Buffer>, Vec<Buffer>) {
    let params = exe.allocate_parameters().unwrap();
    let outs = exe.allocate_outputs().unwrap();
    dev.copy_from_host(&f32_bytes(x), params[0].ptr()).unwrap();
    dev.copy_from_host(&n.to_le_bytes(), params[1].ptr())
        .unwrap();
    dev.copy_from_host(&f32_bytes(&[f32::NAN; 8]), outs[0].ptr())
        .unwrap();
    (params, outs)
}

fn output(dev: &Arc<dyn Device>, b: &(Vec<Buffer>, Vec<Buffer>)) -> Vec<f32> {
    let mut v = vec![0u8; 32];
    dev.copy_to_host(b.1[0].ptr(), &mut v).unwrap();
    floats(&v)
}

fn random_x(rng: &mut ChaCha8Rng) -> Vec<f32> {
    (0..8).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

fn check(got: &[f32], x: &[f32], n: i32) {
    for (g, x) in got.iter().zip(x) {
        let want = f64::from(*x) * 2f64.powi(n);
        assert!(
            (f64::from(*g) - want).abs() <= 1e-6 * want.abs(),
            "{got:?} vs {x:?} * 2^{n}"
        );
    }
}

fn loaded(dev: &Arc<dyn Device>) -> Arc<LoadedExecutable> {
    Arc::new(LoadedExecutable::load(dev.clone(), doubling_program()).unwrap())
}

/// Waits for `e` with a ceiling, so that a broken cancel fails the test instead of hanging it.
fn finish<T: Send + 'static>(e: Execution<T>) -> xthunk_core::Result<T> {
    assert!(
        e.wait_timeout(Duration::from_secs(60)),
        "the execution did not finish"
    );
    e.wait()
}

#[test]
fn an_async_execution_computes_what_the_blocking_one_does() {
    let dev = device();
    let exe = loaded(&dev);
    let mut rng = ChaCha8Rng::seed_from_u64(rand::random());
    let x = random_x(&mut rng);
    let n = rng.random_range(1..20);
    let e = exe
        .execute_async(buffers(&dev, &exe, &x, n), ExecuteOptions::default())
        .unwrap();
    let b = finish(e).unwrap();
    check(&output(&dev, &b), &x, n);
    // Polled until done, then taken once.
    let e = exe
        .execute_async(buffers(&dev, &exe, &x, n + 1), ExecuteOptions::default())
        .unwrap();
    while !e.is_done() {
        std::thread::yield_now();
    }
    let b = e.try_take().unwrap().unwrap();
    check(&output(&dev, &b), &x, n + 1);
    assert!(e.try_take().unwrap().is_err(), "a result is taken once");
}

struct Unpark(std::thread::Thread, AtomicBool);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.1.store(true, Ordering::SeqCst);
        self.0.unpark();
    }
}

/// A minimal executor: polls `f` on this thread, parking until its waker is called.
fn block_on<F: Future + Unpin>(mut f: F) -> F::Output {
    let unpark = Arc::new(Unpark(std::thread::current(), AtomicBool::new(false)));
    let waker = Waker::from(unpark.clone());
    let mut cx = Context::from_waker(&waker);
    let start = std::time::Instant::now();
    loop {
        if let Poll::Ready(v) = std::pin::Pin::new(&mut f).poll(&mut cx) {
            return v;
        }
        while !unpark.1.swap(false, Ordering::SeqCst) {
            assert!(start.elapsed() < Duration::from_secs(60), "never woken");
            std::thread::park_timeout(Duration::from_secs(1));
        }
    }
}

#[test]
fn an_execution_is_a_future_woken_by_its_thread() {
    let dev = device();
    let exe = loaded(&dev);
    let mut rng = ChaCha8Rng::seed_from_u64(rand::random());
    let x = random_x(&mut rng);
    let n = rng.random_range(1..20);
    let e = exe
        .execute_async(buffers(&dev, &exe, &x, n), ExecuteOptions::default())
        .unwrap();
    let b = block_on(e).unwrap();
    check(&output(&dev, &b), &x, n);
}

#[test]
fn cancel_and_deadline_stop_an_endless_loop_with_distinct_errors() {
    let dev = device();
    let exe = loaded(&dev);
    let x = [1.0f32; 8];
    let e = exe
        .execute_async(buffers(&dev, &exe, &x, i32::MAX), ExecuteOptions::default())
        .unwrap();
    assert!(
        !e.wait_timeout(Duration::from_millis(50)),
        "an endless run finished"
    );
    assert!(!e.is_done());
    let (tx, rx) = mpsc::channel();
    e.on_done(move |r| {
        tx.send(r.as_ref().err().map(|e| e.is_cancelled())).unwrap();
    });
    e.cancel();
    let err = finish(e).unwrap_err();
    assert!(err.is_cancelled(), "{err}");
    assert!(!err.is_deadline_exceeded(), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("cancelled") && msg.contains("while"), "{msg}");
    assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), Some(true));

    let e = exe
        .execute_async(
            buffers(&dev, &exe, &x, i32::MAX),
            ExecuteOptions {
                deadline: Some(Duration::from_millis(100)),
                ..Default::default()
            },
        )
        .unwrap();
    let err = finish(e).unwrap_err();
    assert!(err.is_deadline_exceeded(), "{err}");
    assert!(!err.is_cancelled(), "{err}");

    // The executable still runs after both.
    let mut rng = ChaCha8Rng::seed_from_u64(rand::random());
    let x = random_x(&mut rng);
    let e = exe
        .execute_async(buffers(&dev, &exe, &x, 3), ExecuteOptions::default())
        .unwrap();
    check(&output(&dev, &finish(e).unwrap()), &x, 3);
}

#[test]
fn two_executions_of_one_executable_overlap() {
    // A runs until B has completed: its token's probe (called at every check point) cancels
    // A once B's result is in. Were executions of one executable serialized, B could not
    // complete while A runs, and A would only stop at the probe's 60 s ceiling.
    let dev = device();
    let exe = loaded(&dev);
    let b_done = Arc::new(AtomicBool::new(false));
    let saw = b_done.clone();
    let started = std::time::Instant::now();
    let token = CancelToken::with_probe(
        Box::new(move || saw.load(Ordering::SeqCst) || started.elapsed() > Duration::from_secs(60)),
        Duration::ZERO,
    );
    let a = exe
        .execute_async(
            buffers(&dev, &exe, &[1.0; 8], i32::MAX),
            ExecuteOptions {
                cancel: Some(token),
                ..Default::default()
            },
        )
        .unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(rand::random());
    let x = random_x(&mut rng);
    let b = exe
        .execute_async(buffers(&dev, &exe, &x, 5), ExecuteOptions::default())
        .unwrap();
    let bufs = finish(b).unwrap();
    b_done.store(true, Ordering::SeqCst);
    check(&output(&dev, &bufs), &x, 5);
    assert!(!a.is_done() || started.elapsed() < Duration::from_secs(60));
    let err = finish(a).unwrap_err();
    assert!(err.is_cancelled(), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "A stopped at its ceiling: B did not overlap it"
    );
}

#[test]
fn the_blocking_path_takes_a_cancel_token_too() {
    let dev = device();
    let exe = loaded(&dev);
    let token = CancelToken::new();
    let theirs = token.clone();
    let canceller = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        theirs.cancel();
    });
    let (p, o) = buffers(&dev, &exe, &[1.0; 8], i32::MAX);
    let pr: Vec<&dyn xthunk_core::backend::DeviceMemory> =
        p.iter().map(|b| b.as_ref() as _).collect();
    let or: Vec<&dyn xthunk_core::backend::DeviceMemory> =
        o.iter().map(|b| b.as_ref() as _).collect();
    let err = exe
        .execute(
            &pr,
            &or,
            &ExecuteOptions {
                cancel: Some(token),
                ..Default::default()
            },
        )
        .unwrap_err();
    canceller.join().unwrap();
    assert!(matches!(err.innermost(), Error::Cancelled { .. }), "{err}");
}

static RELEASE: AtomicBool = AtomicBool::new(false);
const BIG: u64 = 1024; // f32 elements of the blocking kernel's buffer

/// A host kernel that blocks until [`RELEASE`] is set (30 s at most).
unsafe fn block_kernel(
    _args: &[xthunk_core::kernels::HostArg],
) -> Result<(), xthunk_core::kernels::KernelError> {
    let start = std::time::Instant::now();
    while !RELEASE.load(Ordering::SeqCst) {
        if start.elapsed() > Duration::from_secs(30) {
            return Err(xthunk_core::kernels::KernelError::Failed(
                "never released".into(),
            ));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

#[test]
fn a_deadline_keeps_the_callers_buffers_until_the_abandoned_work_finished() {
    use xthunk_core::kernels::{
        Extent, HostKernel, KernelLibrary, KernelSignature, Param, ParamKind,
    };
    let backend = HostBackend::new();
    let mut lib = KernelLibrary::new("test");
    lib.register(HostKernel {
        signature: KernelSignature {
            name: "block".into(),
            params: vec![Param {
                name: "y",
                kind: ParamKind::Buffer {
                    dtype: DType::F32,
                    access: Access::ReadWrite,
                    elems: Extent::Fixed(BIG),
                },
            }],
        },
        func: block_kernel,
    });
    backend.register_library(lib);
    let dev = backend.device(0).unwrap();
    let mut b = ExecutableBuilder::new("blocking");
    let y = b.output("y", DType::F32, &[BIG]);
    b.module(Module {
        name: "test".into(),
        images: vec![ModuleImage::Host {
            library: "test".into(),
        }],
        options: Default::default(),
    });
    b.push(Thunk::Kernel(KernelThunk {
        module: "test".into(),
        name: "block".into(),
        grid: Dim3::x(1),
        block: Dim3::x(1),
        shared_mem: 0,
        args: vec![y.rw()],
    }));
    let exe = Arc::new(LoadedExecutable::load(dev.clone(), b.build().unwrap()).unwrap());
    let dropped = Arc::new(AtomicBool::new(false));
    let tracked = Tracked {
        buffers: (vec![], exe.allocate_outputs().unwrap()),
        dropped: dropped.clone(),
    };
    let e = exe
        .execute_async(
            tracked,
            ExecuteOptions {
                deadline: Some(Duration::from_millis(100)),
                ..Default::default()
            },
        )
        .unwrap();
    let err = finish(e).unwrap_err();
    assert!(err.is_deadline_exceeded(), "{err}");
    // The kernel still runs on the output: the buffers are kept.
    assert!(
        !dropped.load(Ordering::SeqCst),
        "the buffers were dropped under the running kernel"
    );
    RELEASE.store(true, Ordering::SeqCst);
    let start = std::time::Instant::now();
    while !dropped.load(Ordering::SeqCst) && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(dropped.load(Ordering::SeqCst), "never dropped");
}

/// Buffers that say when they are dropped.
#[derive(Debug)]
struct Tracked {
    buffers: (Vec<Buffer>, Vec<Buffer>),
    dropped: Arc<AtomicBool>,
}

impl RunBuffers for Tracked {
    fn buffers(
        &self,
    ) -> (
        Vec<&dyn xthunk_core::backend::DeviceMemory>,
        Vec<&dyn xthunk_core::backend::DeviceMemory>,
    ) {
        self.buffers.buffers()
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}
