//! `custom_call/`: custom calls through the one registry, with Rust handlers that issue
//! xthunk's own stream work (copies, memsets), so they run on any backend:
//! - `attributes`: attributes of every type, with random values, decoded by type and echoed
//!   into the result word by word; a wrong-type decode is an error naming the attribute;
//! - `capture`: a command-buffer compatible handler inside a command buffer is issued once
//!   while the buffer records and replayed after (on a device whose command buffers record);
//! - `split`: a handler that is not compatible splits its command buffer and is issued on
//!   every execution;
//! - `dtypes`: a buffer of every element type reaches a handler with its type (a lookup as
//!   another type is refused) and is copied through it;
//! - `errors`: a missing handler fails the load listing the registered targets, a call its
//!   handler does not take fails the load (nothing issued), a failing handler fails the
//!   execution naming the thunk and the target.

use super::seed::seeded;
use crate::check::Check;
use crate::util::{CheckResult, CheckRng, compare_bytes, ensure, fail, random_bytes, upload};
use rand::Rng;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use xthunk_core::backend::{Device, DeviceMemory};
use xthunk_core::builder::ExecutableBuilder;
use xthunk_core::custom_call::{
    AttrType, Call, Handler, HandlerError, HandlerSignature, Traits, registry,
};
use xthunk_core::executor::{ExecuteOptions, LoadedExecutable};
use xthunk_core::ir::{
    Attributes, CommandBufferThunk, CopyThunk, CustomCallThunk, DType, MemorySpace, MemsetPattern,
    MemsetThunk, Thunk,
};

pub fn checks() -> Vec<Check> {
    vec![
        seeded("custom_call/attributes", attributes),
        seeded("custom_call/capture", |d, r| command_buffer(d, r, true)),
        seeded("custom_call/split", |d, r| command_buffer(d, r, false)),
        seeded("custom_call/dtypes", dtypes),
        seeded("custom_call/errors", errors),
    ]
}

const COPY_TYPED: &str = "xthunk.conformance.copy_typed";

/// Copies operand 0 into result 0, both looked up as the type its `dtype` attribute names
/// (and refused as any other type).
struct TypedCopy;

impl Handler for TypedCopy {
    fn call(&self, call: &Call<'_>) -> Result<(), HandlerError> {
        let name = call.attr::<String>("dtype")?;
        let d = DType::from_name(&name)
            .ok_or_else(|| HandlerError::failed(format!("unknown dtype `{name}`")))?;
        let other = DType::ALL
            .into_iter()
            .find(|o| *o != d)
            .unwrap_or(DType::F32);
        if call.operand(0, other).is_ok() {
            return Err(HandlerError::failed(format!(
                "a {d} operand was taken as {other}"
            )));
        }
        let src = call.operand(0, d)?;
        let dst = call.result(0, d)?;
        call.stream().copy(src.ptr, dst.ptr, src.size)?;
        Ok(())
    }
    fn signature(&self) -> HandlerSignature {
        HandlerSignature {
            operands: Some(1),
            results: Some(1),
            attributes: Some(vec![("dtype".into(), AttrType::Str)]),
        }
    }
}

/// For every element type: `x → out` through [`TypedCopy`].
fn dtypes(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
    registry().register_once(
        device.backend_name(),
        COPY_TYPED,
        Arc::new(TypedCopy),
        "conformance",
    );
    for d in DType::ALL {
        let n = 1 + rng.random_range(0..300u64);
        let mut b = ExecutableBuilder::new("conformance_custom_call_dtypes");
        let x = b.parameter("x", d, &[n]);
        let out = b.output("out", d, &[n]);
        b.push(Thunk::from(
            CustomCallThunk::new(COPY_TYPED)
                .operand(x.buffer())
                .result(out.buffer())
                .attr("dtype", d.name().to_string()),
        ));
        let exe =
            LoadedExecutable::load(device.clone(), b.build().map_err(xthunk_core::Error::from)?)?;
        let bytes = n as usize * d.size();
        let data = random_bytes(rng, bytes);
        let xb = upload(device, &data, MemorySpace::Device)?;
        let ob = upload(device, &vec![0xA5; bytes], MemorySpace::Device)?;
        let p: [&dyn DeviceMemory; 1] = [xb.as_ref()];
        let o: [&dyn DeviceMemory; 1] = [ob.as_ref()];
        exe.execute(&p, &o, &ExecuteOptions::default())
            .map_err(|e| fail(format!("{d}: {e}")))?;
        let got = crate::util::download_all(device, ob.as_ref())?;
        compare_bytes(&format!("{d} out"), &got, &data)?;
    }
    Ok(())
}

