//! Property test: arbitrary valid programs survive IR -> proto -> IR, the binary format and the
//! text format unchanged (compared with `==`, and bit for bit through the binary encoding so
//! that e.g. the sign of a zero float is checked too).
//!
//! The generator covers every thunk kind: nested sequences, `while` loops (with and without a
//! trip count), `conditional`s (i32 and pred index), async scopes in any list (their
//! `async_done` placed a random distance after the `async_start`, so scopes nest and
//! interleave), and command buffers whose bodies hold only the kinds allowed there.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use proptest::prelude::*;
use std::cell::RefCell;
use std::collections::BTreeSet;
use xthunk_core::ir::{
    ABI_VERSION, Access, AllocationKind, AsyncDoneThunk, AsyncKind, AsyncStartThunk,
    BufferAllocation, CommandBufferThunk, ConditionalThunk, CopyThunk, DType, Dim3, Executable,
    GEMM_DTYPES, GemmThunk, KernelArg, KernelThunk, MemorySpace, MemsetPattern, MemsetThunk,
    Module, ModuleImage, Scalar, Signature, Slice, TensorSpec, Thunk, WhileThunk,
};
use xthunk_core::verify;
use xthunk_proto::{decode, encode, from_proto, parse_text, to_proto, to_text};

// ---------------------------------------------------------------------------------------------
// Allocations and signature
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum RawKind {
    Parameter(DType, Vec<u64>),
    Output(DType, Vec<u64>),
    Temp(u64),
    Constant(Vec<u8>),
}

fn dtype() -> impl Strategy<Value = DType> {
    prop::sample::select(DType::ALL.to_vec())
}

fn raw_kind() -> impl Strategy<Value = RawKind> {
    let dims = prop::collection::vec(0u64..6, 0..3);
    prop_oneof![
        (dtype(), dims.clone()).prop_map(|(d, v)| RawKind::Parameter(d, v)),
        (dtype(), dims).prop_map(|(d, v)| RawKind::Output(d, v)),
        (0u64..2048).prop_map(RawKind::Temp),
        prop::collection::vec(any::<u8>(), 0..64).prop_map(RawKind::Constant),
    ]
}

fn memory_space() -> impl Strategy<Value = MemorySpace> {
    prop::sample::select(MemorySpace::ALL.to_vec())
}

/// Strings with quotes, escapes, control characters and non-ASCII text.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z_0-9]{0,10}",
        "(?s).{0,12}",
        Just("quote\" back\\slash\n\ttab\0nul é ☃".to_string()),
    ]
}

/// Allocations of random kinds, memory spaces, alignments and sizes, with a signature that
/// matches them, plus two large temps so that every thunk kind always has room.
fn allocations() -> impl Strategy<Value = (Vec<BufferAllocation>, Signature)> {
    (
        prop::collection::vec((raw_kind(), 0u32..=12, memory_space(), text()), 0..6),
        memory_space(),
    )
        .prop_map(|(raw, big_space)| {
            let mut allocs = Vec::new();
            let mut sig = Signature::default();
            for (i, (kind, align_log, memory_space, name)) in raw.into_iter().enumerate() {
                let index = i as u32;
                let (kind, size) = match kind {
                    RawKind::Parameter(dtype, dims) => {
                        let n = sig.parameters.len() as u32;
                        let spec = spec(format!("p{n}{name}"), dtype, dims, index);
                        let size = spec.byte_size().unwrap();
                        sig.parameters.push(spec);
                        (AllocationKind::Parameter(n), size)
                    }
                    RawKind::Output(dtype, dims) => {
                        let n = sig.outputs.len() as u32;
                        let spec = spec(format!("o{n}{name}"), dtype, dims, index);
                        let size = spec.byte_size().unwrap();
                        sig.outputs.push(spec);
                        (AllocationKind::Output(n), size)
                    }
                    RawKind::Temp(size) => (AllocationKind::Temp, size),
                    RawKind::Constant(bytes) => {
                        let size = bytes.len() as u64;
                        (AllocationKind::Constant(bytes), size)
                    }
                };
                allocs.push(BufferAllocation {
                    index,
                    size,
                    alignment: 1 << align_log,
                    kind,
                    memory_space,
                });
            }
            for _ in 0..2 {
                allocs.push(BufferAllocation {
                    index: allocs.len() as u32,
                    size: 1024,
                    alignment: 256,
                    kind: AllocationKind::Temp,
                    memory_space: big_space,
                });
            }
            (allocs, sig)
        })
}

