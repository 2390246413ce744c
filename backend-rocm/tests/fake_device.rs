//! The device paths (probing a device, memory, copies, memsets, module loading, launches with
//! marshalled arguments, events, HIP graphs with their plain fallback, the executor end to
//! end) against `tests/fixtures/fake_hip.c`: a minimal libamdhip64 stand-in on host memory,
//! built here with the system C compiler. Kernels are compiled by the *real* hipRTC (Debian's
//! ROCm 5.2, reached through a `libhiprtc.so` link beside the stand-in) and loaded as real code
//! objects; the stand-in runs `fill_f32` and `add_f32` on the host.
//!
//! This checks the backend's side of every call (what it passes, in which order, what it frees)
//! — not AMD hardware. Everything runs in a child process whose `XTHUNK_ROCM_PATH` is the
//! stand-in's folder (the default search off) and whose `XDG_CACHE_HOME` is temporary.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{TempDir, note, skip};
use std::path::{Path, PathBuf};
use std::process::Command;
use xthunk_core::Error;
use xthunk_core::backend::{Backend, DevicePtr, DeviceRange, GemmLaunch, LaunchArg, LaunchDims};
use xthunk_core::builder::ExecutableBuilder;
use xthunk_core::executor::{ExecuteOptions, LoadedExecutable};
use xthunk_core::ir::{
    CommandBufferThunk, DType, Dim3, KernelArg, MemorySpace, MemsetPattern, MemsetThunk, Module,
    ModuleImage, Scalar, Thunk,
};
use xthunk_rocm::RocmBackend;
use xthunk_rocm::graph::RocmGraph;

const TEST: &str = "the_backend_drives_a_hip_stand_in_correctly";

