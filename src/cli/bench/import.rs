//! Benchmarks of loading StableHLO: `stablehlo_load_cold` and `stablehlo_load_warm` (import +
//! lower + kernel compile of the transformer step, the first and the later loads of the same
//! text in one process), and `stablehlo_import_scale` (import + lower of generated programs of
//! 2.5·10⁴ to 10⁵ ops, with the peak memory each takes, and of 50, 100 and 200 nested
//! `if`s).
//!
//! The host backend compiles a program's generated kernels with the machine's C++ compiler
//! (`xthunk_host::cpu`): once per process and unit (a later load of the same unit runs no
//! compiler, not even its preprocessor), and through the disk cache of compiled kernels (a
//! unit compiled by an earlier process is read back, not compiled). So that the cold load
//! compiles, its text is salted: the layer norms' epsilon moved by a few ulps, differently in
//! every run, which changes the generated kernels' source and so misses both caches.

use super::program::Prepared;
use super::report::{Row, Status};
use super::setup::{Res, Setup};
use super::stablehlo::TRANSFORMER;
use super::stats::{Goal, Spread, fmt_num};
use crate::cli::devices::human_bytes;
use std::time::Instant;
use xthunk::core::executor::ExecutorConfig;
use xthunk::core::host::cpu::{self, LoadCounts, load_counts};
use xthunk::ir::ModuleImage;

/// `row` skipped when `s` is not the host (the rows load through the host backend).
fn skipped_off_host(s: &Setup, row: &mut Row) -> bool {
    if s.is_host() {
        return false;
    }
    row.status = Status::Skipped(format!(
        "host backend only (it compiles kernels with the machine's C++ compiler), not {}",
        s.backend
    ));
    true
}

/// The layer-norm epsilon JAX prints in the transformer step.
const EPSILON: &str = "dense<9.99999974E-6> : tensor<f32>";

/// The transformer step's text (small under `--quick`) with its epsilon moved by `salt` ulps
/// (1 to 4096); `None` when the text has no such constant.
fn salted(quick: bool, salt: u32) -> Option<String> {
    let text = if quick {
        TRANSFORMER.small
    } else {
        TRANSFORMER.text
    };
    if !text.contains(EPSILON) {
        return None;
    }
    // JAX prints the f32 nearest 1e-5 as 9.99999974E-6.
    let eps = f32::from_bits(1e-5f32.to_bits() + salt % 4096 + 1);
    Some(text.replace(EPSILON, &format!("dense<{eps:e}> : tensor<f32>")))
}

/// One load's phases, in seconds, and what the kernel loads did.
struct Load {
    import: f64,
    session: f64,
    counts: LoadCounts,
    kernels: usize,
    /// The portable units of its source modules.
    units: Vec<String>,
}

impl Load {
    fn total(&self) -> f64 {
        self.import + self.session
    }
}

fn minus(a: LoadCounts, b: LoadCounts) -> LoadCounts {
    LoadCounts {
        loads: a.loads - b.loads,
        process_hits: a.process_hits - b.process_hits,
        disk_hits: a.disk_hits - b.disk_hits,
        compiles: a.compiles - b.compiles,
    }
}

fn counts_text(c: &LoadCounts) -> String {
    format!(
        "{} kernel-module loads: {} C++ compiles, {} from the disk cache, {} already loaded \
         in this process",
        c.loads, c.compiles, c.disk_hits, c.process_hits
    )
}

/// Imports, lowers and loads `text` into a session on `s`'s device (the session dropped).
fn load(s: &Setup, name: &str, text: &str) -> Res<Load> {
    let before = load_counts();
    let t0 = Instant::now();
    let exe = xthunk::program_file::program_from_mlir(text)
        .map_err(|e| xthunk::Error::InvalidArgument(format!("{name}: {e}")))?;
    let import = t0.elapsed().as_secs_f64();
    let kernels = exe.modules.len();
    let units = exe
        .modules
        .iter()
        .flat_map(|m| {
            m.images.iter().filter_map(move |i| match i {
                ModuleImage::Source { code } => Some(cpu::module_unit(m, code)),
                _ => None,
            })
        })
        .collect();
    let t1 = Instant::now();
    let p = Prepared::new(&s.dev, exe, &ExecutorConfig::default())?;
    let session = t1.elapsed().as_secs_f64();
    drop(p);
    Ok(Load {
        import,
        session,
        counts: minus(load_counts(), before),
        kernels,
        units,
    })
}

