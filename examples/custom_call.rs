//! A custom-call handler written in Rust, registered for every backend, and a program that
//! calls it inside a command buffer:
//!
//! ```text
//! cargo run --example custom_call -- host
//! ci/with-emulator.sh target/debug/examples/custom_call cuda      # EMULATED devices
//! ```
//!
//! `example.scaled_add` computes `out = scale * x + y` (f32) by issuing xthunk's own work on the
//! call's stream: a copy of `y` into `out`, then the standard library's `axpy_f32` kernel. It is
//! therefore portable (host, CUDA, ROCm) and command-buffer compatible: inside a command
//! buffer it is issued once, while the buffer records, and its work is replayed after. The
//! program runs three times with fresh random inputs; each result is checked against an f64
//! reference, and the exit status says whether all matched.

use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use xthunk::builder::ExecutableBuilder;
use xthunk::core::backend::{KernelHandle, LaunchArg, LaunchDims};
use xthunk::core::custom_call::{
    AttrType, Call, Handler, HandlerError, HandlerSignature, Traits, registry,
};
use xthunk::ir::{
    CommandBufferThunk, CopyThunk, CustomCallThunk, DType, Dim3, Module, ModuleImage, Scalar,
    Thunk, ThunkPath,
};
use xthunk::{BackendChoice, Device, DeviceMemory, ExecuteOptions, LoadedExecutable, Runtime};