/// Reads one of the stand-in's counters.
fn counter(lib: &libloading::Library, name: &str) -> i32 {
    // SAFETY: `fake_counter` is declared in fake_hip.c as `int fake_counter(const char*)`.
    let f = unsafe {
        lib.get::<unsafe extern "C" fn(*const std::ffi::c_char) -> i32>(b"fake_counter\0")
    }
    .unwrap();
    let c = std::ffi::CString::new(name).unwrap();
    // SAFETY: `c` is NUL-terminated and outlives the call.
    unsafe { f(c.as_ptr()) }
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn to_f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Builds the stand-in (with `defines`) beside a `libhiprtc.so` link to the real runtime, and
/// runs `test` again in a child process on it; `None` when skipped.
fn run_child(test: &str, defines: &[&str]) -> Option<(String, TempDir)> {
    // The real runtime provides hipRTC (and comgr).
    let real = match RocmBackend::new().runtime_library() {
        Ok(l) => l.path,
        Err(e) => {
            skip(
                test,
                &format!("the real HIP runtime is needed for hipRTC ({e})"),
            );
            return None;
        }
    };
    let dir = TempDir::new("fake");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake_hip.c");
    let lib = dir.path().join("libamdhip64.so");
    let built = Command::new(&cc)
        .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror"])
        .args(defines.iter().map(|d| format!("-D{d}")))
        .arg("-o")
        .arg(&lib)
        .arg(&src)
        .output();
    let built = match built {
        Ok(b) => b,
        Err(e) => {
            skip(test, &format!("no C compiler `{cc}` ({e}); install gcc"));
            return None;
        }
    };
    assert!(
        built.status.success(),
        "building the stand-in failed:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    std::os::unix::fs::symlink(&real, dir.path().join("libhiprtc.so")).unwrap();
    let cache = TempDir::new("fakecache");
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture"])
        .env("XTHUNK_ROCM_TEST_CHILD", "1")
        .env("XTHUNK_ROCM_PATH", dir.path())
        .env("XTHUNK_ROCM_NO_DEFAULT_SEARCH", "1")
        .env("XDG_CACHE_HOME", cache.path())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "child failed:\n{text}");
    assert!(text.contains("1 passed"), "{text}");
    for l in text.lines().filter(|l| l.starts_with("fake:")) {
        note(l);
    }
    drop(dir);
    Some((text, cache))
}

#[test]
fn the_backend_drives_a_hip_stand_in_correctly() {
    if std::env::var_os("XTHUNK_ROCM_TEST_CHILD").is_some() {
        return child();
    }
    let Some((_, cache)) = run_child(TEST, &[]) else {
        return;
    };
    // The standard library was compiled once, into the temporary cache.
    let entries = std::fs::read_dir(cache.path().join("xthunk/kernels/rocm"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(entries, 1);
}

/// With `hipGetDevicePropertiesR0600` present (ROCm >= 6), gcnArchName comes from that layout.
#[test]
fn the_rocm6_property_layout_is_preferred() {
    if std::env::var_os("XTHUNK_ROCM_TEST_CHILD").is_some() {
        let info = RocmBackend::new().probe().unwrap();
        println!("fake: R0600: {:?}", info.devices[0]);
        assert_eq!(info.devices[0].arch, "gfx942:sramecc+:xnack-");
        return;
    }
    run_child("the_rocm6_property_layout_is_preferred", &["FAKE_R0600"]);
}

/// `hipGetDeviceCount` returning `hipErrorNoDevice` (100) after a successful `hipInit` is "no
/// AMD GPU" too.
#[test]
fn no_device_from_the_device_count_is_unavailable() {
    if std::env::var_os("XTHUNK_ROCM_TEST_CHILD").is_some() {
        let b = RocmBackend::new();
        match b.probe() {
            Err(Error::Unavailable { reason, .. }) => {
                println!("fake: no device: {reason}");
                assert!(reason.contains("no AMD GPU"), "{reason}");
                assert!(reason.contains("hipGetDeviceCount returned hipErrorNoDevice (100)"));
                assert!(reason.contains("HIP runtime 5.2.21153"), "{reason}");
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
        assert!(b.device(0).is_err());
        return;
    }
    run_child(
        "no_device_from_the_device_count_is_unavailable",
        &["FAKE_NO_DEVICE"],
    );
}

fn child() {
    let dir = PathBuf::from(std::env::var("XTHUNK_ROCM_PATH").unwrap());
    // SAFETY: the stand-in built by the parent; already loaded by the backend below (the same
    // handle), it only exports plain C functions.
    let fake = unsafe { libloading::Library::new(dir.join("libamdhip64.so")) }.unwrap();

    // ---- probing: one device, properties through attributes and the ROCm 5 layout --------
    let backend = RocmBackend::new();
    let info = backend.probe().unwrap();
    assert_eq!(info.devices.len(), 1, "{info:?}");
    let d = &info.devices[0];
    assert_eq!(d.arch, "gfx90a:sramecc+:xnack-");
    assert_eq!((d.compute_units, d.total_memory), (104, 64 << 30));
    assert!(d.emulated && d.name.contains("xthunk emulated"), "{d:?}");
    assert!(
        info.version.contains("HIP runtime 5.2.21153"),
        "{}",
        info.version
    );
    assert!(info.version.contains("no rocBLAS"), "{}", info.version);
    println!("fake: probe: {} | {:?}", info.version, d);
    assert!(backend.device(1).is_err());
    let dev = backend.device(0).unwrap();
    let caps = dev.capabilities();
    assert_eq!(
        caps.memory_spaces,
        vec![
            MemorySpace::Device,
            MemorySpace::HostPinned,
            MemorySpace::Unified
        ]
    );
    assert!(caps.supports_graphs && caps.gemm_dtypes.is_empty() && caps.warp_size == 64);

    {
        // ---- memory: spaces, alignment, accounting, range checks -------------------------
        let a = dev.allocate(1000, 4096, MemorySpace::Device).unwrap();
        assert_eq!(a.ptr().0 % 4096, 0);
        let pinned = dev.allocate(1000, 64, MemorySpace::HostPinned).unwrap();
        let managed = dev.allocate(1000, 64, MemorySpace::Unified).unwrap();
        let empty = dev.allocate(0, 64, MemorySpace::Device).unwrap();
        let stats = dev.memory_stats();
        assert_eq!((stats.live_bytes, stats.live_allocations), (3000, 4));
        assert!(matches!(
            dev.allocate(8, 64, MemorySpace::Collective),
            Err(Error::Unsupported { .. })
        ));
        assert!(matches!(
            dev.allocate(8, 3, MemorySpace::Device),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            dev.allocate(1 << 40, 64, MemorySpace::Device),
            Err(Error::OutOfMemory { .. })
        ));
        let data: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        dev.copy_from_host(&data, a.ptr()).unwrap();
        let mut back = vec![0u8; 1000];
        dev.copy_to_host(a.ptr(), &mut back).unwrap();
        assert_eq!(back, data);
        assert!(matches!(
            dev.copy_to_host(a.ptr().offset(1), &mut back),
            Err(Error::InvalidArgument(_))
        ));
        assert!(dev.copy_to_host(DevicePtr(16), &mut back[..4]).is_err());

        // ---- streams: memsets at offsets, copies (DtoD and through pinned memory) --------
        let s = dev.create_stream().unwrap();
        s.memset(a.ptr().offset(8), 16, MemsetPattern::U32(0x1122_3344))
            .unwrap();
        s.memset(a.ptr().offset(24), 4, MemsetPattern::U16(0xabcd))
            .unwrap();
        s.memset(a.ptr().offset(28), 3, MemsetPattern::U8(7))
            .unwrap();
        assert!(
            s.memset(a.ptr().offset(1), 4, MemsetPattern::U16(1))
                .is_err()
        );
        assert!(s.memset(a.ptr(), 6, MemsetPattern::U32(1)).is_err());
        assert!(
            s.memset(a.ptr().offset(996), 8, MemsetPattern::U32(1))
                .is_err()
        );
        let b = dev.allocate(1000, 64, MemorySpace::Device).unwrap();
        s.copy(a.ptr(), b.ptr(), 1000).unwrap();
        s.copy(b.ptr(), pinned.ptr(), 1000).unwrap();
        s.copy(pinned.ptr(), managed.ptr(), 1000).unwrap();
        assert!(s.copy(a.ptr(), a.ptr().offset(10), 100).is_err(), "overlap");
        assert!(s.copy(a.ptr(), b.ptr(), 1001).is_err());
        s.synchronize().unwrap();
        assert!(s.query().unwrap());
        let mut got = vec![0u8; 1000];
        dev.copy_to_host(managed.ptr(), &mut got).unwrap();
        let mut want = data.clone();
        want[8..24].copy_from_slice(&[0x44, 0x33, 0x22, 0x11].repeat(4));
        want[24..28].copy_from_slice(&[0xcd, 0xab, 0xcd, 0xab]);
        want[28..31].copy_from_slice(&[7, 7, 7]);
        assert_eq!(got, want);
        assert_eq!(counter(&fake, "dtod_copies"), 1);

        // ---- events ------------------------------------------------------------------------
        let e = dev.create_event().unwrap();
        s.record(e.as_ref()).unwrap();
        let s2 = dev.create_stream().unwrap();
        s2.wait(e.as_ref()).unwrap();
        e.synchronize().unwrap();
        assert!(e.query().unwrap());

        // ---- modules: the standard library compiled by hipRTC for the device's arch ------
        let m = dev
            .load_module(&Module {
                name: "std".into(),
                images: vec![
                    ModuleImage::Cubin {
                        arch: "sm_90".into(),
                        data: vec![1],
                    },
                    ModuleImage::Standard,
                ],
                options: Default::default(),
            })
            .unwrap();
        println!("fake: module image: {}", m.image());
        assert!(m.image().contains("standard→hsaco(gfx90a:sramecc+:xnack-)"));
        let fill = m.kernel("fill_f32").unwrap();
        let add = m.kernel("add_f32").unwrap();
        let missing = m.kernel("no_such_kernel").err().map(|e| e.to_string());
        assert!(missing.is_some_and(|e| e.contains("247 kernels")));
        let n = 250i64;
        let dims = LaunchDims {
            grid: Dim3::x(1),
            block: Dim3::x(256),
            shared_mem: 0,
        };
        let buf = |p: DevicePtr| LaunchArg::Buffer { ptr: p, len: 1000 };
        s.launch(
            &fill,
            dims,
            &[
                buf(b.ptr()),
                LaunchArg::Scalar(Scalar::F32(1.5)),
                LaunchArg::Scalar(Scalar::I64(n)),
            ],
        )
        .unwrap();
        s.launch(
            &add,
            dims,
            &[
                buf(b.ptr()),
                buf(b.ptr()),
                buf(pinned.ptr()),
                LaunchArg::Scalar(Scalar::I64(n)),
            ],
        )
        .unwrap();
        s.synchronize().unwrap();
        let mut got = vec![0u8; 1000];
        dev.copy_to_host(pinned.ptr(), &mut got).unwrap();
        assert_eq!(to_f32s(&got), vec![3.0f32; 250]);
        let launches = counter(&fake, "launches");
        assert_eq!(launches, 2);
        // Wrong arguments never reach the launch.
        let wrong = [
            buf(b.ptr()),
            LaunchArg::Scalar(Scalar::F32(1.5)),
            LaunchArg::Scalar(Scalar::I32(250)),
        ];
        let e = s.launch(&fill, dims, &wrong).err().map(|e| e.to_string());
        assert!(e.is_some_and(|e| e.contains("argument 2")), "wrong size");
        let e = s
            .launch(&fill, dims, &wrong[..2])
            .err()
            .map(|e| e.to_string());
        assert!(e.is_some_and(|e| e.contains("declares 3 parameters")));
        let outside = [
            LaunchArg::Buffer {
                ptr: b.ptr().offset(8),
                len: 1000,
            },
            wrong[1],
            LaunchArg::Scalar(Scalar::I64(n)),
        ];
        assert!(s.launch(&fill, dims, &outside).is_err(), "range check");
        assert_eq!(counter(&fake, "launches"), launches);

        // ---- gemm without rocBLAS: Unsupported, naming why ----------------------------------
        let g = GemmLaunch {
            a: DeviceRange {
                ptr: a.ptr(),
                len: 16,
            },
            b: DeviceRange {
                ptr: b.ptr(),
                len: 16,
            },
            c: DeviceRange {
                ptr: managed.ptr(),
                len: 16,
            },
            m: 2,
            n: 2,
            k: 2,
            lda: 2,
            ldb: 2,
            ldc: 2,
            trans_a: false,
            trans_b: false,
            alpha: 1.0,
            beta: 0.0,
            dtype: DType::F32,
            batch: 1,
            stride_a: 0,
            stride_b: 0,
            stride_c: 0,
        };
        let e = s.gemm(&g).err().map(|e| e.to_string());
        assert!(e.is_some_and(|e| e.contains("rocBLAS is unavailable")));

        // ---- graphs: native segments, and the plain fallback for what cannot be captured ---
        s.memset(pinned.ptr(), 1000, MemsetPattern::U8(0)).unwrap();
        s.begin_capture().unwrap();
        assert!(s.begin_capture().is_err());
        assert!(s.synchronize().is_err(), "no sync while capturing");
        s.memset(b.ptr(), 1000, MemsetPattern::U32(0)).unwrap(); // native
        s.launch(
            &fill,
            dims,
            &[
                buf(b.ptr()),
                LaunchArg::Scalar(Scalar::F32(2.0)),
                LaunchArg::Scalar(Scalar::I64(n)),
            ],
        )
        .unwrap(); // native
        s.memset(a.ptr(), 8, MemsetPattern::U16(0x4040)).unwrap(); // refused: plain
        s.copy(b.ptr(), pinned.ptr(), 1000).unwrap(); // native again
        let graph = s.end_capture().unwrap();
        let rg = graph.as_any().downcast_ref::<RocmGraph>().unwrap();
        println!(
            "fake: graph: {} native nodes, {} plain operations",
            rg.native_nodes(),
            rg.plain_ops()
        );
        assert_eq!((rg.native_nodes(), rg.plain_ops()), (1, 3));
        assert_eq!(graph.node_count(), 4);
        // Nothing ran during capture.
        let mut got = vec![0u8; 1000];
        dev.copy_to_host(pinned.ptr(), &mut got).unwrap();
        assert_eq!(got, vec![0u8; 1000]);
        let before = counter(&fake, "launches");
        for _ in 0..2 {
            s.launch_graph(&graph).unwrap();
        }
        s.synchronize().unwrap();
        dev.copy_to_host(pinned.ptr(), &mut got).unwrap();
        assert_eq!(to_f32s(&got), vec![2.0f32; 250]);
        let mut head = [0u8; 8];
        dev.copy_to_host(a.ptr(), &mut head).unwrap();
        assert_eq!(head, [0x40; 8]);
        assert_eq!(counter(&fake, "graph_launches"), 2);
        assert_eq!(counter(&fake, "launches"), before + 2);
        drop(graph);
        assert_eq!(counter(&fake, "live_graphs"), 0);
        // A graph recorded on another stream of the device replays here too.
        s2.begin_capture().unwrap();
        s2.copy(a.ptr(), b.ptr(), 8).unwrap();
        let g2 = s2.end_capture().unwrap();
        s.launch_graph(&g2).unwrap();
        drop((empty, g2));
    }

    // ---- the executor end to end, command buffer included, against the host backend -------
    let n = 300u64;
    let mut bld = ExecutableBuilder::new("fake_e2e");
    let x = bld.parameter("x", DType::F32, &[n]);
    let y = bld.output("y", DType::F32, &[n]);
    let t = bld.temp(DType::F32, &[n]);
    let u = bld.temp(DType::F32, &[n]);
    let module = bld.standard_module();
    let fill = |v: f32, out: &xthunk_core::builder::Tensor| {
        vec![
            out.w(),
            KernelArg::Scalar(Scalar::F32(v)),
            KernelArg::Scalar(Scalar::I64(n as i64)),
        ]
    };
    bld.kernel(&module, "fill_f32", n, fill(0.25, &t));
    bld.push(Thunk::CommandBuffer(CommandBufferThunk {
        body: vec![
            Thunk::Memset(MemsetThunk {
                dst: u.slice(),
                pattern: MemsetPattern::U16(0x3f80), // not capturable in the stand-in
            }),
            Thunk::Kernel(xthunk_core::ir::KernelThunk {
                module: module.clone(),
                name: "add_f32".into(),
                grid: Dim3::x(2),
                block: Dim3::x(256),
                shared_mem: 0,
                args: vec![
                    x.r(),
                    t.r(),
                    y.w(),
                    KernelArg::Scalar(Scalar::I64(n as i64)),
                ],
            }),
        ],
    }));
    bld.kernel(
        &module,
        "add_f32",
        n,
        vec![
            y.r(),
            u.r(),
            y.w(),
            KernelArg::Scalar(Scalar::I64(n as i64)),
        ],
    );
    let exe = bld.build().unwrap();
    let input: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let input = f32s(&input);
    let host = xthunk_core::host::HostBackend::new();
    let want = LoadedExecutable::load(host.device(0).unwrap(), exe.clone())
        .unwrap()
        .run_with_host_data(&[&input], &ExecuteOptions::default())
        .unwrap();
    let loaded = LoadedExecutable::load(dev.clone(), exe).unwrap();
    for run in 0..2 {
        let got = loaded
            .run_with_host_data(&[&input], &ExecuteOptions::default())
            .unwrap();
        assert_eq!(got, want, "run {run}");
    }
    println!(
        "fake: executor: {} outputs match the host backend over 2 runs",
        want.len()
    );
    drop(loaded);
    let stats = dev.memory_stats();
    assert_eq!((stats.live_bytes, stats.live_allocations), (0, 0));
    drop(dev);
    drop(backend);
    // Every handle the backend made was released, and nothing was freed twice.
    for (name, want) in [
        ("live_allocs", 0),
        ("live_streams", 0),
        ("live_events", 0),
        ("live_modules", 0),
        ("live_graphs", 0),
        ("bad_frees", 0),
    ] {
        assert_eq!(counter(&fake, name), want, "{name}");
    }
}