/// The rows `stablehlo_load_cold` and `stablehlo_load_warm` (the warm row `None` when the
/// cold load failed or was skipped).
pub fn stablehlo_load(s: &Setup) -> Res<(Row, Option<Row>)> {
    let mut cold = Row::new("stablehlo_load_cold", "ms", "", None);
    if skipped_off_host(s, &mut cold) {
        return Ok((cold, None));
    }
    let salt = std::process::id()
        ^ std::time::UNIX_EPOCH
            .elapsed()
            .map_or(0, |d| d.subsec_nanos());
    let Some(text) = salted(s.quick, salt) else {
        return Err(xthunk::Error::InvalidArgument(format!(
            "stablehlo_load: the transformer step has no `{EPSILON}` to salt"
        )));
    };
    let size = if s.quick {
        "--quick size"
    } else {
        "bench size"
    };
    let first = load(s, "stablehlo_load_cold", &text)?;
    cold.work = format!(
        "the first load in this process of {} ({size}, {} bytes of StableHLO text, salted so \
         no cache holds its kernels): import + lower (program_from_mlir), then \
         Session::load (kernel compile with the C++ compiler, module load, buffers)",
        TRANSFORMER.name,
        text.len()
    );
    cold.without_baseline("none (informational)".into(), &[first.total()], |v| {
        v.map(|x| x * 1e3)
    });
    cold.notes.push(format!(
        "import + lower {} ms, Session::load {} ms; {} modules; {}",
        fmt_num(first.import * 1e3),
        fmt_num(first.session * 1e3),
        first.kernels,
        counts_text(&first.counts)
    ));
    let mut warm = Row::new(
        "stablehlo_load_warm",
        "ms",
        "warm load time / cold load time",
        None,
    );
    warm.work = format!(
        "later loads of the same text in the same process (each a fresh import + lower and \
         Session::load; the previous session dropped): {} ({size})",
        TRANSFORMER.name
    );
    let n = if s.quick { 3 } else { 10 };
    let mut loads = vec![];
    for _ in 0..n {
        loads.push(load(s, "stablehlo_load_warm", &text)?);
    }
    let totals: Vec<f64> = loads.iter().map(Load::total).collect();
    warm.without_baseline(
        "none: the ratio is to the cold load (row stablehlo_load_cold)".into(),
        &totals,
        |v| v.map(|x| x * 1e3),
    );
    warm.ratio = Some(Spread::of(
        &totals.iter().map(|t| t / first.total()).collect::<Vec<_>>(),
    ));
    let sum = loads.iter().fold(LoadCounts::default(), |a, l| LoadCounts {
        loads: a.loads + l.counts.loads,
        process_hits: a.process_hits + l.counts.process_hits,
        disk_hits: a.disk_hits + l.counts.disk_hits,
        compiles: a.compiles + l.counts.compiles,
    });
    let med =
        |f: fn(&Load) -> f64| Spread::of(&loads.iter().map(f).collect::<Vec<_>>()).median * 1e3;
    warm.notes.push(format!(
        "median import + lower {} ms, Session::load {} ms; over the {n} loads: {}{}",
        fmt_num(med(|l| l.import)),
        fmt_num(med(|l| l.session)),
        counts_text(&sum),
        if sum.compiles + sum.disk_hits == 0 {
            " (a second load compiles nothing; import and lowering run again)".to_string()
        } else {
            " (a later load RECOMPILED: the in-process kernel cache missed)".to_string()
        }
    ));
    // Each run's salt makes new kernels: their disk-cache entries go, not to pile up.
    let mut removed = 0;
    for u in &first.units {
        match cpu::forget_on_disk(u) {
            Ok(there) => removed += usize::from(there),
            Err(e) => cold
                .notes
                .push(format!("the salted kernels stay in the disk cache: {e}")),
        }
    }
    cold.notes.push(format!(
        "the salted program's compiled kernels removed from the disk cache after the loads \
         ({removed} entries)"
    ));
    Ok((cold, Some(warm)))
}

/// A chain of `n` elementwise ops on a `tensor<16xf32>` (add, multiply, subtract, maximum in
/// turn, each with the parameter).
fn chain(n: usize) -> String {
    const OPS: [&str; 4] = ["add", "multiply", "subtract", "maximum"];
    let t = "tensor<16xf32>";
    let mut s = String::with_capacity(n * 56 + 256);
    s.push_str(&format!(
        "module {{\n  func.func public @main(%a: {t}) -> {t} {{\n"
    ));
    for i in 0..n {
        let prev = if i == 0 {
            "%a".to_string()
        } else {
            format!("%{}", i - 1)
        };
        s.push_str(&format!(
            "    %{i} = stablehlo.{} {prev}, %a : {t}\n",
            OPS[i % OPS.len()]
        ));
    }
    s.push_str(&format!(
        "    return %{} : {t}\n  }}\n}}\n",
        n.saturating_sub(1)
    ));
    s
}