const COPY_CAPTURED: &str = "xthunk.conformance.copy_captured";
const COPY_SPLIT: &str = "xthunk.conformance.copy_split";
const ECHO: &str = "xthunk.conformance.echo";
const FAILS: &str = "xthunk.conformance.fails";

/// Copies operand 0 into result 0 on the call's stream; counts its issues.
struct Copy {
    compatible: bool,
    issued: AtomicU64,
}

impl Handler for Copy {
    fn call(&self, call: &Call<'_>) -> Result<(), HandlerError> {
        self.issued.fetch_add(1, Ordering::SeqCst);
        let src = call.operand(0, DType::I32)?;
        let dst = call.result(0, DType::I32)?;
        call.stream().copy(src.ptr, dst.ptr, src.size)?;
        Ok(())
    }
    fn traits(&self) -> Traits {
        Traits {
            command_buffer_compatible: self.compatible,
        }
    }
    fn signature(&self) -> HandlerSignature {
        HandlerSignature {
            operands: Some(1),
            results: Some(1),
            attributes: Some(vec![]),
        }
    }
}

/// The copy handler registered under `target` for `device`'s backend.
fn copy_handler(device: &dyn Device, target: &'static str) -> Arc<Copy> {
    static CAPTURED: OnceLock<Arc<Copy>> = OnceLock::new();
    static SPLIT: OnceLock<Arc<Copy>> = OnceLock::new();
    let (cell, compatible) = if target == COPY_CAPTURED {
        (&CAPTURED, true)
    } else {
        (&SPLIT, false)
    };
    let h = cell
        .get_or_init(|| {
            Arc::new(Copy {
                compatible,
                issued: AtomicU64::new(0),
            })
        })
        .clone();
    registry().register_once(device.backend_name(), target, h.clone(), "conformance");
    h
}

/// Writes every attribute it decodes into result 0, one 32-bit word at a time (memsets).
struct Echo;

/// The words `attrs` echo to: what [`Echo`] writes and the check expects.
fn words(attrs: &Attributes) -> Vec<u32> {
    use xthunk_core::ir::{AttrArray, AttrValue};
    let mut w = vec![];
    let mut push64 = |w: &mut Vec<u32>, v: u64| {
        w.push(v as u32);
        w.push((v >> 32) as u32);
    };
    fn walk(a: &Attributes, w: &mut Vec<u32>, push64: &mut dyn FnMut(&mut Vec<u32>, u64)) {
        for (_, v) in &a.0 {
            match v {
                AttrValue::Bool(b) => w.push(u32::from(*b)),
                AttrValue::I32(x) => w.push(*x as u32),
                AttrValue::I64(x) => push64(w, *x as u64),
                AttrValue::F32(x) => w.push(x.to_bits()),
                AttrValue::F64(x) => push64(w, x.to_bits()),
                AttrValue::Str(s) => w.extend(s.bytes().map(u32::from)),
                AttrValue::Array(AttrArray::Bool(v)) => w.extend(v.iter().map(|b| u32::from(*b))),
                AttrValue::Array(AttrArray::I32(v)) => w.extend(v.iter().map(|x| *x as u32)),
                AttrValue::Array(AttrArray::I64(v)) => v.iter().for_each(|x| push64(w, *x as u64)),
                AttrValue::Array(AttrArray::F32(v)) => w.extend(v.iter().map(|x| x.to_bits())),
                AttrValue::Array(AttrArray::F64(v)) => {
                    v.iter().for_each(|x| push64(w, x.to_bits()))
                }
                AttrValue::Array(AttrArray::Str(v)) => w.extend(v.iter().map(|s| s.len() as u32)),
                AttrValue::Dict(d) => walk(d, w, push64),
            }
        }
    }
    walk(attrs, &mut w, &mut push64);
    w
}

