//! What `xthunk bench` reports: one row per benchmark, the run's context (date, device), the
//! table printed at the end, and the same results as a JSON document (`xthunk-bench/1`).

use super::stats::Goal;
use super::stats::Spread;
use crate::cli::devices::human_bytes;
use crate::cli::error::{CliError, CliResult};
use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};
use xthunk::core::backend::Vendor;

#[derive(Clone, Debug, PartialEq)]
pub enum Status {
    Ran,
    Skipped(String),
    Failed(String),
}

/// One line of the table.
#[derive(Clone, Debug)]
pub struct Row {
    pub name: String,
    /// What xthunk runs.
    pub work: String,
    pub unit: &'static str,
    pub value: Option<Spread>,
    /// What the baseline is (short, for the table).
    pub baseline_label: String,
    /// What the baseline does (for the notes).
    pub baseline_work: String,
    pub baseline: Option<Spread>,
    pub ratio: Option<Spread>,
    /// How the ratio is formed.
    pub ratio_def: &'static str,
    pub goal: Option<Goal>,
    pub rounds: usize,
    pub status: Status,
    pub notes: Vec<String>,
}

impl Row {
    pub fn new(name: &str, unit: &'static str, ratio_def: &'static str, goal: Option<Goal>) -> Row {
        Row {
            name: name.into(),
            work: String::new(),
            unit,
            value: None,
            baseline_label: String::new(),
            baseline_work: String::new(),
            baseline: None,
            ratio: None,
            ratio_def,
            goal,
            rounds: 0,
            status: Status::Ran,
            notes: vec![],
        }
    }

    pub fn verdict(&self, emulated: bool) -> String {
        match &self.status {
            Status::Skipped(_) => "skipped".into(),
            Status::Failed(_) => "ERROR".into(),
            Status::Ran => match (self.ratio, self.goal) {
                (Some(r), Some(g)) if r.median.is_finite() => {
                    if emulated {
                        "emulated".into()
                    } else if g.met(r.median) {
                        "ok".into()
                    } else {
                        "MISSED".into()
                    }
                }
                _ => "info".into(),
            },
        }
    }
}

/// `98.2`, `1.23`, `0.0456`, `12345`: about three significant digits.
pub fn fmt_num(v: f64) -> String {
    let a = v.abs();
    if !v.is_finite() {
        "n/a".into()
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else if a >= 0.01 {
        format!("{v:.3}")
    } else if a == 0.0 {
        "0".into()
    } else {
        format!("{v:.2e}")
    }
}

/// `10,000`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Days since 1970-01-01 as a civil date (UTC).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// `2026-05-01 12:34 UTC`.
pub fn utc_now() -> String {
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let (y, m, d) = civil(t.div_euclid(86_400));
    let s = t.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        s / 3600,
        (s / 60) % 60
    )
}

/// Everything the report and the JSON need besides the rows.
pub struct Context {
    pub date: String,
    pub backend: String,
    pub device_label: String,
    pub ordinal: usize,
    pub name: String,
    pub arch: String,
    pub vendor: String,
    pub emulated: bool,
    pub total_memory: u64,
    pub compute_units: u32,
    pub cpus: usize,
    pub quick: bool,
}

pub fn device_label(d: &xthunk::DeviceInfo) -> String {
    let units = match d.vendor {
        Vendor::Host => "CPUs",
        Vendor::Nvidia => "SMs",
        Vendor::Amd => "CUs",
    };
    let mut s = format!(
        "{} ({}, {} {units}, {})",
        d.name,
        d.arch,
        d.compute_units,
        human_bytes(d.total_memory)
    );
    if d.emulated {
        s.push_str(" [EMULATED device, not a GPU result]");
    }
    s
}

