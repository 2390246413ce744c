//! Structure-aware mutations of decoded programs, field by field: sizes, offsets, counts,
//! dtypes, kinds, names, launch shapes, immediates, groups. Every mutable field of the IR is a
//! [`Knob`]; a mutation picks one knob at random and changes it to a boundary value, a
//! neighbour, a value taken from elsewhere in the program, or a random one. Thunk order and
//! nesting are mutated by [`super::order`].

use super::rng::{INTERESTING_U64, Rng, mutate_u32, mutate_u64};
use std::sync::OnceLock;
use xthunk_core::ir::{
    Access, AllocationKind, AsyncDoneThunk, AsyncKind, AsyncStartThunk, CollectiveOp,
    CollectivePermuteThunk, CommandBufferThunk, ConditionalThunk, CopyThunk, DType, Dim3,
    Executable, KernelArg, MemorySpace, MemsetPattern, MemsetThunk, ModuleImage, RankIdThunk,
    RecvThunk, ReduceOp, Scalar, SendThunk, Slice, Thunk, WhileThunk,
};

/// One mutable field of a program.
pub enum Knob<'a> {
    Size(&'a mut u64),
    Index(&'a mut u32),
    TripCount(&'a mut Option<u64>),
    DType(&'a mut DType),
    Flag(&'a mut bool),
    Real(&'a mut f64),
    Scalar(&'a mut Scalar),
    Pattern(&'a mut MemsetPattern),
    Access(&'a mut Access),
    Name(&'a mut String),
    KernelName(&'a mut String),
    Dims(&'a mut Vec<u64>),
    Groups(&'a mut Vec<Vec<u32>>),
    Pairs(&'a mut Vec<(u32, u32)>),
    AllocKind(&'a mut AllocationKind),
    Space(&'a mut MemorySpace),
    AsyncKind(&'a mut AsyncKind),
    ReduceOp(&'a mut ReduceOp),
    Images(&'a mut Vec<ModuleImage>),
    Args(&'a mut Vec<KernelArg>),
    Dim3(&'a mut Dim3),
    Slice(&'a mut Slice),
}

/// Calls `f` with every knob of `exe`, in a fixed order.
pub fn visit(exe: &mut Executable, f: &mut dyn FnMut(Knob<'_>)) {
    f(Knob::Index(&mut exe.abi_version));
    f(Knob::Name(&mut exe.name));
    for a in &mut exe.allocations {
        f(Knob::Index(&mut a.index));
        f(Knob::Size(&mut a.size));
        f(Knob::Size(&mut a.alignment));
        f(Knob::AllocKind(&mut a.kind));
        f(Knob::Space(&mut a.memory_space));
    }
    for m in &mut exe.modules {
        f(Knob::Name(&mut m.name));
        f(Knob::Images(&mut m.images));
    }
    for s in exe
        .signature
        .parameters
        .iter_mut()
        .chain(exe.signature.outputs.iter_mut())
    {
        f(Knob::Name(&mut s.name));
        f(Knob::DType(&mut s.dtype));
        f(Knob::Dims(&mut s.dims));
        f(Knob::Index(&mut s.allocation));
    }
    for t in &mut exe.entry {
        visit_thunk(t, f);
    }
}

fn slice(s: &mut Slice, f: &mut dyn FnMut(Knob<'_>)) {
    f(Knob::Slice(s));
    f(Knob::Index(&mut s.allocation));
    f(Knob::Size(&mut s.offset));
    f(Knob::Size(&mut s.size));
}

fn visit_thunk(t: &mut Thunk, f: &mut dyn FnMut(Knob<'_>)) {
    match t {
        Thunk::Copy(CopyThunk { src, dst }) => {
            slice(src, f);
            slice(dst, f);
        }
        Thunk::Memset(MemsetThunk { dst, pattern }) => {
            slice(dst, f);
            f(Knob::Pattern(pattern));
        }
        Thunk::Kernel(k) => {
            f(Knob::Name(&mut k.module));
            f(Knob::KernelName(&mut k.name));
            f(Knob::Dim3(&mut k.grid));
            f(Knob::Dim3(&mut k.block));
            f(Knob::Index(&mut k.shared_mem));
            f(Knob::Args(&mut k.args));
            for a in &mut k.args {
                match a {
                    KernelArg::Buffer { slice: s, access } => {
                        slice(s, f);
                        f(Knob::Access(access));
                    }
                    KernelArg::Scalar(s) => f(Knob::Scalar(s)),
                }
            }
        }
        Thunk::Gemm(g) => {
            slice(&mut g.a, f);
            slice(&mut g.b, f);
            slice(&mut g.c, f);
            for v in [
                &mut g.m,
                &mut g.n,
                &mut g.k,
                &mut g.lda,
                &mut g.ldb,
                &mut g.ldc,
                &mut g.batch,
                &mut g.stride_a,
                &mut g.stride_b,
                &mut g.stride_c,
            ] {
                f(Knob::Size(v));
            }
            f(Knob::Flag(&mut g.trans_a));
            f(Knob::Flag(&mut g.trans_b));
            f(Knob::Real(&mut g.alpha));
            f(Knob::Real(&mut g.beta));
            f(Knob::DType(&mut g.dtype));
        }
        Thunk::Sequence(v) | Thunk::CommandBuffer(CommandBufferThunk { body: v }) => {
            for t in v {
                visit_thunk(t, f);
            }
        }
        Thunk::While(WhileThunk {
            cond,
            pred,
            body,
            trip_count,
        }) => {
            slice(pred, f);
            f(Knob::TripCount(trip_count));
            for t in cond.iter_mut().chain(body.iter_mut()) {
                visit_thunk(t, f);
            }
        }
        Thunk::Conditional(ConditionalThunk {
            index,
            index_type,
            branches,
        }) => {
            slice(index, f);
            f(Knob::DType(index_type));
            for t in branches.iter_mut().flatten() {
                visit_thunk(t, f);
            }
        }
        Thunk::AsyncStart(AsyncStartThunk { id, kind, body }) => {
            f(Knob::Index(id));
            f(Knob::AsyncKind(kind));
            for t in body {
                visit_thunk(t, f);
            }
        }
        Thunk::AsyncDone(AsyncDoneThunk { id }) => f(Knob::Index(id)),
        Thunk::Collective(c) => {
            match &mut c.op {
                CollectiveOp::AllReduce { op } | CollectiveOp::ReduceScatter { op } => {
                    f(Knob::ReduceOp(op))
                }
                CollectiveOp::Broadcast { root } => f(Knob::Index(root)),
                CollectiveOp::AllGather | CollectiveOp::AllToAll => {}
            }
            slice(&mut c.src, f);
            slice(&mut c.dst, f);
            f(Knob::DType(&mut c.dtype));
            f(Knob::Groups(&mut c.groups));
        }
        Thunk::CollectivePermute(CollectivePermuteThunk {
            src,
            dst,
            dtype,
            pairs,
        }) => {
            slice(src, f);
            slice(dst, f);
            f(Knob::DType(dtype));
            f(Knob::Pairs(pairs));
        }
        Thunk::Send(SendThunk {
            src: s,
            dtype,
            peer,
        })
        | Thunk::Recv(RecvThunk {
            dst: s,
            dtype,
            peer,
        }) => {
            slice(s, f);
            f(Knob::DType(dtype));
            f(Knob::Index(peer));
        }
        Thunk::RankId(RankIdThunk { dst }) => slice(dst, f),
        Thunk::ExecutionSeed(e) => slice(&mut e.dst, f),
        Thunk::RaggedAllToAll(r) => {
            for s in [
                &mut r.operand,
                &mut r.output,
                &mut r.input_offsets,
                &mut r.send_sizes,
                &mut r.output_offsets,
                &mut r.recv_sizes,
            ] {
                slice(s, f);
            }
            f(Knob::DType(&mut r.dtype));
            f(Knob::DType(&mut r.index_dtype));
            f(Knob::Size(&mut r.row_elements));
            f(Knob::Groups(&mut r.groups));
        }
        Thunk::CustomCall(c) => {
            for b in c.operands.iter_mut().chain(c.results.iter_mut()) {
                slice(&mut b.slice, f);
                f(Knob::DType(&mut b.dtype));
            }
        }
    }
}

/// What a knob mutation may borrow from the rest of the program.
#[derive(Default)]
pub struct Context {
    pub sizes: Vec<u64>,
    pub slices: Vec<Slice>,
    pub names: Vec<String>,
    pub allocations: usize,
}

/// Applies one knob mutation to `exe`.
pub fn mutate_knob(rng: &mut Rng, exe: &mut Executable) {
    let mut cx = Context {
        sizes: exe.allocations.iter().map(|a| a.size).collect(),
        allocations: exe.allocations.len(),
        ..Default::default()
    };
    cx.names.extend(exe.modules.iter().map(|m| m.name.clone()));
    cx.names.extend(
        exe.signature
            .parameters
            .iter()
            .chain(&exe.signature.outputs)
            .map(|s| s.name.clone()),
    );
    // One pass counts the knobs and collects the slices, the next changes one knob.
    let mut count = 0usize;
    visit(exe, &mut |k| {
        count += 1;
        if let Knob::Slice(s) = k
            && cx.slices.len() < 256
        {
            cx.slices.push(*s);
        }
    });
    let Some(target) = rng.index(count) else {
        return;
    };
    let mut i = 0usize;
    visit(exe, &mut |k| {
        if i == target {
            change(rng, k, &cx);
        }
        i += 1;
    });
}

/// The standard library's kernel names (for plausible renames).
fn kernel_names() -> &'static [String] {
    static NAMES: OnceLock<Vec<String>> = OnceLock::new();
    NAMES.get_or_init(|| {
        xthunk_core::kernels::standard_library()
            .names()
            .map(str::to_string)
            .collect()
    })
}

fn size_value(rng: &mut Rng, v: u64, cx: &Context) -> u64 {
    match rng.below(6) {
        0 => rng
            .pick(&cx.sizes)
            .map(|s| match rng.below(4) {
                0 => *s,
                1 => s / 2,
                2 => s.wrapping_add(1),
                _ => s.wrapping_sub(1),
            })
            .unwrap_or(v),
        1 => v.wrapping_add(*rng.pick(&[1, 2, 4, 8, 64]).unwrap_or(&1)),
        _ => mutate_u64(rng, v),
    }
}

fn random_dtype(rng: &mut Rng) -> DType {
    *rng.pick(&DType::ALL).unwrap_or(&DType::F32)
}

fn scalar_value(rng: &mut Rng, s: Scalar) -> Scalar {
    let big = *rng.pick(INTERESTING_U64).unwrap_or(&0);
    let f32_bits = *rng
        .pick(&[
            0x7fc0_0000u32,
            0xffff_ffff,
            0x7f80_0001,
            0x7f80_0000,
            0x8000_0000,
            1,
            0x3f80_0000,
        ])
        .unwrap_or(&0);
    match rng.below(3) {
        // Same type, another value.
        0 | 1 => match s {
            Scalar::Pred(v) => Scalar::Pred(!v),
            Scalar::I8(_) => Scalar::I8(big as i8),
            Scalar::U8(_) => Scalar::U8(big as u8),
            Scalar::I32(v) => Scalar::I32(if rng.chance(1, 2) {
                -(v.wrapping_abs())
            } else {
                big as i32
            }),
            Scalar::I64(v) => Scalar::I64(match rng.below(3) {
                0 => -1,
                1 => mutate_u64(rng, v as u64) as i64,
                _ => big as i64,
            }),
            Scalar::F16(_) => Scalar::F16(
                *rng.pick(&[0x7e00u16, 0xffff, 0x7c01, 0x7c00, 0x8000, 1])
                    .unwrap_or(&0),
            ),
            Scalar::BF16(_) => Scalar::BF16(
                *rng.pick(&[0x7fc0u16, 0xffff, 0x7f81, 0x7f80, 0x8000, 1])
                    .unwrap_or(&0),
            ),
            Scalar::F32(_) => Scalar::F32(f32::from_bits(f32_bits)),
            Scalar::F64(_) => Scalar::F64(f64::from_bits(
                *rng.pick(&[
                    0x7ff8_0000_0000_0000u64,
                    u64::MAX,
                    0x7ff0_0000_0000_0001,
                    0x8000_0000_0000_0000,
                    1,
                ])
                .unwrap_or(&0),
            )),
            Scalar::I16(_) => Scalar::I16(big as i16),
            Scalar::U16(_) => Scalar::U16(big as u16),
            Scalar::U32(_) => Scalar::U32(big as u32),
            Scalar::U64(v) => Scalar::U64(mutate_u64(rng, v)),
        },
        // Another type (an argument of the wrong kind).
        _ => {
            let v = s.as_i64().unwrap_or(1);
            match rng.below(9) {
                0 => Scalar::Pred(v != 0),
                1 => Scalar::I8(v as i8),
                2 => Scalar::U8(v as u8),
                3 => Scalar::I32(v as i32),
                4 => Scalar::I64(v),
                5 => Scalar::F16(v as u16),
                6 => Scalar::BF16(v as u16),
                7 => Scalar::F32(v as f32),
                _ => Scalar::F64(v as f64),
            }
        }
    }
}

fn change(rng: &mut Rng, knob: Knob<'_>, cx: &Context) {
    match knob {
        Knob::Size(v) => *v = size_value(rng, *v, cx),
        Knob::Index(v) => {
            *v = if rng.chance(1, 2) {
                rng.below(cx.allocations + 2) as u32
            } else {
                mutate_u32(rng, *v)
            }
        }
        Knob::TripCount(t) => {
            *t = match rng.below(6) {
                0 => None,
                1 => Some(0),
                2 => Some(rng.range(1, 4) as u64),
                3 => Some(
                    *rng.pick(&[1u64 << 40, (1 << 63) - 1, 1 << 63, u64::MAX])
                        .unwrap_or(&0),
                ),
                _ => t.map(|n| mutate_u64(rng, n) % 64).or(Some(2)),
            }
        }
        Knob::DType(d) => *d = random_dtype(rng),
        Knob::Flag(b) => *b = !*b,
        Knob::Real(v) => {
            *v = *rng
                .pick(&[
                    0.0,
                    -0.0,
                    1.0,
                    -1.0,
                    0.5,
                    2.0,
                    f64::NAN,
                    f64::INFINITY,
                    f64::NEG_INFINITY,
                    1e308,
                    f64::MIN_POSITIVE,
                ])
                .unwrap_or(&1.0)
        }
        Knob::Scalar(s) => *s = scalar_value(rng, *s),
        Knob::Pattern(p) => {
            let v = rng.next_u64();
            *p = match rng.below(3) {
                0 => MemsetPattern::U8(v as u8),
                1 => MemsetPattern::U16(v as u16),
                _ => MemsetPattern::U32(v as u32),
            }
        }
        Knob::Access(a) => {
            *a = *rng
                .pick(&[Access::Read, Access::Write, Access::ReadWrite])
                .unwrap_or(&Access::Read)
        }
        Knob::Name(n) => {
            *n = match rng.below(4) {
                0 => String::new(),
                1 => rng.pick(&cx.names).cloned().unwrap_or_default(),
                2 => format!("{n}\u{0}é"),
                _ => format!("{n}_"),
            }
        }
        Knob::KernelName(n) => {
            *n = if rng.chance(3, 4) {
                rng.pick(kernel_names()).cloned().unwrap_or_default()
            } else {
                format!("{n}x")
            }
        }
        Knob::Dims(d) => match rng.below(5) {
            0 => d.push(*rng.pick(&[0, 1, 2, 1 << 32, u64::MAX]).unwrap_or(&1)),
            1 => {
                d.pop();
            }
            2 => *d = vec![1 << 32, 1 << 32],
            _ => {
                if let Some(i) = rng.index(d.len()) {
                    d[i] = mutate_u64(rng, d[i]);
                } else {
                    d.push(rng.small() as u64);
                }
            }
        },
        Knob::Groups(g) => {
            *g = rng
                .pick(&[
                    vec![],
                    vec![vec![0]],
                    vec![vec![0, 1]],
                    vec![vec![1]],
                    vec![vec![0], vec![1]],
                    vec![vec![0, 0]],
                    vec![vec![]],
                    vec![vec![0, 1, 2, 3]],
                    vec![vec![u32::MAX]],
                    vec![vec![1, 0]],
                ])
                .cloned()
                .unwrap_or_default()
        }
        Knob::Pairs(p) => {
            *p = rng
                .pick(&[
                    vec![],
                    vec![(0, 0)],
                    vec![(0, 1), (1, 0)],
                    vec![(0, 1), (0, 2)],
                    vec![(1, 0), (2, 0)],
                    vec![(u32::MAX, 0)],
                ])
                .cloned()
                .unwrap_or_default()
        }
        Knob::AllocKind(k) => {
            *k = match rng.below(4) {
                0 => AllocationKind::Parameter(rng.below(4) as u32),
                1 => AllocationKind::Output(rng.below(4) as u32),
                2 => AllocationKind::Temp,
                _ => {
                    let len = rng.pick(&cx.sizes).copied().unwrap_or(4).min(1 << 16) as usize;
                    let len = if rng.chance(1, 4) { len + 1 } else { len };
                    AllocationKind::Constant((0..len).map(|i| i as u8).collect())
                }
            }
        }
        Knob::Space(s) => *s = *rng.pick(&MemorySpace::ALL).unwrap_or(&MemorySpace::Device),
        Knob::AsyncKind(k) => {
            *k = if rng.chance(1, 2) {
                AsyncKind::Compute
            } else {
                AsyncKind::Communication
            }
        }
        Knob::ReduceOp(o) => *o = *rng.pick(&ReduceOp::ALL).unwrap_or(&ReduceOp::Sum),
        Knob::Images(images) => match rng.below(4) {
            0 => images.clear(),
            1 => {
                if let Some(i) = rng.index(images.len()) {
                    images.remove(i);
                }
            }
            _ => images.insert(
                0,
                rng.pick(&[
                    ModuleImage::Standard,
                    ModuleImage::Source {
                        code: "extern \"C\" __global__ void k() {}".into(),
                    },
                    ModuleImage::Ptx {
                        code: ".version 8.0\n".into(),
                    },
                    ModuleImage::Cubin {
                        arch: "sm_90".into(),
                        data: b"\x7fELF\x02\x01\x01".to_vec(),
                    },
                    ModuleImage::Hsaco {
                        arch: "gfx90a".into(),
                        data: vec![0],
                    },
                    ModuleImage::Host {
                        library: "missing".into(),
                    },
                ])
                .cloned()
                .unwrap_or(ModuleImage::Standard),
            ),
        },
        Knob::Args(args) => match rng.below(4) {
            0 => {
                if let Some(i) = rng.index(args.len()) {
                    args.remove(i);
                }
            }
            1 => {
                if let Some(i) = rng.index(args.len()) {
                    let a = args[i];
                    args.insert(i, a);
                }
            }
            2 => {
                if let (Some(i), Some(j)) = (rng.index(args.len()), rng.index(args.len())) {
                    args.swap(i, j);
                }
            }
            _ => args.push(KernelArg::Scalar(Scalar::I64(rng.small() as i64))),
        },
        Knob::Dim3(d) => {
            let v = *rng
                .pick(&[
                    0u32,
                    1,
                    2,
                    32,
                    1024,
                    1025,
                    65535,
                    65536,
                    (1 << 31) - 1,
                    1 << 22,
                    u32::MAX,
                ])
                .unwrap_or(&1);
            match rng.below(4) {
                0 => d.x = v,
                1 => d.y = v,
                2 => d.z = v,
                _ => *d = Dim3::new(v, v, v),
            }
        }
        Knob::Slice(s) => match rng.below(6) {
            0 => {
                if let Some(o) = rng.pick(&cx.slices) {
                    *s = *o;
                }
            }
            1 => {
                if let Some(i) = rng.index(cx.allocations) {
                    s.allocation = i as u32;
                }
            }
            2 => {
                if let Some(size) = cx.sizes.get(s.allocation as usize) {
                    *s = Slice::new(s.allocation, 0, *size);
                }
            }
            3 => {
                let d = *rng.pick(&[1u64, 2, 4, 8]).unwrap_or(&1);
                s.offset = s.offset.wrapping_add(d);
            }
            4 => {
                s.size = s
                    .size
                    .saturating_sub(*rng.pick(&[1u64, 2, 4, 8]).unwrap_or(&1))
            }
            _ => {
                s.offset = s.offset.wrapping_add(s.size / 2);
            }
        },
    }
}

/// Sets one slice and its allocation together to a huge size (the allocation grows to hold
/// it), so that the size arithmetic after the bounds check (products with group sizes,
/// element counts, strides) meets huge values that are still in bounds.
pub fn resize_together(rng: &mut Rng, exe: &mut Executable) {
    let mut slices = 0usize;
    visit(exe, &mut |k| slices += matches!(k, Knob::Slice(_)) as usize);
    let Some(target) = rng.index(slices) else {
        return;
    };
    let size = *rng
        .pick(&[
            1u64 << 32,
            1 << 40,
            1 << 62,
            (1 << 63) + 8,
            u64::MAX - 7,
            u64::MAX,
        ])
        .unwrap_or(&(1 << 62));
    let half = rng.chance(1, 3);
    let mut i = 0usize;
    let mut grown = None;
    visit(exe, &mut |k| {
        if let Knob::Slice(s) = k {
            if i == target {
                *s = if half {
                    Slice::new(s.allocation, size / 2, size / 2)
                } else {
                    Slice::new(s.allocation, 0, size)
                };
                grown = Some(s.allocation as usize);
            }
            i += 1;
        }
    });
    if let Some(a) = grown.and_then(|a| exe.allocations.get_mut(a)) {
        a.size = a.size.max(size);
    }
}
