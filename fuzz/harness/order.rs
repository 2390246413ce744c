//! Structure-aware mutations of thunk order and nesting, and of the allocation list: thunks
//! deleted, duplicated, swapped, moved into another list (a loop body, a command buffer, an
//! async scope), wrapped in control flow (deeply, too), unwrapped, grafted from another
//! program, or freshly made; allocations removed, duplicated, reordered, added.

use super::rng::Rng;
use xthunk_core::ir::{
    AllocationKind, AsyncDoneThunk, AsyncKind, AsyncStartThunk, BufferAllocation,
    CommandBufferThunk, ConditionalThunk, CopyThunk, DType, Dim3, Executable, KernelArg,
    KernelThunk, MemorySpace, MemsetPattern, MemsetThunk, RankIdThunk, Scalar, Slice, Thunk,
    WhileThunk,
};

/// The thunk lists nested directly in `t`.
pub fn nested_mut(t: &mut Thunk) -> Vec<&mut Vec<Thunk>> {
    match t {
        Thunk::Sequence(v) => vec![v],
        Thunk::While(WhileThunk { cond, body, .. }) => vec![cond, body],
        Thunk::Conditional(ConditionalThunk { branches, .. }) => branches.iter_mut().collect(),
        Thunk::AsyncStart(AsyncStartThunk { body, .. })
        | Thunk::CommandBuffer(CommandBufferThunk { body }) => vec![body],
        _ => vec![],
    }
}

/// Calls `f` with every thunk list (the entry first, then depth first).
pub fn visit_lists(list: &mut Vec<Thunk>, f: &mut dyn FnMut(&mut Vec<Thunk>)) {
    f(list);
    for t in list.iter_mut() {
        for inner in nested_mut(t) {
            visit_lists(inner, f);
        }
    }
}

fn count_lists(exe: &mut Executable) -> usize {
    let mut n = 0;
    visit_lists(&mut exe.entry, &mut |_| n += 1);
    n
}

/// Runs `f` on the `target`-th list.
fn with_list(exe: &mut Executable, target: usize, f: &mut dyn FnMut(&mut Vec<Thunk>)) {
    let mut i = 0;
    visit_lists(&mut exe.entry, &mut |l| {
        if i == target {
            f(l);
        }
        i += 1;
    });
}

/// Every thunk of a program, cloned (for grafts), at most `limit`.
pub fn all_thunks(exe: &Executable, limit: usize) -> Vec<Thunk> {
    let mut out = Vec::new();
    let mut stack: Vec<&Thunk> = exe.entry.iter().collect();
    while let Some(t) = stack.pop() {
        if out.len() >= limit {
            break;
        }
        out.push(t.clone());
        for (_, l) in t.nested() {
            stack.extend(l.iter());
        }
    }
    out
}