impl Handler for Echo {
    fn call(&self, call: &Call<'_>) -> Result<(), HandlerError> {
        // Decoded by type, one by one (what a handler does), then echoed.
        let mut a = Attributes::default();
        let mut put = |n: &str, v: xthunk_core::ir::AttrValue| a.0.push((n.into(), v));
        put("flag", call.attr::<bool>("flag")?.into());
        put("small", call.attr::<i32>("small")?.into());
        put("big", call.attr::<i64>("big")?.into());
        put("ratio", call.attr::<f32>("ratio")?.into());
        put("precise", call.attr::<f64>("precise")?.into());
        put("label", call.attr::<String>("label")?.into());
        put("mask", call.attr::<Vec<bool>>("mask")?.into());
        put("sizes", call.attr::<Vec<i32>>("sizes")?.into());
        put("offsets", call.attr::<Vec<i64>>("offsets")?.into());
        put("weights", call.attr::<Vec<f32>>("weights")?.into());
        put("coeffs", call.attr::<Vec<f64>>("coeffs")?.into());
        put("names", call.attr::<Vec<String>>("names")?.into());
        put("inner", call.attr::<Attributes>("inner")?.into());
        // A wrong type is an error naming the attribute; an absent optional one is None.
        let wrong = matches!(call.attr::<i64>("small"), Err(HandlerError::Attribute { name, .. }) if name == "small");
        let absent = matches!(call.attr_opt::<f32>("nothing"), Ok(None));
        let mut w = words(&a);
        w.push(u32::from(wrong));
        w.push(u32::from(absent));
        let out = call.result(0, DType::I32)?;
        if out.size != 4 * w.len() as u64 {
            return Err(HandlerError::failed(format!(
                "the result holds {} bytes, the echo {} words",
                out.size,
                w.len()
            )));
        }
        for (i, v) in w.iter().enumerate() {
            let ptr = out.ptr.offset(4 * i as u64);
            call.stream().memset(ptr, 4, MemsetPattern::U32(*v))?;
        }
        Ok(())
    }
    fn signature(&self) -> HandlerSignature {
        let t = [
            ("flag", AttrType::Bool),
            ("small", AttrType::I32),
            ("big", AttrType::I64),
            ("ratio", AttrType::F32),
            ("precise", AttrType::F64),
            ("label", AttrType::Str),
            ("mask", AttrType::BoolArray),
            ("sizes", AttrType::I32Array),
            ("offsets", AttrType::I64Array),
            ("weights", AttrType::F32Array),
            ("coeffs", AttrType::F64Array),
            ("names", AttrType::StrArray),
            ("inner", AttrType::Dict),
        ];
        HandlerSignature {
            operands: Some(0),
            results: Some(1),
            attributes: Some(t.iter().map(|(n, t)| (n.to_string(), *t)).collect()),
        }
    }
}

/// Fails at issue.
struct Fails;

impl Handler for Fails {
    fn call(&self, _: &Call<'_>) -> Result<(), HandlerError> {
        Err(HandlerError::failed("refused by the conformance handler"))
    }
}

