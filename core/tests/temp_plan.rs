//! Temp memory planning: random programs with many temps on several streams (async scopes,
//! loops, command buffers with loops inside) give byte-identical results with planning on and
//! off, and planned programs take less memory.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use proptest::prelude::*;
use std::sync::Arc;
use xthunk_core::Result;
use xthunk_core::backend::{Backend, Buffer, Device, DeviceMemory};
use xthunk_core::builder::*;
use xthunk_core::executor::{ExecuteOptions, ExecutorConfig, LoadedExecutable, plan_temps};
use xthunk_core::host::HostBackend;
use xthunk_core::ir::*;

const OUTPUTS: u32 = 3;
const TEMPS: u32 = 16;
const ALLOCS: u32 = OUTPUTS + TEMPS;

fn device() -> Arc<dyn Device> {
    HostBackend::new().device(0).unwrap()
}

/// Bytes of allocation `a`: outputs 256, temps 64 to 512.
fn size_of(a: u32) -> u64 {
    if a < OUTPUTS {
        256
    } else {
        [64, 128, 256, 512][(a % 4) as usize]
    }
}

/// Alignment of allocation `a`.
fn align_of(a: u32) -> u64 {
    [4, 16, 64, 256][(a as usize / 4) % 4]
}

#[derive(Clone, Debug)]
enum Gen {
    Copy(u32, u64, u32, u64, u64),
    Memset(u32, u64, u64, u8),
    Add(u32, u64, u32, u64, u32, u64, u64),
    Scale(u32, u64, u64),
    Seq(Vec<Gen>),
    Async(bool, Vec<Gen>),
    /// A `While` with a trip count (1 to 3: a temp first written inside runs its memset).
    Loop(u64, Vec<Gen>),
    /// A `CommandBuffer` (async scopes inside it become sequences).
    Cmd(Vec<Gen>),
}

fn arb_gen() -> impl Strategy<Value = Gen> {
    let a = 0u32..ALLOCS;
    let elem = 0u64..128;
    let leaf = prop_oneof![
        (a.clone(), elem.clone(), a.clone(), elem.clone(), 1u64..32)
            .prop_map(|(x, o, y, p, n)| Gen::Copy(x, o, y, p, n)),
        (a.clone(), elem.clone(), 1u64..32, 0u8..3)
            .prop_map(|(x, o, n, w)| Gen::Memset(x, o, n, w)),
        (
            a.clone(),
            elem.clone(),
            a.clone(),
            elem.clone(),
            a.clone(),
            elem.clone(),
            1u64..32
        )
            .prop_map(|(x, o, y, p, z, q, n)| Gen::Add(x, o, y, p, z, q, n)),
        (a.clone(), elem.clone(), 1u64..32).prop_map(|(x, o, n)| Gen::Scale(x, o, n)),
    ];
    leaf.prop_recursive(3, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Gen::Seq),
            (
                any::<bool>(),
                proptest::collection::vec(inner.clone(), 0..6)
            )
                .prop_map(|(c, b)| Gen::Async(c, b)),
            (1u64..4, proptest::collection::vec(inner.clone(), 0..4))
                .prop_map(|(n, b)| Gen::Loop(n, b)),
            proptest::collection::vec(inner, 0..6).prop_map(Gen::Cmd),
        ]
    })
}

/// A slice of at most `n` f32 elements at element `o`, clamped into allocation `a`.
fn sl(a: u32, o: u64, n: u64) -> (Slice, u64) {
    let max = size_of(a) / 4;
    let n = n.min(max);
    let o = o.min(max - n);
    (Slice::new(a, o * 4, n * 4), n)
}

/// Lowers generated thunks. Before the first thunk (in program order) that touches a temp,
/// a memset writes all of it: results never depend on a temp's contents at the start.
struct Lower {
    next_id: u32,
    /// Inside a command buffer (no async scopes, no nested command buffers).
    in_cmd: bool,
    written: [bool; ALLOCS as usize],
}

