//! Tests of stream-ordered scratch on the host backend: a host device wrapped to declare
//! `stream_ordered_alloc`, whose streams allocate with the host's allocator and free in
//! stream order (the free runs on the stream, after the work queued before it, and fills the
//! memory with NaN first, so that a free before other streams are done shows in results). A program
//! on several streams gives the plain host's results, allocates its arenas at every
//! execution, and has freed them all once the device is idle; the fallback keeps them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::{ExecuteOptions, ExecutorConfig, LoadedExecutable, ScratchPath};
use crate::backend::{
    Backend, BackendInfo, Buffer, Capabilities, Device, DeviceInfo, DeviceMemory, DevicePtr, Event,
    GemmLaunch, Graph, HostWork, KernelHandle, LaunchArg, LaunchDims, LoadedModule, MemoryStats,
    Stream,
};
use crate::error::Result;
use crate::host::HostBackend;
use crate::ir::{MemorySpace, MemsetPattern, Module};
use parking_lot::Mutex;
use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// What the wrapped device's streams did.
#[derive(Default)]
struct Counts {
    allocated: AtomicU64,
    live: AtomicI64,
}

struct PoolDevice {
    inner: Arc<dyn Device>,
    caps: Capabilities,
    counts: Arc<Counts>,
}

struct PoolStream {
    inner: Arc<dyn Stream>,
    device: Arc<dyn Device>,
    counts: Arc<Counts>,
}

/// A buffer freed in the order of `stream` when dropped.
struct Ordered {
    buf: Arc<Mutex<Option<Buffer>>>,
    ptr: DevicePtr,
    size: u64,
    stream: Arc<dyn Stream>,
    counts: Arc<Counts>,
}

impl std::fmt::Debug for Ordered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Ordered({} bytes at {})", self.size, self.ptr)
    }
}

impl DeviceMemory for Ordered {
    fn ptr(&self) -> DevicePtr {
        self.ptr
    }
    fn size(&self) -> u64 {
        self.size
    }
    fn space(&self) -> MemorySpace {
        MemorySpace::Device
    }
}

impl Drop for Ordered {
    fn drop(&mut self) {
        let (buf, counts) = (self.buf.clone(), self.counts.clone());
        let free: HostWork = Arc::new(move || {
            if let Some(b) = buf.lock().take() {
                // Freed memory reads as NaN: work of another stream still using it (a free
                // before the executor joined the streams) gives wrong results.
                let n = usize::try_from(b.size()).unwrap_or(0);
                // SAFETY: `b` is a live host allocation of `n` bytes at this address, owned
                // here; once freed nothing may touch it (what the test checks).
                unsafe { std::ptr::write_bytes(b.ptr().0 as usize as *mut u8, 0xff, n) };
                counts.live.fetch_sub(1, Ordering::SeqCst);
            }
            Ok(())
        });
        self.stream.enqueue_host(free).unwrap();
    }
}

impl Device for PoolDevice {
    fn backend_name(&self) -> &'static str {
        "host-with-pool"
    }
    fn info(&self) -> &DeviceInfo {
        self.inner.info()
    }
    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }
    fn allocate(&self, size: u64, alignment: u64, space: MemorySpace) -> Result<Buffer> {
        self.inner.allocate(size, alignment, space)
    }
    fn memory_stats(&self) -> MemoryStats {
        self.inner.memory_stats()
    }
    fn create_stream(&self) -> Result<Arc<dyn Stream>> {
        Ok(Arc::new(PoolStream {
            inner: self.inner.create_stream()?,
            device: self.inner.clone(),
            counts: self.counts.clone(),
        }))
    }
    fn create_event(&self) -> Result<Arc<dyn Event>> {
        self.inner.create_event()
    }
    fn load_module(&self, module: &Module) -> Result<Arc<dyn LoadedModule>> {
        self.inner.load_module(module)
    }
    fn copy_to_host(&self, src: DevicePtr, dst: &mut [u8]) -> Result<()> {
        self.inner.copy_to_host(src, dst)
    }
    fn copy_from_host(&self, src: &[u8], dst: DevicePtr) -> Result<()> {
        self.inner.copy_from_host(src, dst)
    }
    fn synchronize(&self) -> Result<()> {
        self.inner.synchronize()
    }
}