/// A device: its backend's name and its ordinal.
type DeviceKey = (&'static str, usize);

/// `out = scale * x + y` through a copy and the standard `axpy_f32` kernel.
#[derive(Default)]
struct ScaledAdd {
    /// The kernel, loaded per device (backend name, ordinal) when a program is loaded.
    kernels: Mutex<Vec<(DeviceKey, Arc<dyn KernelHandle>)>>,
    issued: AtomicU64,
}

impl ScaledAdd {
    fn kernel(&self, device: &dyn Device) -> Option<Arc<dyn KernelHandle>> {
        let key = (device.backend_name(), device.info().ordinal);
        let k = self.kernels.lock().unwrap_or_else(|e| e.into_inner());
        k.iter().find(|(d, _)| *d == key).map(|(_, h)| h.clone())
    }
}

impl Handler for ScaledAdd {
    fn prepare(
        &self,
        device: &dyn Device,
        _call: &CustomCallThunk,
        _path: &ThunkPath,
    ) -> Result<(), HandlerError> {
        if self.kernel(device).is_some() {
            return Ok(());
        }
        let std = Module {
            name: "example_std".into(),
            images: vec![ModuleImage::Standard],
            options: Default::default(),
        };
        let handle = device.load_module(&std)?.kernel("axpy_f32")?;
        let key = (device.backend_name(), device.info().ordinal);
        let mut k = self.kernels.lock().unwrap_or_else(|e| e.into_inner());
        k.push((key, handle));
        Ok(())
    }

    fn call(&self, call: &Call<'_>) -> Result<(), HandlerError> {
        self.issued.fetch_add(1, Ordering::SeqCst);
        let scale: f32 = call.attr("scale")?;
        let x = call.operand(0, DType::F32)?;
        let y = call.operand(1, DType::F32)?;
        let out = call.result(0, DType::F32)?;
        if x.size != y.size || x.size != out.size {
            return Err(HandlerError::failed("x, y and out must have one size"));
        }
        let kernel = self
            .kernel(call.device())
            .ok_or_else(|| HandlerError::failed("not prepared for this device"))?;
        let n = x.element_count();
        let stream = call.stream();
        stream.copy(y.ptr, out.ptr, y.size)?;
        let blocks = n.div_ceil(256).clamp(1, 65535) as u32;
        stream.launch(
            &kernel,
            LaunchDims {
                grid: Dim3::x(blocks),
                block: Dim3::x(256),
                shared_mem: 0,
            },
            &[
                LaunchArg::Buffer {
                    ptr: x.ptr,
                    len: x.size,
                },
                LaunchArg::Buffer {
                    ptr: out.ptr,
                    len: out.size,
                },
                LaunchArg::Scalar(Scalar::F32(scale)),
                LaunchArg::Scalar(Scalar::I64(n as i64)),
            ],
        )?;
        Ok(())
    }

    fn traits(&self) -> Traits {
        Traits {
            command_buffer_compatible: true,
        }
    }

    fn signature(&self) -> HandlerSignature {
        HandlerSignature {
            operands: Some(2),
            results: Some(1),
            attributes: Some(vec![("scale".into(), AttrType::F32)]),
        }
    }
}

const N: u64 = 4099;
const SCALE: f32 = -1.75;

fn main() {
    let backend = std::env::args().nth(1).unwrap_or_else(|| "host".into());
    match run(&backend) {
        Ok(()) => {}
        Err(e) => {
            eprintln!("custom_call example: {e}");
            std::process::exit(1);
        }
    }
}

fn run(backend: &str) -> Result<(), Box<dyn std::error::Error>> {
    let handler = Arc::new(ScaledAdd::default());
    for b in ["host", "cuda", "rocm"] {
        registry().register(
            b,
            "example.scaled_add",
            handler.clone(),
            "examples/custom_call.rs",
        )?;
    }
    let mut b = ExecutableBuilder::new("custom_call_example");
    let x = b.parameter("x", DType::F32, &[N]);
    let y = b.parameter("y", DType::F32, &[N]);
    let out = b.output("out", DType::F32, &[N]);
    let t = b.temp(DType::F32, &[N]);
    b.push(
        CommandBufferThunk {
            body: vec![
                Thunk::from(
                    CustomCallThunk::new("example.scaled_add")
                        .operand(x.buffer())
                        .operand(y.buffer())
                        .result(t.buffer())
                        .attr("scale", SCALE),
                ),
                CopyThunk {
                    src: t.slice(),
                    dst: out.slice(),
                }
                .into(),
            ],
        }
        .into(),
    );
    let program = b.build()?;

    let rt = Runtime::new();
    let (be, _) = rt.select(&BackendChoice::Named(backend.into()))?;
    let device = be.device(0)?;
    let info = device.info().clone();
    let exe = LoadedExecutable::load(device.clone(), program)?;
    let params = exe.allocate_parameters()?;
    let outputs = exe.allocate_outputs()?;
    let p: Vec<&dyn DeviceMemory> = params.iter().map(|b| b.as_ref() as _).collect();
    let o: Vec<&dyn DeviceMemory> = outputs.iter().map(|b| b.as_ref() as _).collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(15);
    let mut worst = 0.0f64;
    let bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    for _ in 0..3 {
        let xs: Vec<f32> = (0..N).map(|_| rng.random_range(-4.0..4.0)).collect();
        let ys: Vec<f32> = (0..N).map(|_| rng.random_range(-4.0..4.0)).collect();
        device.copy_from_host(&bytes(&xs), params[0].ptr())?;
        device.copy_from_host(&bytes(&ys), params[1].ptr())?;
        device.copy_from_host(&bytes(&vec![f32::NAN; N as usize]), outputs[0].ptr())?;
        exe.execute(&p, &o, &ExecuteOptions::default())?;
        let mut got = vec![0u8; (N * 4) as usize];
        device.copy_to_host(outputs[0].ptr(), &mut got)?;
        for (i, c) in got.chunks_exact(4).enumerate() {
            let g = f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
            let want = f64::from(SCALE) * f64::from(xs[i]) + f64::from(ys[i]);
            let err = (g - want).abs() / (1.0 + want.abs());
            if err.is_nan() || err > 1e-6 {
                return Err(format!("out[{i}] = {g}, want {want}").into());
            }
            worst = worst.max(err);
        }
    }
    println!(
        "example.scaled_add on {} `{}`{}: 3 executions match the f64 reference (max relative \
         error {worst:.2e}); the handler was issued {} time(s)",
        be.name(),
        info.name,
        if info.emulated { " [EMULATED]" } else { "" },
        handler.issued.load(Ordering::SeqCst)
    );
    Ok(())
}