pub fn table(ctx: &Context, rows: &[Row]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "== xthunk bench: backend {}, device {}: {} ==",
        ctx.backend, ctx.ordinal, ctx.device_label
    );
    let _ = writeln!(
        s,
        "{}; xthunk {}; {} CPUs on this machine; {}; medians of interleaved rounds, ratio \
         spread = 25th-75th percentile of the per-round ratios",
        ctx.date,
        env!("CARGO_PKG_VERSION"),
        ctx.cpus,
        if ctx.quick { "--quick" } else { "full run" }
    );
    let header = [
        "benchmark",
        "xthunk",
        "baseline",
        "ratio (spread)",
        "goal",
        "verdict",
    ];
    let mut lines: Vec<[String; 6]> = vec![header.map(String::from)];
    for r in rows {
        let with_unit = |v: Option<Spread>| match v {
            Some(v) => format!("{} {}", fmt_num(v.median), r.unit),
            None => "-".into(),
        };
        let (value, baseline, ratio) = match &r.status {
            Status::Ran => (
                with_unit(r.value),
                match r.baseline {
                    Some(_) => format!("{} ({})", with_unit(r.baseline), r.baseline_label),
                    None => format!("- ({})", r.baseline_label),
                },
                match r.ratio {
                    Some(q) => format!(
                        "{}x ({}-{})",
                        fmt_num(q.median),
                        fmt_num(q.p25),
                        fmt_num(q.p75)
                    ),
                    None => "-".into(),
                },
            ),
            Status::Skipped(why) => (format!("skipped: {why}"), String::new(), String::new()),
            Status::Failed(e) => (format!("ERROR: {e}"), String::new(), String::new()),
        };
        lines.push([
            r.name.clone(),
            value,
            baseline,
            ratio,
            r.goal.map_or("-".into(), |g| g.text()),
            r.verdict(ctx.emulated),
        ]);
    }
    let mut widths = [0usize; 6];
    for l in &lines {
        for (w, c) in widths.iter_mut().zip(l) {
            // Long messages (skips, errors) do not widen the columns.
            if c.chars().count() <= 48 {
                *w = (*w).max(c.chars().count());
            }
        }
    }
    for l in &lines {
        let mut line = String::new();
        for (i, (w, c)) in widths.iter().zip(l).enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            let _ = write!(line, "{c:<w$}");
        }
        let _ = writeln!(s, "{}", line.trim_end());
    }
    let _ = writeln!(s, "what each row measures:");
    for r in rows.iter().filter(|r| r.status == Status::Ran) {
        let _ = writeln!(s, "  {}: {}", r.name, r.work);
        let _ = writeln!(s, "    baseline: {}", r.baseline_work);
        if r.ratio.is_some() {
            let _ = writeln!(
                s,
                "    ratio: {}, per round; {} rounds",
                r.ratio_def, r.rounds
            );
        } else {
            let _ = writeln!(s, "    ratio: none (no baseline); {} rounds", r.rounds);
        }
        for n in &r.notes {
            let _ = writeln!(s, "    {n}");
        }
    }
    if ctx.emulated {
        let _ = writeln!(
            s,
            "EMULATED device: these are driver-emulator figures (host memory, host kernels), not \
             GPU results; sizes are reduced and no verdict is given."
        );
    }
    s
}

// --- JSON (written by hand: the values are numbers and plain strings) ---