fn spec(name: String, dtype: DType, dims: Vec<u64>, allocation: u32) -> TensorSpec {
    TensorSpec {
        name,
        dtype,
        dims,
        allocation,
    }
}

// ---------------------------------------------------------------------------------------------
// Modules
// ---------------------------------------------------------------------------------------------

fn image() -> impl Strategy<Value = ModuleImage> {
    let data = prop::collection::vec(any::<u8>(), 1..32);
    prop_oneof![
        text().prop_map(|c| ModuleImage::Source {
            code: format!("__global__ void k() {{}} // {c}")
        }),
        text().prop_map(|c| ModuleImage::Ptx {
            code: format!(".version 8.0\n// {c}")
        }),
        ("[0-9]{2,3}", data.clone()).prop_map(|(a, data)| ModuleImage::Cubin {
            arch: format!("sm_{a}"),
            data
        }),
        ("[0-9a-f]{3,4}", data).prop_map(|(a, data)| ModuleImage::Hsaco {
            arch: format!("gfx{a}"),
            data
        }),
        text().prop_map(|l| ModuleImage::Host {
            library: format!("lib{l}")
        }),
    ]
}

/// Compile options of a module: valid defines (`N<k>` or `N<k>=<text>`), fast math, headers
/// with distinct names.
fn options() -> impl Strategy<Value = xthunk_core::ir::ModuleOptions> {
    (
        prop::collection::vec(prop::option::of("[a-z0-9 ]{0,8}"), 0..3),
        any::<bool>(),
        prop::collection::vec(text(), 0..3),
    )
        .prop_map(
            |(defines, fast_math, headers)| xthunk_core::ir::ModuleOptions {
                defines: defines
                    .into_iter()
                    .enumerate()
                    .map(|(k, v)| match v {
                        Some(v) => format!("N{k}={v}"),
                        None => format!("N{k}"),
                    })
                    .collect(),
                fast_math,
                headers: headers
                    .into_iter()
                    .enumerate()
                    .map(|(k, code)| xthunk_core::ir::HeaderSource {
                        name: format!("h{k}.h"),
                        code,
                    })
                    .collect(),
            },
        )
}

/// Modules kernels may launch (no standard image, so no standard-library signature applies),
/// and optionally a standard-library module nobody launches.
fn modules() -> impl Strategy<Value = Vec<Module>> {
    (
        prop::collection::vec(
            (text(), prop::collection::vec(image(), 1..4), options()),
            1..4,
        ),
        any::<bool>(),
        prop::collection::vec(image(), 0..2),
    )
        .prop_map(|(mods, with_std, extra)| {
            let mut out: Vec<Module> = mods
                .into_iter()
                .enumerate()
                .map(|(i, (name, images, options))| Module {
                    name: format!("m{i}{name}"),
                    images,
                    options,
                })
                .collect();
            if with_std {
                let mut images = vec![ModuleImage::Standard];
                images.extend(extra);
                out.push(Module {
                    name: "std".into(),
                    images,
                    options: Default::default(),
                });
            }
            out
        })
}

// ---------------------------------------------------------------------------------------------
// Thunks: generated as raw numbers, then placed inside the allocations so that they verify
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum RawArg {
    Buffer(u32, u64, u64, Access),
    Scalar(Scalar),
}

#[derive(Clone, Debug)]
struct RawGemm {
    dtype: DType,
    m: u64,
    n: u64,
    k: u64,
    ld_extra: (u64, u64, u64),
    trans: (bool, bool),
    alpha: f64,
    beta: f64,
    batch: u64,
    stride_extra: (u64, u64, u64),
    place: (u32, u32, u32, u64, u64, u64),
}

#[derive(Clone, Debug)]
enum RawThunk {
    Copy(u32, u32, u64, u64, u64),
    Memset(u32, u64, u64, u8, u32),
    Kernel {
        module: u32,
        name: String,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_mem: u32,
        args: Vec<RawArg>,
    },
    Gemm(Box<RawGemm>),
    Sequence(Vec<RawThunk>),
    While {
        cond: Vec<RawThunk>,
        /// Allocation pick and offset of the 1-byte predicate.
        pred: (u32, u64),
        body: Vec<RawThunk>,
        trip_count: Option<u64>,
    },
    Conditional {
        /// Allocation pick and offset of the index.
        index: (u32, u64),
        pred_index: bool,
        branches: Vec<Vec<RawThunk>>,
    },
    /// An async scope: `async_start` here, its `async_done` after `span` more thunks of the
    /// same list (or at the end of the list). `id` is a starting point for a unique id.
    Async {
        communication: bool,
        id: u32,
        span: usize,
        body: Vec<RawThunk>,
    },
    CommandBuffer(Vec<RawThunk>),
}

