//! A compiled CPU program: the loaded shared library, its entry table (each kernel's source
//! name, linker name, parameter sizes) and launches, whose blocks are spread over a pool of
//! worker threads (one per CPU), each block run by the library's fiber scheduler.

use super::error::CpuError;
use crossbeam_channel::{Receiver, Sender, bounded, unbounded};
use std::ffi::{CStr, c_char, c_void};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// The C interface's version (`XT_CPU_ABI` in runtime.cpp).
const ABI: u32 = 2;
const MAX_PARAMS: usize = 64;
/// `XT_CPU_EACH` of runtime.cpp: an entry marked `XT_EACH_KERNEL`.
const EACH: u32 = 1;
/// An `XT_EACH_KERNEL` launch gets a block per this many of its threads (each block a
/// contiguous run of the iterations), at least 1 and at most [`EACH_BLOCKS_PER_WORKER`] per
/// worker of the pool: enough blocks to balance the workers, few enough that the per-block
/// cost (a claim, a fiber switch) is nothing beside a block's run.
const EACH_THREADS_PER_BLOCK: u64 = 8192;
const EACH_BLOCKS_PER_WORKER: u64 = 4;

/// `xt_cpu_run_args` of runtime.cpp.
#[repr(C)]
struct RunArgs {
    abi: u32,
    entry: u32,
    params: *mut *mut c_void,
    grid: [u32; 3],
    block: [u32; 3],
    shared_bytes: u32,
    warp_size: u32,
    next_block: *const AtomicU64,
    total_blocks: u64,
    failed: *const AtomicU32,
}

type RunFn = unsafe extern "C" fn(*const RunArgs, *mut c_char, usize) -> i32;
type InfoFn = unsafe extern "C" fn(
    u32,
    *mut *const c_char,
    *mut *const c_void,
    *mut u32,
    *mut u32,
    *mut u32,
) -> i32;

/// One parameter of a kernel as the library declares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Param {
    pub size: u32,
    pub pointer: bool,
    /// For a pointer, its pointee's alignment (1 for `void*`).
    pub align: u32,
}

/// A kernel of a program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The name in the source (qualified by namespaces).
    pub name: String,
    /// The linker's name (mangled unless `extern "C"`): what GPU images call the kernel.
    pub symbol: String,
    pub params: Vec<Param>,
    /// Marked `XT_EACH_KERNEL`: its body is one `XT_FOR_EACH` loop of independent
    /// iterations, whatever the launch's shape (see [`Program::launch`]).
    pub each: bool,
    index: u32,
}

/// A launch's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_bytes: u32,
    /// 32, or 64 to behave as an AMD wavefront.
    pub warp_size: u32,
}

/// A loaded CPU program.
pub struct Program {
    // The library stays loaded while any entry may run (the pool's jobs hold the program).
    _lib: libloading::Library,
    run: RunFn,
    entries: Vec<Entry>,
    /// The compiler's warnings.
    pub log: String,
}

// SAFETY: the library's functions are thread safe (each worker thread has its own scheduler
// state, thread-local in the library); `run` is a plain function pointer into it.
unsafe impl Send for Program {}
// SAFETY: as above; nothing of `Program` is mutated after loading.
unsafe impl Sync for Program {}