/// `depth` `stablehlo.if`s nested in each other's true branch (2x + 1 at the bottom; every
/// false branch x - 1).
fn nested(depth: usize) -> String {
    let t = "tensor<f32>";
    let mut body = format!(
        "%c2 = stablehlo.constant dense<2.0> : {t}\n%c1 = stablehlo.constant dense<1.0> : {t}\n\
         %m = stablehlo.multiply %a, %c2 : {t}\n%s = stablehlo.add %m, %c1 : {t}\n"
    );
    let mut result = "%s".to_string();
    for level in 0..depth {
        body = format!(
            "%r{level} = \"stablehlo.if\"(%p) ({{\n{body}stablehlo.return {result} : {t}\n}}, \
             {{\n%o{level} = stablehlo.constant dense<1.0> : {t}\n\
             %d{level} = stablehlo.subtract %a, %o{level} : {t}\n\
             stablehlo.return %d{level} : {t}\n}}) : (tensor<i1>) -> {t}\n"
        );
        result = format!("%r{level}");
    }
    format!(
        "module {{\n  func.func @main(%p: tensor<i1>, %a: {t}) -> {t} {{\n{body}return {result} \
         : {t}\n  }}\n}}\n"
    )
}

/// A `/proc/self/status` field in bytes (`VmHWM`, `VmRSS`).
fn status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kib: u64 = line[field.len()..]
        .trim_start_matches(':')
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

/// Gives freed heap back to the system, then resets the peak resident size (Linux:
/// `clear_refs` 5); returns the resident size then, or `None` where that cannot be done.
fn reset_peak() -> Option<u64> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory of the allocator's arenas to the system;
    // it takes no pointers.
    unsafe {
        libc::malloc_trim(0);
    }
    std::fs::write("/proc/self/clear_refs", "5").ok()?;
    status_bytes("VmRSS")
}

/// One import + lower of `text`: its seconds, thunks in the entry, and the peak memory it
/// took above the resident size before (`None` where it cannot be measured).
fn import_once(name: &str, text: &str) -> Res<(f64, usize, Option<u64>)> {
    let before = reset_peak();
    let t0 = Instant::now();
    let exe = xthunk::program_file::program_from_mlir(text)
        .map_err(|e| xthunk::Error::InvalidArgument(format!("{name}: {e}")))?;
    let secs = t0.elapsed().as_secs_f64();
    let peak = status_bytes("VmHWM");
    let thunks = exe.entry.len();
    drop(exe);
    Ok((
        secs,
        thunks,
        before.zip(peak).map(|(b, p)| p.saturating_sub(b)),
    ))
}

/// Imports of each chain in the scale row: its time is the fastest, its peak the largest.
const REPEATS: usize = 3;
/// Imports of each nested program (milliseconds each: more of them, against the noise).
const NESTED_REPEATS: usize = 10;

/// [`import_once`] `repeats` times: the fastest time, the largest peak.
fn import_best(name: &str, text: &str, repeats: usize) -> Res<(f64, usize, Option<u64>)> {
    let (mut best, mut thunks, mut peak) = (f64::INFINITY, 0, Some(0u64));
    for _ in 0..repeats {
        let (secs, t, p) = import_once(name, text)?;
        best = best.min(secs);
        thunks = t;
        peak = peak.zip(p).map(|(a, b)| a.max(b));
    }
    Ok((best, thunks, peak))
}

