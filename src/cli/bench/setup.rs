//! What every benchmark is given and how each one runs: the device and its raw baseline
//! ([`Setup`]), rounds and budgets, and [`one`], which runs a benchmark into a row (an error
//! becomes a failed row) with progress and the machine-load note.

use super::load;
use super::report::{Row, Status};
use super::stats::Rounds;
use crate::cli::error::one_line;
use std::sync::Arc;
use std::time::{Duration, Instant};
use xthunk::Device;
use xthunk::core::backend::Vendor;
use xthunk::core::backend::baseline::RawBaseline;

pub(super) type Res<T> = xthunk::Result<T>;

/// The device, its raw baseline, and the problem sizes and goals for it.
pub(super) struct Setup {
    pub(super) dev: Arc<dyn Device>,
    pub(super) backend: &'static str,
    /// The device's raw vendor baselines, if its backend provides them.
    pub(super) baseline: Option<Arc<dyn RawBaseline>>,
    /// A real GPU (not the host, not an emulated device).
    pub(super) gpu: bool,
    pub(super) emulated: bool,
    pub(super) quick: bool,
    /// `--python`: the Python of the StableHLO rows' XLA:CPU baseline and of the numpy one.
    pub(super) python: Option<std::path::PathBuf>,
}

impl Setup {
    pub(super) fn is_host(&self) -> bool {
        self.dev.info().vendor == Vendor::Host
    }
    pub(super) fn rounds(&self, full: usize, quick: usize, budget_s: u64) -> Rounds {
        Rounds {
            rounds: if self.quick { quick } else { full },
            budget: Duration::from_secs(if self.quick {
                budget_s.div_ceil(3)
            } else {
                budget_s
            }),
        }
    }
    /// Whether `bytes` more can be allocated comfortably (half the device's memory at most).
    pub(super) fn fits(&self, bytes: u64) -> bool {
        let total = self.dev.info().total_memory;
        total == 0 || bytes <= total / 2
    }
    pub(super) fn no_baseline(&self) -> String {
        format!(
            "no raw baseline for the {} backend in this build",
            self.backend
        )
    }
}

pub(super) fn selected(name: &str, filter: Option<&str>) -> bool {
    filter.is_none_or(|f| name.contains(f))
}

/// The bar of the benchmarks selected (drawn only on a terminal; else the lines below).
pub(super) static BAR: std::sync::OnceLock<indicatif::ProgressBar> = std::sync::OnceLock::new();

fn progress(name: &str) {
    match BAR.get().filter(|b| !b.is_hidden()) {
        Some(b) => {
            b.set_message(name.to_string());
            b.inc(1);
        }
        None => eprintln!("xthunk bench: running {name} ..."),
    }
}

/// Runs one benchmark, turning an error into a failed row.
pub(super) fn one(
    name: &str,
    filter: Option<&str>,
    f: impl FnOnce() -> Res<Row>,
    rows: &mut Vec<Row>,
) {
    if !selected(name, filter) {
        return;
    }
    progress(name);
    let start = Instant::now();
    let load = xthunk::core::bench::CpuSnapshot::take();
    let mut row = f().unwrap_or_else(|e| {
        let mut r = Row::new(name, "", "", None);
        r.status = Status::Failed(one_line(&e));
        r
    });
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if let Some(note) = load.and_then(|l| load::note_since(&l, cpus)) {
        row.notes.push(note);
    }
    eprintln!(
        "xthunk bench:   {name}: {} ({:.1} s)",
        match &row.status {
            Status::Ran => format!("{} rounds", row.rounds),
            Status::Skipped(r) => format!("skipped: {r}"),
            Status::Failed(e) => format!("ERROR: {e}"),
        },
        start.elapsed().as_secs_f64()
    );
    rows.push(row);
}
