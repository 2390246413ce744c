//! Checks at load (issue 18, item 2): kernel buffers aligned to their element type (in
//! validation, on every backend), and every kernel thunk's grid, block and dynamic shared
//! memory against the device's launch limits (the host has the portable ones, so a program
//! the host loads loads on GPUs too), with errors naming the thunk, the field and the limit.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use xthunk_core::Error;
use xthunk_core::backend::{Backend, LaunchLimits};
use xthunk_core::builder::ExecutableBuilder;
use xthunk_core::executor::LoadedExecutable;
use xthunk_core::host::HostBackend;
use xthunk_core::ir::*;

/// `scale_f32(x: rw [n], alpha, n)` on `n` elements of `x` starting at byte `offset` of a
/// 64-element f32 temp aligned to `alignment`.
fn scale_at(offset: u64, alignment: u64) -> Executable {
    let mut b = ExecutableBuilder::new("misaligned");
    let y = b.output("y", DType::F32, &[4]);
    let t = b.temp(DType::F32, &[64]);
    let m = b.standard_module();
    b.memset(t.slice(), MemsetPattern::U32(0));
    let x = Slice::new(t.slice().allocation, offset, 16);
    b.kernel(
        &m,
        "scale_f32",
        4,
        vec![
            KernelArg::Buffer {
                slice: x,
                access: Access::ReadWrite,
            },
            2.0f32.into(),
            4i64.into(),
        ],
    );
    b.copy(Slice::new(t.slice().allocation, 0, 16), y.slice());
    let mut exe = b.build_unchecked();
    exe.allocations[t.slice().allocation as usize].alignment = alignment;
    exe
}

#[test]
fn misaligned_f32_buffer_is_refused_by_validation() {
    assert_eq!(xthunk_core::verify(&scale_at(0, 64)), Ok(()));
    assert_eq!(xthunk_core::verify(&scale_at(12, 64)), Ok(()));
    let e = xthunk_core::verify(&scale_at(2, 64)).unwrap_err();
    assert_eq!(e.path, ThunkPath::entry(1));
    assert_eq!(e.field, "args[0]");
    assert!(
        e.message.contains("f32") && e.message.contains("offset 2"),
        "{e}"
    );
    // The host refuses it at load (validation runs first), before anything is allocated.
    let dev = HostBackend::new().device(0).unwrap();
    let err = LoadedExecutable::load(dev, scale_at(2, 64)).unwrap_err();
    assert!(matches!(err, Error::Invalid(_)), "{err}");
    assert!(err.to_string().contains("entry[1]: args[0]"), "{err}");
}

#[test]
fn allocation_aligned_below_the_element_size_is_refused() {
    let e = xthunk_core::verify(&scale_at(0, 2)).unwrap_err();
    assert_eq!(e.field, "args[0]");
    assert!(e.message.contains("aligned to 2 bytes"), "{e}");
    assert_eq!(xthunk_core::verify(&scale_at(0, 4)), Ok(()));
}

/// One `scale_f32` launch with the given shape, inside a sequence (so the path is nested).
fn shaped(grid: Dim3, block: Dim3, shared_mem: u32) -> Executable {
    let mut b = ExecutableBuilder::new("shape");
    let y = b.output("y", DType::F32, &[4]);
    let m = b.standard_module();
    b.memset(y.slice(), MemsetPattern::U32(0));
    b.begin_sequence();
    b.push(Thunk::Kernel(KernelThunk {
        module: m,
        name: "scale_f32".into(),
        grid,
        block,
        shared_mem,
        args: vec![y.rw(), 2.0f32.into(), 4i64.into()],
    }));
    b.end_sequence();
    b.build().unwrap()
}

fn load_error(exe: Executable) -> String {
    let dev = HostBackend::new().device(0).unwrap();
    match LoadedExecutable::load(dev, exe) {
        Ok(_) => panic!("the host loaded it"),
        Err(e) => {
            assert!(matches!(e, Error::Invalid(_)), "{e}");
            e.to_string()
        }
    }
}

#[test]
fn host_refuses_launches_beyond_the_portable_limits() {
    let one = Dim3::new(1, 1, 1);
    let dev = HostBackend::new().device(0).unwrap();
    assert_eq!(
        dev.capabilities().launch_limits,
        LaunchLimits::PORTABLE,
        "the host has the portable (CUDA) limits"
    );
    // At the limits: loads and runs.
    let ok = shaped(Dim3::new(65535, 2, 1), Dim3::new(1, 1, 64), 48 * 1024);
    let l = LoadedExecutable::load(dev.clone(), ok).unwrap();
    l.run_with_host_data(&[], &Default::default()).unwrap();

    let e = load_error(shaped(Dim3::new(65536, 65536, 65536), one, 0));
    assert!(
        e.contains("thunk entry[1].thunks[0]")
            && e.contains("grid.y")
            && e.contains("65536")
            && e.contains("65535"),
        "{e}"
    );
    let e = load_error(shaped(one, Dim3::new(1, 1, 65), 0));
    assert!(e.contains("block.z") && e.contains("limit of 64"), "{e}");
    let e = load_error(shaped(one, one, 48 * 1024 + 1));
    assert!(e.contains("shared_mem") && e.contains("49152"), "{e}");
    let e = load_error(shaped(Dim3::new(1 << 22, 1, 1), Dim3::new(1024, 1, 1), 0));
    assert!(e.contains("grid.x") && e.contains("4294967295"), "{e}");
}