fn max_async_id(exe: &Executable) -> u32 {
    all_thunks(exe, 4096)
        .iter()
        .filter_map(|t| match t {
            Thunk::AsyncStart(AsyncStartThunk { id, .. })
            | Thunk::AsyncDone(AsyncDoneThunk { id }) => Some(*id),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

/// A plausible new thunk over the program's allocations.
fn fresh_thunk(rng: &mut Rng, exe: &Executable) -> Thunk {
    let pick = |rng: &mut Rng| -> (u32, u64) {
        rng.index(exe.allocations.len())
            .map(|i| (i as u32, exe.allocations[i].size))
            .unwrap_or((0, 4))
    };
    let (a, size) = pick(rng);
    let (b, size_b) = pick(rng);
    match rng.below(6) {
        0 => Thunk::Memset(MemsetThunk {
            dst: Slice::new(a, 0, size),
            pattern: MemsetPattern::U8(rng.byte()),
        }),
        1 => {
            let n = size.min(size_b);
            Thunk::Copy(CopyThunk {
                src: Slice::new(a, 0, n),
                dst: Slice::new(b, 0, n),
            })
        }
        2 => Thunk::RankId(RankIdThunk {
            dst: Slice::new(a, 0, 4),
        }),
        3 => Thunk::Kernel(KernelThunk {
            module: exe
                .modules
                .first()
                .map(|m| m.name.clone())
                .unwrap_or_default(),
            name: "fill_f32".into(),
            grid: Dim3::x(1),
            block: Dim3::x(32),
            shared_mem: 0,
            args: vec![
                KernelArg::Buffer {
                    slice: Slice::new(a, 0, size / 4 * 4),
                    access: xthunk_core::ir::Access::Write,
                },
                KernelArg::Scalar(Scalar::F32(1.5)),
                KernelArg::Scalar(Scalar::I64((size / 4) as i64)),
            ],
        }),
        4 => Thunk::Memset(MemsetThunk {
            dst: Slice::new(a, 0, size / 4 * 4),
            pattern: MemsetPattern::U32(rng.next_u64() as u32),
        }),
        _ => Thunk::Memset(MemsetThunk {
            dst: Slice::new(a, 0, size / 2 * 2),
            pattern: MemsetPattern::U16(rng.next_u64() as u16),
        }),
    }
}

/// `t` wrapped in a control-flow thunk.
fn wrap(rng: &mut Rng, t: Thunk, exe: &Executable) -> Vec<Thunk> {
    let one = exe
        .allocations
        .iter()
        .position(|a| a.size >= 4 && !matches!(a.kind, AllocationKind::Constant(_)))
        .unwrap_or(0) as u32;
    match rng.below(6) {
        0 => vec![Thunk::Sequence(vec![t])],
        1 => vec![Thunk::CommandBuffer(CommandBufferThunk { body: vec![t] })],
        2 => vec![Thunk::While(WhileThunk {
            cond: vec![],
            pred: Slice::new(one, 0, 1),
            body: vec![t],
            trip_count: Some(rng.range(0, 3) as u64),
        })],
        3 => vec![Thunk::Conditional(ConditionalThunk {
            index: Slice::new(one, 0, if rng.chance(1, 2) { 1 } else { 4 }),
            index_type: if rng.chance(1, 2) {
                DType::Pred
            } else {
                DType::I32
            },
            branches: vec![vec![t], vec![]],
        })],
        4 => {
            let id = max_async_id(exe).wrapping_add(1);
            vec![
                Thunk::AsyncStart(AsyncStartThunk {
                    id,
                    kind: if rng.chance(1, 2) {
                        AsyncKind::Compute
                    } else {
                        AsyncKind::Communication
                    },
                    body: vec![t],
                }),
                Thunk::AsyncDone(AsyncDoneThunk { id }),
            ]
        }
        _ => {
            // Deep nesting: around the decoders' depth limits.
            let mut t = t;
            for _ in 0..rng.range(8, 60) {
                t = Thunk::Sequence(vec![t]);
            }
            vec![t]
        }
    }
}

/// Applies one order, nesting or allocation-list mutation; `donor` supplies grafts.
pub fn mutate_order(rng: &mut Rng, exe: &mut Executable, donor: &Executable) {
    if rng.chance(1, 6) {
        mutate_allocations(rng, exe);
        return;
    }
    let lists = count_lists(exe);
    let target = rng.below(lists);
    let snapshot = exe.clone();
    let op = rng.below(10);
    if op == 9 {
        // Move a thunk from one list to another.
        let mut taken = None;
        with_list(exe, target, &mut |l| {
            if let Some(i) = rng.index(l.len()) {
                taken = Some(l.remove(i));
            }
        });
        if let Some(t) = taken {
            let lists = count_lists(exe);
            let to = rng.below(lists);
            with_list(exe, to, &mut |l| {
                let at = rng.below(l.len() + 1);
                l.insert(at, t.clone());
            });
        }
        return;
    }
    let grafts = all_thunks(donor, 512);
    with_list(exe, target, &mut |l| {
        let len = l.len();
        match op {
            0 => {
                if let Some(i) = rng.index(len) {
                    l.remove(i);
                }
            }
            1 => {
                if let Some(i) = rng.index(len) {
                    let t = l[i].clone();
                    l.insert(i, t);
                }
            }
            2 => {
                if let (Some(i), Some(j)) = (rng.index(len), rng.index(len)) {
                    l.swap(i, j);
                }
            }
            3 => {
                if rng.chance(1, 2) {
                    l.reverse();
                } else if len > 0 {
                    l.rotate_left(rng.below(len));
                }
            }
            4 => {
                if let Some(i) = rng.index(len) {
                    let t = l.remove(i);
                    for (k, w) in wrap(rng, t, &snapshot).into_iter().enumerate() {
                        l.insert(i + k, w);
                    }
                }
            }
            5 => {
                // Unwrap: a control-flow thunk replaced by one of its lists.
                if let Some(i) = rng.index(len) {
                    let mut t = l[i].clone();
                    let inner: Vec<Vec<Thunk>> =
                        nested_mut(&mut t).into_iter().map(|v| v.clone()).collect();
                    if let Some(body) = rng.pick(&inner).cloned() {
                        l.splice(i..=i, body);
                    }
                }
            }
            6 | 7 => {
                if let Some(g) = rng.pick(&grafts) {
                    let at = rng.below(len + 1);
                    l.insert(at, g.clone());
                }
            }
            _ => {
                let at = rng.below(len + 1);
                l.insert(at, fresh_thunk(rng, &snapshot));
            }
        }
    });
}

fn mutate_allocations(rng: &mut Rng, exe: &mut Executable) {
    let a = &mut exe.allocations;
    let len = a.len();
    match rng.below(4) {
        0 => {
            if let Some(i) = rng.index(len) {
                a.remove(i);
            }
        }
        1 => {
            if let Some(i) = rng.index(len) {
                let c = a[i].clone();
                a.insert(i, c);
            }
        }
        2 => {
            if let (Some(i), Some(j)) = (rng.index(len), rng.index(len)) {
                a.swap(i, j);
            }
        }
        _ => a.push(BufferAllocation {
            index: len as u32,
            size: rng.small() as u64,
            alignment: 1 << rng.below(13),
            kind: AllocationKind::Temp,
            memory_space: *rng.pick(&MemorySpace::ALL).unwrap_or(&MemorySpace::Device),
        }),
    }
    if rng.chance(1, 2) {
        for (i, a) in a.iter_mut().enumerate() {
            a.index = i as u32;
        }
    }
}