impl Stream for PoolStream {
    fn copy(&self, src: DevicePtr, dst: DevicePtr, size: u64) -> Result<()> {
        self.inner.copy(src, dst, size)
    }
    fn memset(&self, dst: DevicePtr, size: u64, pattern: MemsetPattern) -> Result<()> {
        self.inner.memset(dst, size, pattern)
    }
    fn launch(
        &self,
        kernel: &Arc<dyn KernelHandle>,
        dims: LaunchDims,
        args: &[LaunchArg],
    ) -> Result<()> {
        self.inner.launch(kernel, dims, args)
    }
    fn gemm(&self, gemm: &GemmLaunch) -> Result<()> {
        self.inner.gemm(gemm)
    }
    fn record(&self, event: &dyn Event) -> Result<()> {
        self.inner.record(event)
    }
    fn wait(&self, event: &dyn Event) -> Result<()> {
        self.inner.wait(event)
    }
    fn synchronize(&self) -> Result<()> {
        self.inner.synchronize()
    }
    fn query(&self) -> Result<bool> {
        self.inner.query()
    }
    fn enqueue_host(&self, f: HostWork) -> Result<()> {
        self.inner.enqueue_host(f)
    }
    fn set_immediate(&self, on: bool) {
        self.inner.set_immediate(on)
    }
    fn set_issue_deadline(&self, at: Option<std::time::Instant>) {
        self.inner.set_issue_deadline(at)
    }
    fn begin_capture(&self) -> Result<()> {
        self.inner.begin_capture()
    }
    fn end_capture(&self) -> Result<Arc<dyn Graph>> {
        self.inner.end_capture()
    }
    fn launch_graph(&self, graph: &Arc<dyn Graph>) -> Result<()> {
        self.inner.launch_graph(graph)
    }
    fn allocate_ordered(&self, size: u64, alignment: u64) -> Result<Buffer> {
        let buf = self.device.allocate(size, alignment, MemorySpace::Device)?;
        self.counts.allocated.fetch_add(1, Ordering::SeqCst);
        self.counts.live.fetch_add(1, Ordering::SeqCst);
        Ok(Box::new(Ordered {
            ptr: buf.ptr(),
            size,
            buf: Arc::new(Mutex::new(Some(buf))),
            stream: self.inner.clone(),
            counts: self.counts.clone(),
        }))
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

fn pool_device() -> (Arc<dyn Device>, Arc<Counts>) {
    let inner = HostBackend::new().device(0).unwrap();
    let caps = Capabilities {
        stream_ordered_alloc: true,
        ..inner.capabilities().clone()
    };
    let counts = Arc::new(Counts::default());
    let d = PoolDevice {
        inner,
        caps,
        counts: counts.clone(),
    };
    (Arc::new(d), counts)
}

fn input(n: u64) -> Vec<u8> {
    (0..n)
        .flat_map(|i| (((i % 23) as f32) / 23.0 - 0.5).to_le_bytes())
        .collect()
}

#[test]
fn arenas_come_from_the_pool_at_every_execution_on_several_streams() {
    let n = 1u64 << 16;
    let program = crate::bench::wide_dag(n, 64).unwrap();
    let x = input(n * crate::bench::WIDE_CHAINS);
    let host = HostBackend::new().device(0).unwrap();
    let plain = LoadedExecutable::load(host, program.clone()).unwrap();
    assert_eq!(plain.scratch_path(), ScratchPath::Pooled);
    let want = plain
        .run_with_host_data(&[&x], &ExecuteOptions::default())
        .unwrap();
    let (dev, counts) = pool_device();
    let exe = LoadedExecutable::load_with(dev.clone(), program.clone(), &ExecutorConfig::default())
        .unwrap();
    assert_eq!(exe.scratch_path(), ScratchPath::StreamOrdered);
    let info = exe.schedule_info();
    assert!(info.streams >= 2 && !info.sequential, "{info:?}");
    let arenas = exe.temp_plan().arenas.len() as u64;
    assert!(arenas >= 1);
    for round in 1..=4u64 {
        let got = exe
            .run_with_host_data(&[&x], &ExecuteOptions::default())
            .unwrap();
        assert!(
            got == want,
            "round {round}: results differ from the plain host's"
        );
        assert_eq!(counts.allocated.load(Ordering::SeqCst), round * arenas);
        // Given back as the execution completed (the free ran on the stream).
        assert_eq!(counts.live.load(Ordering::SeqCst), 0, "round {round}");
    }
    // Off in the configuration: the arenas stay with the pooled state.
    let off = ExecutorConfig {
        stream_ordered_scratch: false,
        ..ExecutorConfig::default()
    };
    let kept = LoadedExecutable::load_with(dev, program, &off).unwrap();
    assert_eq!(kept.scratch_path(), ScratchPath::Pooled);
    let before = counts.allocated.load(Ordering::SeqCst);
    let got = kept
        .run_with_host_data(&[&x], &ExecuteOptions::default())
        .unwrap();
    assert!(got == want);
    assert_eq!(counts.allocated.load(Ordering::SeqCst), before);
}

#[test]
fn a_backend_without_pools_takes_the_pooled_state() {
    let host = HostBackend::new();
    let _: BackendInfo = host.probe().unwrap();
    let dev = host.device(0).unwrap();
    assert!(!dev.capabilities().stream_ordered_alloc);
    let stream = dev.create_stream().unwrap();
    assert!(matches!(
        stream.allocate_ordered(64, 256),
        Err(crate::Error::Unsupported { .. })
    ));
    let exe = LoadedExecutable::load(dev, crate::bench::wide_dag(64, 1).unwrap()).unwrap();
    assert_eq!(exe.scratch_path(), ScratchPath::Pooled);
}