fn finite_f64() -> impl Strategy<Value = f64> {
    use prop::num::f64;
    f64::POSITIVE | f64::NEGATIVE | f64::NORMAL | f64::SUBNORMAL | f64::ZERO
}

fn scalar() -> impl Strategy<Value = Scalar> {
    use prop::num::{f32, f64};
    prop_oneof![
        any::<bool>().prop_map(Scalar::Pred),
        any::<i8>().prop_map(Scalar::I8),
        any::<u8>().prop_map(Scalar::U8),
        any::<i32>().prop_map(Scalar::I32),
        any::<i64>().prop_map(Scalar::I64),
        any::<u16>().prop_map(Scalar::F16),
        any::<u16>().prop_map(Scalar::BF16),
        (f32::POSITIVE | f32::NEGATIVE | f32::NORMAL | f32::SUBNORMAL | f32::ZERO | f32::INFINITE)
            .prop_map(Scalar::F32),
        (f64::POSITIVE | f64::NEGATIVE | f64::NORMAL | f64::SUBNORMAL | f64::ZERO | f64::INFINITE)
            .prop_map(Scalar::F64),
        any::<i16>().prop_map(Scalar::I16),
        any::<u16>().prop_map(Scalar::U16),
        any::<u32>().prop_map(Scalar::U32),
        any::<u64>().prop_map(Scalar::U64),
    ]
}

fn access() -> impl Strategy<Value = Access> {
    prop::sample::select(vec![Access::Read, Access::Write, Access::ReadWrite])
}

fn raw_arg() -> impl Strategy<Value = RawArg> {
    prop_oneof![
        (any::<u32>(), any::<u64>(), any::<u64>(), access())
            .prop_map(|(a, x, y, acc)| RawArg::Buffer(a, x, y, acc)),
        scalar().prop_map(RawArg::Scalar),
    ]
}

fn raw_gemm() -> impl Strategy<Value = RawGemm> {
    (
        (
            prop::sample::select(GEMM_DTYPES.to_vec()),
            0u64..5,
            0u64..5,
            0u64..5,
            (0u64..3, 0u64..3, 0u64..3),
            any::<(bool, bool)>(),
        ),
        (
            finite_f64(),
            finite_f64(),
            1u64..4,
            (0u64..4, 0u64..4, 0u64..4),
            any::<(u32, u32, u32, u64, u64, u64)>(),
        ),
    )
        .prop_map(
            |((dtype, m, n, k, ld_extra, trans), (alpha, beta, batch, stride_extra, place))| {
                RawGemm {
                    dtype,
                    m,
                    n,
                    k,
                    ld_extra,
                    trans,
                    alpha,
                    beta,
                    batch,
                    stride_extra,
                    place,
                }
            },
        )
}

fn raw_thunk() -> impl Strategy<Value = RawThunk> {
    let leaf = prop_oneof![
        any::<(u32, u32, u64, u64, u64)>()
            .prop_map(|(a, b, x, y, z)| RawThunk::Copy(a, b, x, y, z)),
        (
            any::<u32>(),
            any::<u64>(),
            any::<u64>(),
            0u8..3,
            any::<u32>()
        )
            .prop_map(|(a, x, y, w, v)| RawThunk::Memset(a, x, y, w, v)),
        (
            any::<u32>(),
            text(),
            (1u32..=u32::MAX, 1u32..70_000, 1u32..70_000),
            (1u32..=32, 1u32..=8, 1u32..=4),
            any::<u32>(),
            prop::collection::vec(raw_arg(), 0..6),
        )
            .prop_map(
                |(module, name, grid, block, shared_mem, args)| RawThunk::Kernel {
                    module,
                    name,
                    grid,
                    block,
                    shared_mem,
                    args,
                }
            ),
        raw_gemm().prop_map(|g| RawThunk::Gemm(Box::new(g))),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        let list = prop::collection::vec(inner, 0..6);
        // Mostly small counts; sometimes anything the (signed) proto field can hold.
        let trip_count = prop::option::of(prop_oneof![0u64..8, 0..=i64::MAX as u64]);
        prop_oneof![
            list.clone().prop_map(RawThunk::Sequence),
            (list.clone(), any::<(u32, u64)>(), list.clone(), trip_count).prop_map(
                |(cond, pred, body, trip_count)| RawThunk::While {
                    cond,
                    pred,
                    body,
                    trip_count,
                }
            ),
            (
                any::<(u32, u64)>(),
                any::<bool>(),
                prop::collection::vec(list.clone(), 0..4)
            )
                .prop_map(|(index, pred_index, branches)| RawThunk::Conditional {
                    index,
                    pred_index,
                    branches,
                }),
            (any::<bool>(), any::<u32>(), 0usize..4, list.clone()).prop_map(
                |(communication, id, span, body)| RawThunk::Async {
                    communication,
                    id,
                    span,
                    body,
                }
            ),
            list.prop_map(RawThunk::CommandBuffer),
        ]
    })
}

