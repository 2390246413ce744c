//! The resource bounds of a program the host target executes: a few MiB of allocations, a
//! bounded number of thunks, and a bounded amount of work (thunk executions, bytes touched and
//! gemm multiply-adds, multiplied by the trip counts of the enclosing loops). Programs outside them
//! are skipped, not run: they belong to the decode target, where nothing is allocated.

use xthunk_core::ir::{Executable, Thunk, WhileThunk};

/// Largest allocation the host target runs.
pub const MAX_ALLOCATION: u64 = 4 << 20;
/// Largest total of all allocations.
pub const MAX_TOTAL: u64 = 8 << 20;
/// Most thunks (nested ones included).
pub const MAX_THUNKS: usize = 1024;
/// Most bytes touched, counting loop trips.
pub const MAX_BYTES_TOUCHED: u64 = 256 << 20;
/// Most gemm multiply-adds, counting loop trips (the gemm crate is slow in debug builds).
pub const MAX_GEMM_FMAS: u64 = 1 << 24;
/// Most thunk executions, counting loop trips (a loop with an empty body still runs its
/// trips: 2^40 of them do not stop at the deadline, a known open case of issue 18 with a
/// regression test, `regression_trip_count_loop_meets_deadline`).
pub const MAX_STEPS: u64 = 100_000;

#[derive(Default)]
struct Work {
    bytes: u64,
    fmas: u64,
    steps: u64,
}

/// `Ok` when `exe` fits the bounds, else why not.
pub fn check(exe: &Executable) -> Result<(), String> {
    let mut total = 0u64;
    for a in &exe.allocations {
        if a.size > MAX_ALLOCATION {
            return Err(format!("allocation {} has {} bytes", a.index, a.size));
        }
        total = total.saturating_add(a.size);
    }
    if total > MAX_TOTAL {
        return Err(format!("{total} bytes of allocations"));
    }
    if exe.thunk_count() > MAX_THUNKS {
        return Err(format!("{} thunks", exe.thunk_count()));
    }
    let mut work = Work::default();
    list(&exe.entry, 1, &mut work);
    if work.bytes > MAX_BYTES_TOUCHED {
        return Err(format!("{} bytes touched", work.bytes));
    }
    if work.fmas > MAX_GEMM_FMAS {
        return Err(format!("{} gemm multiply-adds", work.fmas));
    }
    if work.steps > MAX_STEPS {
        return Err(format!("{} thunk executions", work.steps));
    }
    Ok(())
}

fn list(thunks: &[Thunk], trips: u64, work: &mut Work) {
    for t in thunks {
        work.steps = work.steps.saturating_add(trips);
        let touched: u64 = t
            .buffer_uses()
            .iter()
            .fold(0u64, |a, u| a.saturating_add(u.slice.size));
        work.bytes = work.bytes.saturating_add(touched.saturating_mul(trips));
        if let Thunk::Gemm(g) = t {
            let fmas = [g.m, g.n, g.k, g.batch]
                .iter()
                .fold(1u64, |a, v| a.saturating_mul(*v));
            work.fmas = work.fmas.saturating_add(fmas.saturating_mul(trips));
        }
        // A loop without a trip count runs until its predicate is false or the deadline
        // passes; it counts as 16 trips here.
        let inner = match t {
            Thunk::While(WhileThunk { trip_count, .. }) => {
                let n = trips.saturating_mul(trip_count.unwrap_or(16).max(1));
                // Every trip is a step, even of an empty body.
                work.steps = work.steps.saturating_add(n);
                n
            }
            _ => trips,
        };
        for (_, l) in t.nested() {
            list(l, inner, work);
        }
    }
}
