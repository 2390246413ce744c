//! A program with a stuck-but-alive rank, for the tests of the hang messages: every rank
//! all-reduces (`#0 entry[0]`), then rank 3 alone copies 4 MiB [`BUSY_TRIPS`] times (seconds) (a
//! conditional on the rank id) before the second all-reduce (`#1 entry[3]`), which the other
//! ranks wait in until their collective timeout.

use std::path::Path;
use xthunk::builder::*;
use xthunk::ir::*;

/// How many times rank 3 copies 4 MiB: seconds of work, longer than the tests' timeouts.
pub const BUSY_TRIPS: u64 = 30_000;

pub fn build_stuck_rank() -> Executable {
    let mut b = ExecutableBuilder::new("stuck_rank");
    let x = b.parameter("x", DType::F32, &[16]);
    let y = b.output("y", DType::F32, &[16]);
    let id = b.temp(DType::I32, &[1]);
    let big_a = b.temp(DType::F32, &[1 << 20]);
    let big_b = b.temp(DType::F32, &[1 << 20]);
    let pred = b.temp(DType::Pred, &[1]);
    let all_reduce = |src: &Tensor, dst: &Tensor| {
        Thunk::Collective(CollectiveThunk {
            op: CollectiveOp::AllReduce { op: ReduceOp::Sum },
            src: src.slice(),
            dst: dst.slice(),
            dtype: DType::F32,
            groups: vec![],
        })
    };
    b.push(all_reduce(&x, &y));
    b.push(Thunk::RankId(RankIdThunk { dst: id.slice() }));
    let busy = Thunk::While(WhileThunk {
        cond: vec![],
        pred: pred.slice(),
        // The copy into y makes the second all-reduce depend on the loop.
        body: vec![
            Thunk::Copy(CopyThunk {
                src: big_a.slice(),
                dst: big_b.slice(),
            }),
            Thunk::Copy(CopyThunk {
                src: x.slice(),
                dst: y.slice(),
            }),
        ],
        trip_count: Some(BUSY_TRIPS),
    });
    b.push(Thunk::Conditional(ConditionalThunk {
        index: id.slice(),
        index_type: DType::I32,
        branches: vec![vec![], vec![], vec![], vec![busy]],
    }));
    b.push(all_reduce(&y, &y));
    b.build().expect("the stuck-rank program is valid")
}

/// Writes the program to `dir/stuck_rank.txtpb` and returns its path.
pub fn write_stuck_rank(dir: &Path) -> std::path::PathBuf {
    let file = dir.join("stuck_rank.txtpb");
    xthunk::proto::save_file(&file, &build_stuck_rank()).expect("write the program");
    file
}

/// Checks that `text` names rank 3 as stuck after the first all-reduce and ranks 0–2 as
/// waiting in the second.
pub fn check_positions(text: &str) {
    assert!(
        text.contains("rank 3 is stuck (alive, busy) after #0 entry[0] all_reduce"),
        "{text}"
    );
    for r in 0..3 {
        assert!(
            text.contains(&format!("rank {r} waits in #1 entry[3] all_reduce")),
            "rank {r}: {text}"
        );
    }
}