fn jstr(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn jnum(v: f64) -> String {
    if v.is_finite() {
        format!("{v}")
    } else {
        "null".into()
    }
}

fn jspread(v: Option<Spread>) -> String {
    match v {
        Some(v) => format!(
            "{{\"median\": {}, \"p25\": {}, \"p75\": {}}}",
            jnum(v.median),
            jnum(v.p25),
            jnum(v.p75)
        ),
        None => "null".into(),
    }
}

pub fn json(ctx: &Context, status: &str, reason: Option<&str>, rows: &[Row]) -> String {
    let mut s = String::new();
    s.push_str("{\n");
    let _ = writeln!(s, "  \"format\": \"xthunk-bench/1\",");
    let _ = writeln!(
        s,
        "  \"xthunk_version\": {},",
        jstr(env!("CARGO_PKG_VERSION"))
    );
    let _ = writeln!(s, "  \"date\": {},", jstr(&ctx.date));
    let _ = writeln!(s, "  \"status\": {},", jstr(status));
    let _ = writeln!(s, "  \"reason\": {},", reason.map_or("null".into(), jstr));
    let _ = writeln!(s, "  \"quick\": {},", ctx.quick);
    let _ = writeln!(s, "  \"cpus\": {},", ctx.cpus);
    let _ = writeln!(s, "  \"backend\": {},", jstr(&ctx.backend));
    let _ = writeln!(
        s,
        "  \"device\": {{\"ordinal\": {}, \"name\": {}, \"vendor\": {}, \"arch\": {}, \
         \"emulated\": {}, \"total_memory\": {}, \"compute_units\": {}, \"label\": {}}},",
        ctx.ordinal,
        jstr(&ctx.name),
        jstr(&ctx.vendor),
        jstr(&ctx.arch),
        ctx.emulated,
        ctx.total_memory,
        ctx.compute_units,
        jstr(&ctx.device_label)
    );
    s.push_str("  \"results\": [");
    for (i, r) in rows.iter().enumerate() {
        let (st, why) = match &r.status {
            Status::Ran => ("ran", None),
            Status::Skipped(w) => ("skipped", Some(w.as_str())),
            Status::Failed(e) => ("failed", Some(e.as_str())),
        };
        let goal = match r.goal {
            Some(g) => format!("{{\"op\": {}, \"value\": {}}}", jstr(g.op()), jnum(g.value)),
            None => "null".into(),
        };
        let notes: Vec<String> = r.notes.iter().map(|n| jstr(n)).collect();
        let _ = write!(
            s,
            "{}\n    {{\"name\": {}, \"status\": {}, \"reason\": {}, \"work\": {}, \
             \"unit\": {}, \"value\": {}, \"baseline_label\": {}, \"baseline_work\": {}, \
             \"baseline\": {}, \"ratio_definition\": {}, \"ratio\": {}, \"goal\": {}, \
             \"verdict\": {}, \"rounds\": {}, \"notes\": [{}]}}",
            if i > 0 { "," } else { "" },
            jstr(&r.name),
            jstr(st),
            why.map_or("null".into(), jstr),
            jstr(&r.work),
            jstr(r.unit),
            jspread(r.value),
            jstr(&r.baseline_label),
            jstr(&r.baseline_work),
            jspread(r.baseline),
            jstr(r.ratio_def),
            jspread(r.ratio),
            goal,
            jstr(&r.verdict(ctx.emulated)),
            r.rounds,
            notes.join(", ")
        );
    }
    s.push_str("\n  ]\n}\n");
    s
}

/// Writes `text` to `path` through a temporary file in the same folder and a rename.
pub fn write_atomically(path: &Path, text: &str) -> CliResult<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).map_err(|e| CliError::io(&dir, e))?;
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| CliError::Usage(format!("--json {}: not a file name", path.display())))?;
    let tmp = dir.join(format!(".{file_name}.tmp-{}", std::process::id()));
    let result = (|| -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(CliError::io(path, e));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formatting() {
        assert_eq!(fmt_num(1234.4), "1234");
        assert_eq!(fmt_num(12.345), "12.3");
        assert_eq!(fmt_num(1.2345), "1.23");
        assert_eq!(fmt_num(0.012345), "0.012");
        assert_eq!(fmt_num(f64::NAN), "n/a");
        assert_eq!(thousands(10_000), "10,000");
        assert_eq!(thousands(999), "999");
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(19_723), (2024, 1, 1));
        assert_eq!(civil(20_513), (2026, 3, 1));
        assert_eq!(jstr("a\"b\\c\nd\u{1}"), "\"a\\\"b\\\\c\\nd\\u0001\"");
        assert_eq!(jnum(f64::INFINITY), "null");
    }
}
