//! Input–output aliases in the executor (issue 28, item 2): a donated buffer becomes the
//! output (with a copy of the parameter first where the program reads it after writing the
//! output), an alias not donated starts the output as a copy of the parameter, and any
//! overlap the program does not declare is still refused.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use xthunk_core::backend::{Backend, Buffer, Device, DeviceMemory, DevicePtr};
use xthunk_core::builder::ExecutableBuilder;
use xthunk_core::executor::{ExecuteOptions, LoadedExecutable};
use xthunk_core::host::HostBackend;
use xthunk_core::ir::*;

fn device() -> Arc<dyn Device> {
    HostBackend::new().device(0).unwrap()
}

fn buffer(dev: &dyn Device, values: &[f32]) -> Buffer {
    let b = dev
        .allocate(4 * values.len() as u64, 64, MemorySpace::Device)
        .unwrap();
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    dev.copy_from_host(&bytes, b.ptr()).unwrap();
    b
}

fn read(dev: &dyn Device, b: &Buffer) -> Vec<f32> {
    let mut bytes = vec![0u8; b.size() as usize];
    dev.copy_to_host(b.ptr(), &mut bytes).unwrap();
    bytes
        .chunks(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Bytes inside another buffer.
#[derive(Debug)]
struct Part(DevicePtr, u64);

impl DeviceMemory for Part {
    fn ptr(&self) -> DevicePtr {
        self.0
    }
    fn size(&self) -> u64 {
        self.1
    }
    fn space(&self) -> MemorySpace {
        MemorySpace::Device
    }
}

fn add(b: &mut ExecutableBuilder, m: &str, x: Slice, y: Slice, z: Slice) {
    let buf = |slice, access| KernelArg::Buffer { slice, access };
    b.kernel(
        m,
        "add_f32",
        4,
        vec![
            buf(x, Access::Read),
            buf(y, Access::Read),
            buf(z, Access::Write),
            4i64.into(),
        ],
    );
}

/// The C case: `o1 = copy(a)`, `o2 = b + b`, all f32[4]; `alias` declares o1 ← b.
fn copy_and_double(alias: bool) -> Executable {
    let mut b = ExecutableBuilder::new("copy_and_double");
    let a = b.parameter("a", DType::F32, &[4]);
    let p = b.parameter("b", DType::F32, &[4]);
    let o1 = b.output("o1", DType::F32, &[4]);
    let o2 = b.output("o2", DType::F32, &[4]);
    let m = b.standard_module();
    b.copy(a.slice(), o1.slice());
    add(&mut b, &m, p.slice(), p.slice(), o2.slice());
    if alias {
        b.alias(0, 1);
    }
    b.build().unwrap()
}

#[test]
fn an_undeclared_overlap_is_refused_and_a_declared_one_computes_right() {
    let dev = device();
    let d = dev.as_ref();
    let plain = LoadedExecutable::load(dev.clone(), copy_and_double(false)).unwrap();
    let a = buffer(d, &[1.0, 1.0, 1.0, 1.0]);
    let bb = buffer(d, &[10.0, 20.0, 30.0, 40.0]);
    let o2 = buffer(d, &[0.0; 4]);
    let params: [&dyn DeviceMemory; 2] = [a.as_ref(), bb.as_ref()];
    let outs: [&dyn DeviceMemory; 2] = [bb.as_ref(), o2.as_ref()];
    let e = plain
        .execute(&params, &outs, &ExecuteOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("parameter 1 and output 0 of `copy_and_double` overlap"),
        "{e}"
    );
    assert_eq!(read(d, &bb), [10.0, 20.0, 30.0, 40.0], "nothing ran");

    // Declared: b is donated to o1. o2 reads b after o1 is written, so the executor reads a
    // copy of b: o2 = 2b, and b's buffer holds o1 = a.
    let aliased = LoadedExecutable::load(dev.clone(), copy_and_double(true)).unwrap();
    assert_eq!(aliased.aliases_in_place(), [(0, 1, false)]);
    for _ in 0..3 {
        d.copy_from_host(
            &[10.0f32, 20.0, 30.0, 40.0]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<_>>(),
            bb.ptr(),
        )
        .unwrap();
        aliased
            .execute(&params, &outs, &ExecuteOptions::default())
            .unwrap();
        assert_eq!(read(d, &o2), [20.0, 40.0, 60.0, 80.0]);
        assert_eq!(read(d, &bb), [1.0; 4]);
    }
    // Donating b but giving o2 a's buffer is still refused, naming both.
    let outs: [&dyn DeviceMemory; 2] = [bb.as_ref(), a.as_ref()];
    let e = aliased
        .execute(&params, &outs, &ExecuteOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("parameter 0 and output 1 of `copy_and_double` overlap"),
        "{e}"
    );
    // As is a buffer that only partly overlaps the donated one.
    let big = buffer(d, &[0.0; 8]);
    let inner = Part(DevicePtr(big.ptr().0 + 4), 16);
    let params: [&dyn DeviceMemory; 2] = [a.as_ref(), big.as_ref()];
    let outs: [&dyn DeviceMemory; 2] = [&inner, o2.as_ref()];
    assert!(
        aliased
            .execute(&params, &outs, &ExecuteOptions::default())
            .is_err()
    );
}

/// `y[0..2] = x[0..2]`, y aliased to x (f32[4]): the rest of `y` is the parameter's.
#[test]
fn an_alias_not_donated_starts_as_a_copy_of_the_parameter() {
    let mut b = ExecutableBuilder::new("half");
    let _x = b.parameter("x", DType::F32, &[4]);
    let c = b.parameter("c", DType::F32, &[2]);
    let y = b.output("y", DType::F32, &[4]);
    b.copy(c.slice(), Slice::new(y.slice().allocation, 0, 8));
    b.alias(0, 0);
    let exe = b.build().unwrap();
    let dev = device();
    let d = dev.as_ref();
    let loaded = LoadedExecutable::load(dev.clone(), exe).unwrap();
    let x = buffer(d, &[1.0, 2.0, 3.0, 4.0]);
    let c = buffer(d, &[7.0, 8.0]);
    let y = buffer(d, &[0.0; 4]);
    loaded
        .execute(
            &[x.as_ref(), c.as_ref()],
            &[y.as_ref()],
            &ExecuteOptions::default(),
        )
        .unwrap();
    assert_eq!(read(d, &y), [7.0, 8.0, 3.0, 4.0]);
    assert_eq!(
        read(d, &x),
        [1.0, 2.0, 3.0, 4.0],
        "the parameter is untouched"
    );
    // Donated: the same result in x's buffer.
    loaded
        .execute(
            &[x.as_ref(), c.as_ref()],
            &[x.as_ref()],
            &ExecuteOptions::default(),
        )
        .unwrap();
    assert_eq!(read(d, &x), [7.0, 8.0, 3.0, 4.0]);
}

/// `t = w + w; w_new = t + g`: every use of `w` comes before `w_new` is written, so a
/// donated `w` is updated in place; several streams keep that order.
#[test]
fn a_donated_weight_is_updated_in_place_on_any_schedule() {
    let mut b = ExecutableBuilder::new("step");
    let w = b.parameter("w", DType::F32, &[4]);
    let g = b.parameter("g", DType::F32, &[4]);
    let w_new = b.output("w_new", DType::F32, &[4]);
    let other = b.output("other", DType::F32, &[4]);
    let t = b.temp(DType::F32, &[4]);
    let m = b.standard_module();
    add(&mut b, &m, w.slice(), w.slice(), t.slice());
    add(&mut b, &m, g.slice(), g.slice(), other.slice());
    add(&mut b, &m, t.slice(), g.slice(), w_new.slice());
    b.alias(0, 0);
    let exe = b.build().unwrap();
    for streams in [1, 4] {
        let config = xthunk_core::executor::ExecutorConfig {
            streams,
            sequential_below: 0,
            ..Default::default()
        };
        let dev = device();
        let d = dev.as_ref();
        let loaded = LoadedExecutable::load_with(dev.clone(), exe.clone(), &config).unwrap();
        assert_eq!(loaded.aliases_in_place(), [(0, 0, true)]);
        assert_eq!(loaded.schedule_info().sequential, streams == 1);
        let w = buffer(d, &[1.0, 2.0, 3.0, 4.0]);
        let g = buffer(d, &[0.5; 4]);
        let other = buffer(d, &[0.0; 4]);
        for step in 0..3 {
            loaded
                .execute(
                    &[w.as_ref(), g.as_ref()],
                    &[w.as_ref(), other.as_ref()],
                    &ExecuteOptions::default(),
                )
                .unwrap();
            let k = 2f32.powi(step + 1);
            let want: Vec<f32> = [1.0f32, 2.0, 3.0, 4.0]
                .iter()
                .map(|v| v * k + 0.5 * (k - 1.0))
                .collect();
            assert_eq!(read(d, &w), want, "{streams} streams, step {step}");
            assert_eq!(read(d, &other), [1.0; 4]);
        }
    }
}
