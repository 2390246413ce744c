//! How busy the machine was while a benchmark ran (core's CPU time snapshot, as a note).

use xthunk::core::bench::CpuSnapshot;

/// The load since `before` on `cpus` CPUs: `machine load meanwhile: this process 48%, other
/// processes 52% of 2 CPUs`; `None` when too short to say (the counters tick every 10 ms per
/// CPU) or unreadable.
pub fn note_since(before: &CpuSnapshot, cpus: usize) -> Option<String> {
    let used = before.since()?;
    if used.ticks < 20 {
        return None;
    }
    Some(format!(
        "machine load meanwhile: this process {:.0}%, other processes {:.0}% of {cpus} CPUs",
        100.0 * used.own.min(1.0),
        100.0 * used.others.min(1.0),
    ))
}