/// The row `stablehlo_import_scale`.
pub fn stablehlo_import_scale(s: &Setup) -> Res<Row> {
    let mut row = Row::new(
        "stablehlo_import_scale",
        "ms",
        "peak memory per op, largest / smallest program",
        Goal::le(1.5),
    );
    let sizes: [usize; 3] = if s.quick {
        [2_500, 5_000, 10_000]
    } else {
        [25_000, 50_000, 100_000]
    };
    let mut per_size = vec![];
    for n in sizes {
        let text = chain(n);
        let (secs, thunks, peak) = import_best("stablehlo_import_scale", &text, REPEATS)?;
        per_size.push((n, text.len(), secs, thunks, peak));
    }
    let largest = sizes[sizes.len() - 1];
    row.work = format!(
        "import + lower (program_from_mlir, no kernel compile) of generated programs of {} \
         elementwise ops (a chain on a tensor<16xf32>: add, multiply, subtract, maximum in \
         turn); the value is the {} op program's time",
        sizes.map(|n| super::report::thousands(n as u64)).join(", "),
        super::report::thousands(largest as u64)
    );
    let times: Vec<f64> = per_size.iter().map(|p| p.2).collect();
    row.without_baseline(
        "none: the ratio compares the program sizes' peak memory per op".into(),
        &times[times.len() - 1..],
        |v| v.map(|x| x * 1e3),
    );
    let mut lines = vec![];
    for (n, bytes, secs, thunks, peak) in &per_size {
        lines.push(format!(
            "{n} ops ({} of text): {} ms ({} µs/op), {thunks} thunks, peak {}",
            human_bytes(*bytes as u64),
            fmt_num(secs * 1e3),
            fmt_num(secs * 1e6 / *n as f64),
            peak.map_or(
                "not measured (no /proc/self/clear_refs)".to_string(),
                |p| format!(
                    "+{} ({} B/op)",
                    human_bytes(p),
                    fmt_num(p as f64 / *n as f64)
                )
            )
        ));
    }
    row.notes.push(format!(
        "import + lower per size, fastest of {REPEATS} (peak: the largest of the {REPEATS} \
         resident high-water marks above the size before, freed heap trimmed and the mark \
         reset first): {}",
        lines.join("; ")
    ));
    let (first, last) = (&per_size[0], &per_size[per_size.len() - 1]);
    if let (Some(p0), Some(p1)) = (first.4, last.4) {
        let per = |p: u64, n: usize| p as f64 / n as f64;
        if p0 > 0 {
            row.ratio = Some(Spread::of(&[per(p1, last.0) / per(p0, first.0)]));
        }
    }
    let time_ratio = (last.2 / last.0 as f64) / (first.2 / first.0 as f64);
    row.notes.push(format!(
        "time per op, largest / smallest program: {}x (1 is linear)",
        fmt_num(time_ratio)
    ));
    let mut deep = vec![];
    for depth in [50, 100, 200] {
        let (secs, _, _) = import_best(
            "stablehlo_import_scale (nested ifs)",
            &nested(depth),
            NESTED_REPEATS,
        )?;
        deep.push((depth, secs));
    }
    row.notes.push(format!(
        "nested `stablehlo.if`s (each level in the previous one's true branch), import + \
         lower, fastest of {NESTED_REPEATS}: {} (no stack overflow: the import runs on a stack of \
         its own); twice the depth took {} the time (2 is linear, 4 quadratic)",
        deep.iter()
            .map(|(d, t)| format!("{d} levels {} ms", fmt_num(t * 1e3)))
            .collect::<Vec<_>>()
            .join(", "),
        deep.windows(2)
            .map(|w| format!(
                "{}x ({} / {} levels)",
                fmt_num(w[1].1 / w[0].1),
                w[1].0,
                w[0].0
            ))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    Ok(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn salted_or_err(quick: bool, salt: u32) -> Res<String> {
        salted(quick, salt).ok_or_else(|| xthunk::Error::InvalidArgument("no epsilon".into()))
    }

    #[test]
    fn the_salt_changes_the_epsilon_only() -> Res<()> {
        for quick in [false, true] {
            let a = salted_or_err(quick, 7)?;
            let b = salted_or_err(quick, 8)?;
            assert_ne!(a, b);
            assert!(!a.contains(EPSILON));
            let plain = if quick {
                TRANSFORMER.small
            } else {
                TRANSFORMER.text
            };
            assert_eq!(a.lines().count(), plain.lines().count());
            let changed = a.lines().zip(plain.lines()).filter(|(x, y)| x != y).count();
            assert_eq!(changed, plain.matches(EPSILON).count());
        }
        Ok(())
    }

    #[test]
    fn generated_programs_import() -> Result<(), xthunk::proto::ProtoError> {
        let exe = xthunk::program_file::program_from_mlir(&chain(300))?;
        assert_eq!(exe.signature.parameters.len(), 1);
        assert_eq!(exe.signature.outputs.len(), 1);
        // 300 fused values cut every 64: more than one kernel.
        assert!(exe.entry.len() > 1, "{}", exe.entry.len());
        let exe = xthunk::program_file::program_from_mlir(&nested(3))?;
        assert_eq!(exe.signature.parameters.len(), 2);
        Ok(())
    }

    #[test]
    fn status_fields_read_as_bytes() {
        if std::path::Path::new("/proc/self/status").exists() {
            let rss = status_bytes("VmRSS");
            assert!(rss.is_some_and(|b| b > 0 && b % 1024 == 0), "{rss:?}");
        }
    }
}