fn attributes(device: &Arc<dyn Device>, rng: &mut CheckRng) -> CheckResult {
    registry().register_once(device.backend_name(), ECHO, Arc::new(Echo), "conformance");
    let label: String = (0..rng.random_range(1..12))
        .map(|_| rng.random_range(b'a'..=b'z') as char)
        .collect();
    let inner = Attributes(vec![
        ("id".into(), rng.random::<i64>().into()),
        (
            "deeper".into(),
            Attributes(vec![("z".into(), rng.random::<f32>().into())]).into(),
        ),
    ]);
    let call = CustomCallThunk::new(ECHO)
        .attr("flag", rng.random::<bool>())
        .attr("small", rng.random::<i32>())
        .attr("big", rng.random::<i64>())
        .attr("ratio", f32::from_bits(rng.random::<u32>() & 0x7f7f_ffff))
        .attr("precise", rng.random::<f64>() * 1e300)
        .attr("label", label)
        .attr(
            "mask",
            (0..5).map(|_| rng.random::<bool>()).collect::<Vec<_>>(),
        )
        .attr(
            "sizes",
            (0..4).map(|_| rng.random::<i32>()).collect::<Vec<_>>(),
        )
        .attr(
            "offsets",
            (0..3).map(|_| rng.random::<i64>()).collect::<Vec<_>>(),
        )
        .attr(
            "weights",
            (0..3).map(|_| rng.random::<f32>()).collect::<Vec<_>>(),
        )
        .attr(
            "coeffs",
            (0..2).map(|_| -rng.random::<f64>()).collect::<Vec<_>>(),
        )
        .attr("names", vec!["", "xthunk", "ab"])
        .attr("inner", inner);
    let mut expected = words(&call.attributes);
    expected.extend([1, 1]);
    let mut b = ExecutableBuilder::new("conformance_echo");
    let out = b.output("out", DType::I32, &[expected.len() as u64]);
    b.push(Thunk::from(call.result(out.buffer())));
    let exe = LoadedExecutable::load(device.clone(), b.build().map_err(xthunk_core::Error::from)?)?;
    let poison = vec![0xA5u8; expected.len() * 4];
    let got =
        crate::util::execute_loaded(device, &exe, &[], &[poison], &ExecuteOptions::default())?;
    let want: Vec<u8> = expected.iter().flat_map(|w| w.to_le_bytes()).collect();
    compare_bytes("echoed attributes", &got[0], &want)
}