struct Ctx<'a> {
    allocs: &'a [BufferAllocation],
    writable: Vec<u32>,
    modules: Vec<String>,
    /// Async ids handed out so far (ids are unique in a program).
    async_ids: RefCell<BTreeSet<u32>>,
}

impl Ctx<'_> {
    fn size(&self, a: u32) -> u64 {
        self.allocs[a as usize].size
    }

    fn any_alloc(&self, pick: u32) -> u32 {
        pick % self.allocs.len() as u32
    }

    fn writable_alloc(&self, pick: u32) -> u32 {
        self.writable[pick as usize % self.writable.len()]
    }

    /// A slice of `alloc` at an offset and size multiple of `unit`.
    fn slice(&self, alloc: u32, x: u64, y: u64, unit: u64) -> Slice {
        let units = self.size(alloc) / unit;
        let off = x % (units + 1);
        let len = y % (units - off + 1);
        Slice::new(alloc, off * unit, len * unit)
    }

    /// A fresh async id, from `start` upwards.
    fn async_id(&self, start: u32) -> u32 {
        let mut ids = self.async_ids.borrow_mut();
        let mut id = start;
        while !ids.insert(id) {
            id = id.wrapping_add(1);
        }
        id
    }

    /// A `size`-byte slice of the first allocation from `pick` on that has room, at an offset
    /// from `x`.
    fn small_slice(&self, (pick, x): (u32, u64), size: u64) -> Slice {
        let n = self.allocs.len() as u32;
        let alloc = (0..n)
            .map(|i| (pick % n + i) % n)
            .find(|&a| self.size(a) >= size)
            .unwrap();
        Slice::new(alloc, x % (self.size(alloc) - size + 1), size)
    }

    /// One thunk list. Async scopes become an `async_start` and, `span` thunks later in the
    /// same list, its `async_done`; inside a command buffer (`in_cb`) only copies, memsets,
    /// kernels, gemms and sequences are produced (other kinds become sequences of their
    /// bodies).
    fn list(&self, raws: &[RawThunk], in_cb: bool) -> Vec<Thunk> {
        let mut out = Vec::new();
        let mut open: Vec<(usize, u32)> = Vec::new();
        for (i, raw) in raws.iter().enumerate() {
            match raw {
                RawThunk::Async {
                    communication,
                    id,
                    span,
                    body,
                } if !in_cb => {
                    let id = self.async_id(*id);
                    let kind = if *communication {
                        AsyncKind::Communication
                    } else {
                        AsyncKind::Compute
                    };
                    out.push(Thunk::AsyncStart(AsyncStartThunk {
                        id,
                        kind,
                        body: self.list(body, false),
                    }));
                    open.push((i + span, id));
                }
                _ => out.push(self.thunk(raw, in_cb)),
            }
            open.retain(|&(at, id)| {
                if at <= i {
                    out.push(Thunk::AsyncDone(AsyncDoneThunk { id }));
                    false
                } else {
                    true
                }
            });
        }
        // Scopes still open close at the end of the list, innermost first.
        for (_, id) in open.into_iter().rev() {
            out.push(Thunk::AsyncDone(AsyncDoneThunk { id }));
        }
        out
    }

    fn thunk(&self, raw: &RawThunk, in_cb: bool) -> Thunk {
        match raw {
            RawThunk::Copy(a, b, x, y, z) => {
                let src_a = self.any_alloc(*a);
                let dst_a = self.writable_alloc(*b);
                let size = z % (self.size(src_a).min(self.size(dst_a)) + 1);
                let mut src = Slice::new(src_a, x % (self.size(src_a) - size + 1), size);
                let mut dst = Slice::new(dst_a, y % (self.size(dst_a) - size + 1), size);
                if src.overlaps(&dst) {
                    if src.offset + 2 * size <= self.size(dst_a) {
                        dst.offset = src.offset + size;
                    } else if src.offset >= size {
                        dst.offset = src.offset - size;
                    } else {
                        src.size = 0;
                        dst.size = 0;
                    }
                }
                Thunk::Copy(CopyThunk { src, dst })
            }
            RawThunk::Memset(a, x, y, w, v) => {
                let pattern = match w {
                    0 => MemsetPattern::U8(*v as u8),
                    1 => MemsetPattern::U16(*v as u16),
                    _ => MemsetPattern::U32(*v),
                };
                let dst = self.slice(self.writable_alloc(*a), *x, *y, pattern.width());
                Thunk::Memset(MemsetThunk { dst, pattern })
            }
            RawThunk::Kernel {
                module,
                name,
                grid,
                block,
                shared_mem,
                args,
            } => Thunk::Kernel(KernelThunk {
                module: self.modules[*module as usize % self.modules.len()].clone(),
                name: name.clone(),
                grid: Dim3::new(grid.0, grid.1, grid.2),
                block: Dim3::new(block.0, block.1, block.2),
                shared_mem: *shared_mem,
                args: args
                    .iter()
                    .map(|a| match a {
                        RawArg::Buffer(pick, x, y, access) => {
                            let alloc = if access.writes() {
                                self.writable_alloc(*pick)
                            } else {
                                self.any_alloc(*pick)
                            };
                            KernelArg::Buffer {
                                slice: self.slice(alloc, *x, *y, 1),
                                access: *access,
                            }
                        }
                        RawArg::Scalar(s) => KernelArg::Scalar(*s),
                    })
                    .collect(),
            }),
            RawThunk::Gemm(g) => Thunk::Gemm(self.gemm(g)),
            RawThunk::Sequence(body) => Thunk::Sequence(self.list(body, in_cb)),
            RawThunk::While { body, .. } if in_cb => Thunk::Sequence(self.list(body, true)),
            RawThunk::While {
                cond,
                pred,
                body,
                trip_count,
            } => Thunk::While(WhileThunk {
                cond: self.list(cond, false),
                pred: self.small_slice(*pred, 1),
                body: self.list(body, false),
                trip_count: *trip_count,
            }),
            RawThunk::Conditional { branches, .. } if in_cb => {
                Thunk::Sequence(self.list(branches.first().map_or(&[][..], |b| b), true))
            }
            RawThunk::Conditional {
                index,
                pred_index,
                branches,
            } => {
                let mut branches: Vec<Vec<Thunk>> =
                    branches.iter().map(|b| self.list(b, false)).collect();
                let (index_type, size) = if *pred_index {
                    branches.resize_with(2, Vec::new);
                    (DType::Pred, 1)
                } else {
                    if branches.is_empty() {
                        branches.push(Vec::new());
                    }
                    (DType::I32, 4)
                };
                Thunk::Conditional(ConditionalThunk {
                    index: self.small_slice(*index, size),
                    index_type,
                    branches,
                })
            }
            // Only reached inside a command buffer (`list` handles async scopes elsewhere).
            RawThunk::Async { body, .. } => Thunk::Sequence(self.list(body, true)),
            RawThunk::CommandBuffer(body) if in_cb => Thunk::Sequence(self.list(body, true)),
            RawThunk::CommandBuffer(body) => Thunk::CommandBuffer(CommandBufferThunk {
                body: self.list(body, true),
            }),
        }
    }

    fn gemm(&self, g: &RawGemm) -> GemmThunk {
        let mut t = GemmThunk {
            a: Slice::new(0, 0, 0),
            b: Slice::new(0, 0, 0),
            c: Slice::new(0, 0, 0),
            m: g.m,
            n: g.n,
            k: g.k,
            lda: 0,
            ldb: 0,
            ldc: 0,
            trans_a: g.trans.0,
            trans_b: g.trans.1,
            alpha: g.alpha,
            beta: g.beta,
            dtype: g.dtype,
            batch: g.batch,
            stride_a: 0,
            stride_b: 0,
            stride_c: 0,
        };
        let es = g.dtype.size() as u64;
        // Elements one matrix touches, and the whole batch, for (rows, cols, ld, stride).
        let layout = |(rows, cols): (u64, u64), ld_extra: u64, stride_extra: u64| {
            let ld = cols.max(1) + ld_extra;
            let one = if rows == 0 || cols == 0 {
                0
            } else {
                (rows - 1) * ld + cols
            };
            let stride = one + stride_extra;
            let bytes = if one == 0 {
                0
            } else {
                ((g.batch - 1) * stride + one) * es
            };
            (ld, stride, bytes)
        };
        let (lda, sa, na) = layout(t.stored_a(), g.ld_extra.0, g.stride_extra.0);
        let (ldb, sb, nb) = layout(t.stored_b(), g.ld_extra.1, g.stride_extra.1);
        let (ldc, sc, nc) = layout((g.m, g.n), g.ld_extra.2, g.stride_extra.2);
        (t.lda, t.ldb, t.ldc) = (lda, ldb, ldc);
        (t.stride_a, t.stride_b, t.stride_c) = (sa, sb, sc);

        let (pa, pb, pc, xa, xb, xc) = g.place;
        // The first allocation, from a random start, that satisfies `ok` and holds `need` bytes.
        let find = |start: u32, need: u64, ok: &dyn Fn(u32) -> bool| -> u32 {
            let n = self.allocs.len() as u32;
            (0..n)
                .map(|i| (start % n + i) % n)
                .find(|&a| ok(a) && self.size(a) >= need)
                .unwrap()
        };
        let place = |alloc: u32, need: u64, x: u64| {
            let room = (self.size(alloc) - need) / es;
            Slice::new(alloc, (x % (room + 1)) * es, need)
        };
        let c_alloc = find(pc, nc, &|a| self.writable.contains(&a));
        t.c = place(c_alloc, nc, xc);
        let a_alloc = find(pa, na, &|a| a != c_alloc);
        t.a = place(a_alloc, na, xa);
        let b_alloc = find(pb, nb, &|a| a != c_alloc);
        t.b = place(b_alloc, nb, xb);
        t
    }
}