impl Program {
    /// Loads a compiled image (written to a private temporary file for `dlopen`).
    pub fn load(image: &[u8], log: String) -> Result<Program, CpuError> {
        let dir = tempfile::Builder::new()
            .prefix("xthunk-cpu-")
            .tempdir()
            .map_err(|e| CpuError::Io(format!("cannot make a folder for the library: {e}")))?;
        let path = dir.path().join("module.so");
        crate::files::write_atomic(&path, image, crate::files::MODE_PRIVATE)
            .map_err(|e| CpuError::Io(format!("cannot write the library: {e}")))?;
        // SAFETY: the image was compiled by us from the CPU runtime and portable source; its
        // static initializers are the runtime's trivial ones and the kernels' namespace-scope
        // objects of the portable subset.
        let lib = unsafe { libloading::Library::new(&path) }.map_err(|e| {
            CpuError::Load(format!(
                "cannot load the compiled library from {} ({e}; a temporary folder mounted \
                     noexec cannot hold it: set TMPDIR)",
                dir.path().display()
            ))
        })?;
        drop(dir);
        // SAFETY: the symbols are the runtime's, with these exact C signatures.
        let (abi, count, info, flags, run) = unsafe {
            let abi = *lib
                .get::<unsafe extern "C" fn() -> u32>(b"xt_cpu_abi")
                .map_err(|e| CpuError::Load(e.to_string()))?;
            let count = *lib
                .get::<unsafe extern "C" fn() -> u32>(b"xt_cpu_count")
                .map_err(|e| CpuError::Load(e.to_string()))?;
            let info = *lib
                .get::<InfoFn>(b"xt_cpu_entry_info")
                .map_err(|e| CpuError::Load(e.to_string()))?;
            let flags = *lib
                .get::<unsafe extern "C" fn(u32) -> u32>(b"xt_cpu_entry_flags")
                .map_err(|e| CpuError::Load(e.to_string()))?;
            let run = *lib
                .get::<RunFn>(b"xt_cpu_run")
                .map_err(|e| CpuError::Load(e.to_string()))?;
            (abi(), count(), info, flags, run)
        };
        if abi != ABI {
            return Err(CpuError::Load(format!(
                "the library's runtime ABI is {abi}, this build's {ABI}"
            )));
        }
        let mut entries = vec![];
        for i in 0..count {
            let mut name: *const c_char = std::ptr::null();
            let mut addr: *const c_void = std::ptr::null();
            let mut arity = 0u32;
            let mut sizes = [0u32; MAX_PARAMS];
            let mut pointer = [0u32; MAX_PARAMS];
            // SAFETY: the out-pointers are valid; `sizes`/`pointer` hold MAX_PARAMS entries,
            // the most the runtime writes (it refuses larger arities).
            let rc = unsafe {
                info(
                    i,
                    &mut name,
                    &mut addr,
                    &mut arity,
                    sizes.as_mut_ptr(),
                    pointer.as_mut_ptr(),
                )
            };
            if rc != 0 || name.is_null() {
                return Err(CpuError::Load(format!(
                    "entry {i} of the table is unusable (a kernel of more than {MAX_PARAMS} parameters?)"
                )));
            }
            // SAFETY: a NUL-terminated string literal of the table.
            let name = unsafe { CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned();
            let symbol = symbol_name(addr).unwrap_or_else(|| name.clone());
            let n = (arity as usize).min(MAX_PARAMS);
            // SAFETY: the runtime's `xt_cpu_entry_flags`, any index accepted.
            let each = unsafe { flags(i) } & EACH != 0;
            entries.push(Entry {
                name,
                symbol,
                params: (0..n)
                    .map(|j| Param {
                        size: sizes[j],
                        pointer: pointer[j] != 0,
                        align: pointer[j].max(1),
                    })
                    .collect(),
                each,
                index: i,
            });
        }
        Ok(Program {
            _lib: lib,
            run,
            entries,
            log,
        })
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The kernel called `name` in the source or by the linker.
    pub fn entry(&self, name: &str) -> Option<&Entry> {
        self.entries
            .iter()
            .find(|e| e.name == name)
            .or_else(|| self.entries.iter().find(|e| e.symbol == name))
    }

    /// Runs `entry` over `shape`; `slots` holds one 8-byte slot per parameter (a pointer, or
    /// an immediate's little-endian bytes), as the driver APIs' `kernelParams` point to.
    ///
    /// # Safety
    /// Every pointer in `slots` must be valid for everything the kernel does with it, and
    /// nothing else may touch that memory during the launch.
    ///
    /// An entry marked `XT_EACH_KERNEL` runs on a few one-thread blocks whatever `shape` says
    /// (its iterations do not depend on it): see [`Program::launch_as_asked`] for the shape
    /// as given.
    pub unsafe fn launch(
        self: &Arc<Self>,
        entry: &Entry,
        shape: Shape,
        slots: &[u64],
    ) -> Result<(), CpuError> {
        // SAFETY: the caller's contract.
        unsafe { self.launch_shaped(entry, shape, slots, entry.each) }
    }

    /// [`Program::launch`] with `shape` as given, every entry alike: what the driver emulator
    /// runs (it plays the GPU's grid; an `XT_FOR_EACH` loop there runs its iterations on each
    /// block's first thread, the others idle).
    ///
    /// # Safety
    /// As [`Program::launch`].
    pub unsafe fn launch_as_asked(
        self: &Arc<Self>,
        entry: &Entry,
        shape: Shape,
        slots: &[u64],
    ) -> Result<(), CpuError> {
        // SAFETY: the caller's contract.
        unsafe { self.launch_shaped(entry, shape, slots, false) }
    }

    /// # Safety
    /// As [`Program::launch`].
    unsafe fn launch_shaped(
        self: &Arc<Self>,
        entry: &Entry,
        shape: Shape,
        slots: &[u64],
        reshape: bool,
    ) -> Result<(), CpuError> {
        if slots.len() != entry.params.len() {
            return Err(CpuError::Launch {
                kernel: entry.name.clone(),
                message: format!(
                    "{} arguments for {} parameters",
                    slots.len(),
                    entry.params.len()
                ),
            });
        }
        let mut shape = shape;
        let mut total = shape
            .grid
            .iter()
            .try_fold(1u64, |a, &g| a.checked_mul(g as u64))
            .unwrap_or(0);
        if total == 0 {
            return Ok(());
        }
        if reshape {
            // The kernel's iterations do not depend on the shape: a few one-thread blocks,
            // each running a contiguous share of them as one loop.
            let threads = shape
                .block
                .iter()
                .fold(total, |a, &b| a.saturating_mul(b as u64));
            let most = (pool().size as u64).saturating_mul(EACH_BLOCKS_PER_WORKER);
            total = (threads / EACH_THREADS_PER_BLOCK).clamp(1, most.max(1));
            shape.grid = [u32::try_from(total).unwrap_or(u32::MAX), 1, 1];
            shape.block = [1, 1, 1];
        }
        let job = Job {
            program: self.clone(),
            slots: slots.to_vec().into_boxed_slice(),
            entry: entry.index,
            shape,
            next: AtomicU64::new(0),
            total,
            failed: AtomicU32::new(0),
        };
        let workers = pool()
            .size
            .min(usize::try_from(total).unwrap_or(usize::MAX));
        // The caller takes part too; it returns when no block is left.
        let (mine, helpers) = fan_out(workers - 1, move || job.run());
        let first = helpers.into_iter().fold(mine, |first, r| first.and(r));
        first.map_err(|message| CpuError::Launch {
            kernel: entry.name.clone(),
            message,
        })
    }
}

/// The symbol name of a function of a loaded library.
fn symbol_name(addr: *const c_void) -> Option<String> {
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    // SAFETY: dladdr only reads `addr` and writes `info`.
    let ok = unsafe { libc::dladdr(addr, info.as_mut_ptr()) };
    if ok == 0 {
        return None;
    }
    // SAFETY: dladdr succeeded and initialized `info`.
    let info = unsafe { info.assume_init() };
    if info.dli_sname.is_null() || info.dli_saddr != addr.cast_mut() {
        return None;
    }
    // SAFETY: a NUL-terminated name from the library's symbol table.
    Some(
        unsafe { CStr::from_ptr(info.dli_sname) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// One launch, shared by the workers that run its blocks.
struct Job {
    program: Arc<Program>,
    slots: Box<[u64]>,
    entry: u32,
    shape: Shape,
    next: AtomicU64,
    total: u64,
    failed: AtomicU32,
}

impl Job {
    fn run(&self) -> Result<(), String> {
        let mut ptrs: Vec<*mut c_void> = self
            .slots
            .iter()
            .map(|s| (s as *const u64).cast_mut().cast::<c_void>())
            .collect();
        let args = RunArgs {
            abi: ABI,
            entry: self.entry,
            params: ptrs.as_mut_ptr(),
            grid: self.shape.grid,
            block: self.shape.block,
            shared_bytes: self.shape.shared_bytes,
            warp_size: self.shape.warp_size,
            next_block: &self.next,
            total_blocks: self.total,
            failed: &self.failed,
        };
        let mut err = [0u8; 512];
        // SAFETY: `args` and everything it points to live across the call; the kernel only
        // reads the slots (the C side reads each parameter from its slot); the caller of
        // `launch` vouched for the buffers the slots point to.
        let rc = unsafe { (self.program.run)(&args, err.as_mut_ptr().cast(), err.len()) };
        if rc == 0 {
            return Ok(());
        }
        let end = err.iter().position(|&b| b == 0).unwrap_or(err.len());
        Err(String::from_utf8_lossy(&err[..end]).into_owned())
    }
}

/// Runs `piece(0)` … `piece(pieces - 1)` over the pool's workers and the calling thread, each
/// piece once, and returns when all have run. Pieces are claimed in turn from a counter, so a
/// worker busy elsewhere (another stream's launch) only delays a piece it has claimed; the
/// caller takes every piece no worker got to. Used for gemms that xthunk splits itself
/// (`super::super::gemm`), beside the kernels' launches on the same threads.
pub fn parallel<F: Fn(usize) + Send + Sync + 'static>(pieces: usize, piece: F) {
    struct Shared<F> {
        piece: F,
        next: AtomicU64,
        pieces: u64,
    }
    impl<F: Fn(usize)> Shared<F> {
        fn run(&self) {
            loop {
                let i = self.next.fetch_add(1, Ordering::Relaxed);
                if i >= self.pieces {
                    return;
                }
                (self.piece)(i as usize);
            }
        }
    }
    if pieces == 0 {
        return;
    }
    let shared = Shared {
        piece,
        next: AtomicU64::new(0),
        pieces: pieces as u64,
    };
    let helpers = pool().size.min(pieces).saturating_sub(1);
    fan_out(helpers, move || shared.run());
}

/// Runs `work` on the calling thread and on up to `helpers` of the pool's workers at once,
/// and returns the caller's result and each helper's, after every helper has finished (a
/// helper the pool cannot take is left out).
fn fan_out<T: Send + 'static>(
    helpers: usize,
    work: impl Fn() -> T + Send + Sync + 'static,
) -> (T, Vec<T>) {
    let work = Arc::new(work);
    let (done_tx, done_rx) = bounded::<T>(helpers);
    for _ in 0..helpers {
        let w = work.clone();
        let d = done_tx.clone();
        let sent = pool().jobs.send(Box::new(move || {
            let _ = d.send(w());
        }));
        if sent.is_err() {
            break;
        }
    }
    drop(done_tx);
    let mine = work();
    (mine, done_rx.iter().collect())
}

/// How long an idle worker polls for work before it sleeps (`XTHUNK_CPU_SPIN_US`, in
/// microseconds; default 200, 0 to sleep at once).
fn spin_window() -> std::time::Duration {
    let us = std::env::var("XTHUNK_CPU_SPIN_US")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(200)
        .min(100_000);
    std::time::Duration::from_micros(us)
}

/// The number of threads [`parallel`] and launches spread work over (the pool's workers and
/// the caller).
pub fn workers() -> usize {
    pool().size
}

type Work = Box<dyn FnOnce() + Send>;

/// A worker's next work, `None` once the pool is gone. Back-to-back launches of a step come
/// microseconds apart: the worker polls for `spin` before it sleeps, since waking a sleeping
/// thread can take a millisecond on a virtual machine.
fn next_work(rx: &Receiver<Work>, spin: std::time::Duration) -> Option<Work> {
    let start = std::time::Instant::now();
    while start.elapsed() < spin {
        match rx.try_recv() {
            Ok(w) => return Some(w),
            Err(crossbeam_channel::TryRecvError::Empty) => std::thread::yield_now(),
            Err(crossbeam_channel::TryRecvError::Disconnected) => return None,
        }
    }
    rx.recv().ok()
}

struct Pool {
    jobs: Sender<Work>,
    size: usize,
}

/// The process's worker threads (one per CPU, at most 64), started on the first launch.
fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let size = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .clamp(1, 64);
        let (tx, rx): (Sender<Work>, Receiver<Work>) = unbounded();
        let mut started = 1;
        for i in 1..size {
            let rx = rx.clone();
            let ok = std::thread::Builder::new()
                .name(format!("xthunk-cpu-{i}"))
                .spawn(move || {
                    let spin = spin_window();
                    while let Some(w) = next_work(&rx, spin) {
                        w();
                    }
                })
                .is_ok();
            if ok {
                started += 1;
            }
        }
        Pool {
            jobs: tx,
            size: started,
        }
    })
}