impl Lower {
    fn touch(&mut self, allocs: &[u32], out: &mut Vec<Thunk>) {
        for &a in allocs {
            if a >= OUTPUTS && !self.written[a as usize] {
                self.written[a as usize] = true;
                out.push(Thunk::Memset(MemsetThunk {
                    dst: Slice::new(a, 0, size_of(a)),
                    pattern: MemsetPattern::U32(0x3f00_0000 + a),
                }));
            }
        }
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

    fn lower(&mut self, g: &Gen, out: &mut Vec<Thunk>) {
        let buf = |s: Slice, access| KernelArg::Buffer { slice: s, access };
        match g {
            Gen::Copy(x, o, y, p, n) => {
                let (_, n) = sl(*x, *o, *n);
                let (dst, m) = sl(*y, *p, n);
                let (src, _) = sl(*x, *o, m);
                if !src.overlaps(&dst) {
                    self.touch(&[*x, *y], out);
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
                self.touch(&[*x], out);
                out.push(Thunk::Memset(MemsetThunk { dst, pattern }));
            }
            Gen::Add(x, o, y, p, z, q, n) => {
                let n = [*x, *y, *z].iter().fold(*n, |n, &a| n.min(size_of(a) / 4));
                let (a, _) = sl(*x, *o, n);
                let (b, _) = sl(*y, *p, n);
                let (c, _) = sl(*z, *q, n);
                self.touch(&[*x, *y, *z], out);
                out.push(Self::kernel(
                    "add_f32",
                    vec![
                        buf(a, Access::Read),
                        buf(b, Access::Read),
                        buf(c, Access::Write),
                        KernelArg::Scalar(Scalar::I64(n as i64)),
                    ],
                ));
            }
            Gen::Scale(x, o, n) => {
                let (s, n) = sl(*x, *o, *n);
                self.touch(&[*x], out);
                out.push(Self::kernel(
                    "scale_f32",
                    vec![
                        buf(s, Access::ReadWrite),
                        KernelArg::Scalar(Scalar::F32(1.5)),
                        KernelArg::Scalar(Scalar::I64(n as i64)),
                    ],
                ));
            }
            Gen::Seq(body) => {
                let mut v = vec![];
                for c in body {
                    self.lower(c, &mut v);
                }
                out.push(Thunk::Sequence(v));
            }
            Gen::Async(_, body) | Gen::Cmd(body) if self.in_cmd => {
                self.lower(&Gen::Seq(body.clone()), out);
            }
            Gen::Loop(n, body) => {
                let mut v = vec![];
                for c in body {
                    self.lower(c, &mut v);
                }
                out.push(Thunk::While(WhileThunk {
                    cond: vec![],
                    pred: Slice::new(0, 0, 1),
                    body: v,
                    trip_count: Some(*n),
                }));
            }
            Gen::Cmd(body) => {
                let mut v = vec![];
                self.in_cmd = true;
                for c in body {
                    self.lower(c, &mut v);
                }
                self.in_cmd = false;
                out.push(Thunk::CommandBuffer(CommandBufferThunk { body: v }));
            }
            Gen::Async(comm, body) => {
                let mut v = vec![];
                for c in body {
                    self.lower(c, &mut v);
                }
                let id = self.next_id;
                self.next_id += 1;
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
}

fn program(gens: &[Gen]) -> Executable {
    let mut entry = vec![];
    let mut l = Lower {
        next_id: 0,
        in_cmd: false,
        written: [false; ALLOCS as usize],
    };
    for g in gens {
        l.lower(g, &mut entry);
    }
    let mut b = ExecutableBuilder::new("random_temps");
    for i in 0..OUTPUTS {
        b.output(&format!("o{i}"), DType::F32, &[size_of(i) / 4]);
    }
    for a in OUTPUTS..ALLOCS {
        b.temp(DType::F32, &[size_of(a) / 4]);
    }
    b.standard_module();
    for t in entry {
        b.push(t);
    }
    let mut exe = b.build_unchecked();
    for a in &mut exe.allocations {
        a.alignment = align_of(a.index);
    }
    xthunk_core::verify(&exe).expect("generated programs are valid");
    exe
}

fn init_bytes(seed: u64) -> Vec<Vec<u8>> {
    (0..OUTPUTS)
        .map(|a| {
            (0..size_of(a) / 4)
                .flat_map(|i| {
                    (((i * 31 + a as u64 * 7 + seed) % 17) as f32 * 0.25 - 2.0).to_le_bytes()
                })
                .collect()
        })
        .collect()
}

/// Runs `exe` with outputs initialized to `init` and returns their final bytes.
fn run(dev: &Arc<dyn Device>, exe: &LoadedExecutable, init: &[Vec<u8>]) -> Result<Vec<Vec<u8>>> {
    let outs = exe.allocate_outputs()?;
    for (o, bytes) in outs.iter().zip(init) {
        dev.copy_from_host(bytes, o.ptr())?;
    }
    let o: Vec<&dyn DeviceMemory> = outs.iter().map(|b| b.as_ref() as _).collect();
    exe.execute(&[], &o, &ExecuteOptions::default())?;
    outs.iter()
        .map(|b: &Buffer| {
            let mut v = vec![0u8; b.size() as usize];
            dev.copy_to_host(b.ptr(), &mut v)?;
            Ok(v)
        })
        .collect()
}

fn configs(plan: bool) -> Vec<ExecutorConfig> {
    let mut v = vec![ExecutorConfig {
        plan_temps: plan,
        ..ExecutorConfig::in_order()
    }];
    for streams in [1usize, 2, 4] {
        v.push(ExecutorConfig {
            streams,
            sequential_below: 0,
            plan_temps: plan,
            ..ExecutorConfig::default()
        });
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, .. ProptestConfig::default() })]

    /// Planned temps give byte-identical results to one buffer per temp, in program order and
    /// on 1, 2 and 4 streams (async scopes included), on a fresh and on a pooled state.
    #[test]
    fn planning_on_and_off_agree(gens in proptest::collection::vec(arb_gen(), 1..40), seed in 0u64..1000) {
        let dev = device();
        let exe = program(&gens);
        let init = init_bytes(seed);
        let reference = {
            let cfg = ExecutorConfig { plan_temps: false, ..ExecutorConfig::in_order() };
            let l = LoadedExecutable::load_with(dev.clone(), exe.clone(), &cfg).unwrap();
            prop_assert!(!l.temp_plan().shared);
            prop_assert_eq!(l.temp_plan().arenas.len(), TEMPS as usize);
            run(&dev, &l, &init).unwrap()
        };
        for cfg in configs(true).into_iter().chain(configs(false)) {
            let l = LoadedExecutable::load_with(dev.clone(), exe.clone(), &cfg).unwrap();
            let plan = l.temp_plan();
            prop_assert!(cfg.plan_temps || !plan.shared);
            prop_assert!(plan.planned_bytes <= plan.sum_bytes, "{}", plan.summary());
            prop_assert_eq!(plan_temps(&exe, &cfg).unwrap(), plan.clone());
            let got = run(&dev, &l, &init).unwrap();
            prop_assert_eq!(&got, &reference, "config {:?}, schedule {:?}, plan {}",
                cfg, l.schedule_info(), plan.summary());
            let again = run(&dev, &l, &init).unwrap();
            prop_assert_eq!(&again, &reference, "second execution (pooled state)");
        }
    }
}

/// A chain of temps, each read only by the next step, needs two temps' worth of memory.
#[test]
fn a_chain_of_temps_takes_two_buffers() {
    let mut b = ExecutableBuilder::new("chain");
    let y = b.output("y", DType::F32, &[64]);
    let std = b.standard_module();
    let temps: Vec<Tensor> = (0..10).map(|_| b.temp(DType::F32, &[64])).collect();
    b.memset(temps[0].slice(), MemsetPattern::U32(1.0f32.to_bits()));
    for w in temps.windows(2) {
        b.kernel(
            &std,
            "add_f32",
            64,
            vec![w[0].r(), w[0].r(), w[1].w(), 64i64.into()],
        );
    }
    b.copy(temps[9].slice(), y.slice());
    let exe = b.build().unwrap();
    let dev = device();
    let on = LoadedExecutable::load(dev.clone(), exe.clone()).unwrap();
    let plan = on.temp_plan();
    assert!(plan.shared);
    assert_eq!(plan.sum_bytes, 10 * 256);
    assert_eq!(plan.planned_bytes, 2 * 256, "{}", plan.summary());
    assert_eq!(plan.arenas.len(), 1);
    let off = LoadedExecutable::load_with(
        dev.clone(),
        exe,
        &ExecutorConfig {
            plan_temps: false,
            ..ExecutorConfig::default()
        },
    )
    .unwrap();
    assert_eq!(off.temp_plan().planned_bytes, 10 * 256);
    assert_eq!(off.temp_plan().arenas.len(), 10);
    let a = on
        .run_with_host_data(&[], &ExecuteOptions::default())
        .unwrap();
    let b = off
        .run_with_host_data(&[], &ExecuteOptions::default())
        .unwrap();
    assert_eq!(a, b);
    let want: Vec<u8> = (0..64).flat_map(|_| 512.0f32.to_le_bytes()).collect();
    assert_eq!(a[0], want);
}

/// Temps used by steps that may run at once on different streams never share memory.
#[test]
fn concurrent_temps_do_not_share() {
    let mut b = ExecutableBuilder::new("wide");
    let std = b.standard_module();
    let outs: Vec<Tensor> = (0..4)
        .map(|i| b.output(&format!("y{i}"), DType::F32, &[64]))
        .collect();
    let temps: Vec<Tensor> = (0..4).map(|_| b.temp(DType::F32, &[64])).collect();
    for (t, y) in temps.iter().zip(&outs) {
        b.memset(t.slice(), MemsetPattern::U32(2.0f32.to_bits()));
        b.kernel(&std, "add_f32", 64, vec![t.r(), t.r(), y.w(), 64i64.into()]);
    }
    let exe = b.build().unwrap();
    let cfg = ExecutorConfig {
        streams: 4,
        sequential_below: 0,
        ..ExecutorConfig::default()
    };
    let l = LoadedExecutable::load_with(device(), exe.clone(), &cfg).unwrap();
    assert!(!l.schedule_info().sequential);
    assert_eq!(
        l.temp_plan().planned_bytes,
        4 * 256,
        "{}",
        l.temp_plan().summary()
    );
    // In program order on one stream, the four are one after another: one buffer.
    let seq = plan_temps(&exe, &ExecutorConfig::in_order()).unwrap();
    assert_eq!(seq.planned_bytes, 256, "{}", seq.summary());
}