fn program() -> impl Strategy<Value = Executable> {
    (
        allocations(),
        modules(),
        prop::collection::vec(raw_thunk(), 0..10),
        text(),
    )
        .prop_map(|((allocs, signature), modules, raw, name)| {
            let ctx = Ctx {
                allocs: &allocs,
                writable: allocs
                    .iter()
                    .filter(|a| !matches!(a.kind, AllocationKind::Constant(_)))
                    .map(|a| a.index)
                    .collect(),
                modules: modules
                    .iter()
                    .filter(|m| !m.images.contains(&ModuleImage::Standard))
                    .map(|m| m.name.clone())
                    .collect(),
                async_ids: RefCell::new(BTreeSet::new()),
            };
            let entry = ctx.list(&raw, false);
            Executable {
                abi_version: ABI_VERSION,
                name,
                allocations: allocs.clone(),
                modules,
                entry,
                signature,
                aliases: vec![],
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn round_trip(exe in program()) {
        prop_assert_eq!(verify(&exe), Ok(()), "generator produced an invalid program");
        let bytes = encode(&exe);

        let back = from_proto(&to_proto(&exe)).unwrap();
        prop_assert_eq!(&back, &exe);

        let back = decode(&bytes).unwrap();
        prop_assert_eq!(&back, &exe);
        prop_assert_eq!(encode(&back), bytes.clone());

        let text = to_text(&exe);
        let back = match parse_text(&text) {
            Ok(b) => b,
            Err(e) => panic!("{e}\n{text}"),
        };
        prop_assert_eq!(&back, &exe);
        prop_assert_eq!(encode(&back), bytes);
    }
}

#[test]
fn every_kind_is_generated() {
    // A smoke check of the generator: a fixed sample covers all thunk, scalar and image kinds.
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    use std::collections::BTreeSet;
    let mut runner = TestRunner::deterministic();
    let mut seen = BTreeSet::new();
    /// Records `t` and everything in it; `outer` names the kinds of the enclosing thunks.
    fn walk(t: &Thunk, outer: &[&'static str], seen: &mut BTreeSet<String>) {
        let kind = t.kind();
        seen.insert(kind.to_string());
        if let Some(parent) = outer.last() {
            seen.insert(format!("{kind} in {parent}"));
        }
        if outer.contains(&"command_buffer") {
            seen.insert(format!("{kind} under command_buffer"));
        }
        match t {
            Thunk::Kernel(k) => {
                for a in &k.args {
                    if let KernelArg::Scalar(s) = a {
                        seen.insert(format!("scalar:{}", s.dtype()));
                    }
                }
            }
            Thunk::While(WhileThunk { trip_count, .. }) => {
                seen.insert(
                    match trip_count {
                        None => "while:no_trip_count",
                        Some(n) if *n > u32::MAX as u64 => "while:huge_trip_count",
                        Some(_) => "while:trip_count",
                    }
                    .into(),
                );
            }
            Thunk::Conditional(ConditionalThunk {
                index_type,
                branches,
                ..
            }) => {
                seen.insert(format!("conditional:{index_type}"));
                if branches.len() > 2 {
                    seen.insert("conditional:3+_branches".into());
                }
            }
            Thunk::AsyncStart(AsyncStartThunk { kind, .. }) => {
                seen.insert(format!("async:{}", kind.name()));
            }
            _ => {}
        }
        let mut inner = outer.to_vec();
        inner.push(kind);
        for (_, list) in t.nested() {
            // Async scopes that are open at the same time, in this list.
            let mut open = 0;
            for c in list {
                match c {
                    Thunk::AsyncStart(AsyncStartThunk { .. }) => {
                        open += 1;
                        if open > 1 {
                            seen.insert("overlapping async scopes".into());
                        }
                    }
                    Thunk::AsyncDone(AsyncDoneThunk { .. }) => open -= 1,
                    _ => {}
                }
                walk(c, &inner, seen);
            }
        }
    }
    for _ in 0..300 {
        let exe = program().new_tree(&mut runner).unwrap().current();
        for t in &exe.entry {
            walk(t, &[], &mut seen);
        }
        for m in &exe.modules {
            for i in &m.images {
                seen.insert(format!("image:{}", i.kind()));
            }
        }
        for a in &exe.allocations {
            seen.insert(format!("alloc:{}", a.kind.name()));
            seen.insert(format!("space:{}", a.memory_space));
        }
    }
    for want in [
        "copy",
        "memset",
        "kernel",
        "gemm",
        "sequence",
        "while",
        "conditional",
        "async_start",
        "async_done",
        "command_buffer",
        "while:no_trip_count",
        "while:trip_count",
        "while:huge_trip_count",
        "conditional:i32",
        "conditional:pred",
        "conditional:3+_branches",
        "async:compute",
        "async:communication",
        "overlapping async scopes",
        // Nesting: control flow and async scopes inside each other's lists.
        "sequence in sequence",
        "while in sequence",
        "async_start in while",
        "async_done in while",
        "async_start in async_start",
        "async_start in conditional",
        "conditional in async_start",
        "while in async_start",
        "command_buffer in while",
        "command_buffer in async_start",
        // Command buffers hold only copy, memset, kernel, gemm and sequences of them.
        "copy under command_buffer",
        "memset under command_buffer",
        "kernel under command_buffer",
        "gemm under command_buffer",
        "sequence in command_buffer",
        "kernel in sequence",
        "image:standard",
        "image:source",
        "image:ptx",
        "image:cubin",
        "image:hsaco",
        "image:host",
        "alloc:parameter",
        "alloc:output",
        "alloc:temp",
        "alloc:constant",
        "space:device",
        "space:host_pinned",
        "space:unified",
        "space:collective",
    ] {
        assert!(seen.contains(want), "never generated {want}");
    }
    // Complex and the 8-bit floats have no immediates (Scalar) yet.
    for d in DType::ALL
        .into_iter()
        .filter(|d| !d.is_complex() && !d.is_f8())
    {
        assert!(
            seen.contains(&format!("scalar:{d}")),
            "never generated a {d} scalar"
        );
    }
    for kind in [
        "while",
        "conditional",
        "async_start",
        "async_done",
        "command_buffer",
    ] {
        assert!(
            !seen.contains(&format!("{kind} under command_buffer")),
            "generated a {kind} inside a command buffer"
        );
    }
}