/// `x → t` by the copy handler `target` inside a command buffer (after a memset of `t`),
/// then `t → out`; three executions with the same buffers and fresh inputs.
fn command_buffer(device: &Arc<dyn Device>, rng: &mut CheckRng, captured: bool) -> CheckResult {
    let target = if captured { COPY_CAPTURED } else { COPY_SPLIT };
    let h = copy_handler(device.as_ref(), target);
    let n = 1 + rng.random_range(0..2000u64);
    let mut b = ExecutableBuilder::new("conformance_custom_call_cb");
    let x = b.parameter("x", DType::I32, &[n]);
    let out = b.output("out", DType::I32, &[n]);
    let t = b.temp(DType::I32, &[n]);
    b.push(
        CommandBufferThunk {
            body: vec![
                MemsetThunk {
                    dst: t.slice(),
                    pattern: MemsetPattern::U32(0xDEAD_BEEF),
                }
                .into(),
                Thunk::from(
                    CustomCallThunk::new(target)
                        .operand(x.buffer())
                        .result(t.buffer()),
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
    let exe = LoadedExecutable::load(device.clone(), b.build().map_err(xthunk_core::Error::from)?)?;
    // Split: [command buffer(memset), the call, command buffer(copy)].
    let nodes = exe.schedule_info().nodes;
    let want_nodes = if captured { 1 } else { 3 };
    ensure(nodes == want_nodes, || {
        format!("the program has {nodes} steps, expected {want_nodes}")
    })?;
    let bytes = (n * 4) as usize;
    let xb = upload(device, &random_bytes(rng, bytes), MemorySpace::Device)?;
    let ob = upload(device, &vec![0xA5; bytes], MemorySpace::Device)?;
    let before = h.issued.load(Ordering::SeqCst);
    for _ in 0..3 {
        let data = random_bytes(rng, bytes);
        device.copy_from_host(&data, xb.ptr())?;
        device.copy_from_host(&vec![0xA5; bytes], ob.ptr())?;
        let p: [&dyn DeviceMemory; 1] = [xb.as_ref()];
        let o: [&dyn DeviceMemory; 1] = [ob.as_ref()];
        exe.execute(&p, &o, &ExecuteOptions::default())?;
        let got = crate::util::download_all(device, ob.as_ref())?;
        compare_bytes("out", &got, &data)?;
    }
    let issued = h.issued.load(Ordering::SeqCst) - before;
    // Replays do not issue the handler again where command buffers record.
    let want = if captured && device.capabilities().supports_graphs {
        1
    } else {
        3
    };
    ensure(issued == want, || {
        format!("the handler was issued {issued} times in 3 executions, expected {want}")
    })
}

fn errors(device: &Arc<dyn Device>, _rng: &mut CheckRng) -> CheckResult {
    let backend = device.backend_name();
    let h = copy_handler(device.as_ref(), COPY_CAPTURED);
    registry().register_once(backend, FAILS, Arc::new(Fails), "conformance");
    let build = |call: CustomCallThunk| {
        let mut b = ExecutableBuilder::new("conformance_custom_call_errors");
        let x = b.parameter("x", DType::I32, &[4]);
        let out = b.output("out", DType::I32, &[4]);
        b.memset(out.slice(), MemsetPattern::U32(0));
        b.push(Thunk::from(call.operand(x.buffer()).result(out.buffer())));
        b.build().map_err(xthunk_core::Error::from)
    };
    let before = h.issued.load(Ordering::SeqCst);
    let missing = LoadedExecutable::load(
        device.clone(),
        build(CustomCallThunk::new("xthunk.conformance.nobody"))?,
    );
    let e = match missing {
        Ok(_) => return Err(fail("a call without a handler loaded")),
        Err(e) => e.to_string(),
    };
    let want = format!(
        "thunk entry[1]: custom call `xthunk.conformance.nobody` has no handler on backend `{backend}`"
    );
    ensure(e.contains(&want) && e.contains(COPY_CAPTURED), || {
        format!("missing handler: `{e}` does not say `{want}` and list `{COPY_CAPTURED}`")
    })?;
    let extra = LoadedExecutable::load(
        device.clone(),
        build(CustomCallThunk::new(COPY_CAPTURED).attr("scale", 2.0f32))?,
    );
    let e = match extra {
        Ok(_) => {
            return Err(fail(
                "a call with an attribute its handler does not read loaded",
            ));
        }
        Err(e) => e.to_string(),
    };
    ensure(
        e.contains("attribute `scale` is not one the handler reads"),
        || format!("signature mismatch: `{e}`"),
    )?;
    ensure(h.issued.load(Ordering::SeqCst) == before, || {
        "a handler was issued for a program that failed to load".into()
    })?;
    let exe = LoadedExecutable::load(device.clone(), build(CustomCallThunk::new(FAILS))?)?;
    let x = upload(device, &[0; 16], MemorySpace::Device)?;
    let o = upload(device, &[0; 16], MemorySpace::Device)?;
    let r = exe.execute(&[x.as_ref()], &[o.as_ref()], &ExecuteOptions::default());
    let e = match r {
        Ok(()) => return Err(fail("a failing handler's execution succeeded")),
        Err(e) => e,
    };
    let text = e.to_string();
    ensure(
        matches!(&e, xthunk_core::Error::Thunk { path, .. } if path.to_string() == "entry[1]")
            && text.contains(&format!(
                "custom call `{FAILS}` failed: refused by the conformance handler"
            )),
        || format!("handler failure: `{text}`"),
    )
}
