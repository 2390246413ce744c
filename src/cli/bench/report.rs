//! What `xthunk bench` reports: one row per benchmark, the run's context (date, device), the
//! table printed at the end, and the same results as a JSON document (`xthunk-bench/1`).

use super::stats::{Goal, Spread, fmt_num};
use crate::cli::devices::human_bytes;
use crate::cli::error::{CliError, CliResult};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;
use time::OffsetDateTime;
use xthunk::core::backend::Vendor;
use xthunk::core::files::{MODE_PUBLIC, write_atomic};

/// The JSON document's format name.
const FORMAT: &str = "xthunk-bench/1";

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

    /// A row measured without a baseline: its times, labelled `n/a` with `why`.
    pub fn without_baseline(
        &mut self,
        why: String,
        times: &[f64],
        value: impl Fn(Spread) -> Spread,
    ) {
        self.baseline_label = "n/a".into();
        self.baseline_work = why;
        self.rounds = times.len();
        self.value = Some(value(Spread::of(times)));
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

/// `10,000`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `2026-05-01 12:34 UTC`.
fn date_text(t: OffsetDateTime) -> String {
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02} UTC",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute()
    )
}

/// The device a run measured, as the JSON's `device` object gives it (empty when the backend
/// was unavailable).
#[derive(Clone, Debug, Default, Serialize)]
pub struct DeviceSummary {
    pub ordinal: usize,
    pub name: String,
    pub vendor: String,
    pub arch: String,
    pub emulated: bool,
    pub total_memory: u64,
    pub compute_units: u32,
    /// `name (arch, N SMs, memory)`, with the emulated mark.
    pub label: String,
}

impl DeviceSummary {
    pub fn of(d: &xthunk::DeviceInfo) -> DeviceSummary {
        DeviceSummary {
            ordinal: d.ordinal,
            name: d.name.clone(),
            vendor: d.vendor.to_string(),
            arch: d.arch.clone(),
            emulated: d.emulated,
            total_memory: d.total_memory,
            compute_units: d.compute_units,
            label: device_label(d),
        }
    }
}

fn device_label(d: &xthunk::DeviceInfo) -> String {
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

/// Everything the report and the JSON need besides the rows.
pub struct Context {
    pub date: String,
    pub backend: String,
    pub device: DeviceSummary,
    pub cpus: usize,
    pub quick: bool,
}

impl Context {
    /// The context of a run on `device` of `backend`, dated now.
    pub fn new(backend: &str, device: DeviceSummary, quick: bool) -> Context {
        Context {
            date: date_text(OffsetDateTime::now_utc()),
            backend: backend.to_string(),
            device,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            quick,
        }
    }
}

pub fn table(ctx: &Context, rows: &[Row]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "== xthunk bench: backend {}, device {}: {} ==",
        ctx.backend, ctx.device.ordinal, ctx.device.label
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
            r.verdict(ctx.device.emulated),
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
    if ctx.device.emulated {
        let _ = writeln!(
            s,
            "EMULATED device: these are driver-emulator figures (host memory, host kernels), not \
             GPU results; sizes are reduced and no verdict is given."
        );
    }
    s
}

// --- JSON ---

/// The JSON document (`xthunk-bench/1`), fields in the order written.
#[derive(Serialize)]
struct Document<'a> {
    format: &'static str,
    xthunk_version: &'static str,
    date: &'a str,
    /// `ran` or `skipped`.
    status: &'a str,
    /// Why the backend was skipped.
    reason: Option<&'a str>,
    quick: bool,
    cpus: usize,
    backend: &'a str,
    device: &'a DeviceSummary,
    results: Vec<JsonRow<'a>>,
}

/// One row of the document's `results`.
#[derive(Serialize)]
struct JsonRow<'a> {
    name: &'a str,
    /// `ran`, `skipped` or `failed`.
    status: &'static str,
    /// Why it was skipped, or the error.
    reason: Option<&'a str>,
    work: &'a str,
    unit: &'a str,
    value: Option<Spread>,
    baseline_label: &'a str,
    baseline_work: &'a str,
    baseline: Option<Spread>,
    ratio_definition: &'a str,
    ratio: Option<Spread>,
    goal: Option<Goal>,
    verdict: String,
    rounds: usize,
    notes: &'a [String],
}

impl<'a> JsonRow<'a> {
    fn of(r: &'a Row, emulated: bool) -> JsonRow<'a> {
        let (status, reason) = match &r.status {
            Status::Ran => ("ran", None),
            Status::Skipped(w) => ("skipped", Some(w.as_str())),
            Status::Failed(e) => ("failed", Some(e.as_str())),
        };
        JsonRow {
            name: &r.name,
            status,
            reason,
            work: &r.work,
            unit: r.unit,
            value: r.value,
            baseline_label: &r.baseline_label,
            baseline_work: &r.baseline_work,
            baseline: r.baseline,
            ratio_definition: r.ratio_def,
            ratio: r.ratio,
            goal: r.goal,
            verdict: r.verdict(emulated),
            rounds: r.rounds,
            notes: &r.notes,
        }
    }
}

/// The JSON document of a run (`status` `ran`) or of a skipped backend (`skipped`, with the
/// reason and no rows). Statistics that are not finite are written as `null`.
fn json(
    ctx: &Context,
    status: &str,
    reason: Option<&str>,
    rows: &[Row],
) -> serde_json::Result<String> {
    let doc = Document {
        format: FORMAT,
        xthunk_version: env!("CARGO_PKG_VERSION"),
        date: &ctx.date,
        status,
        reason,
        quick: ctx.quick,
        cpus: ctx.cpus,
        backend: &ctx.backend,
        device: &ctx.device,
        results: rows
            .iter()
            .map(|r| JsonRow::of(r, ctx.device.emulated))
            .collect(),
    };
    let mut text = serde_json::to_string_pretty(&doc)?;
    text.push('\n');
    Ok(text)
}

/// Writes the JSON document to `path` atomically, creating its folder if needed.
pub fn write_json(
    path: &Path,
    ctx: &Context,
    status: &str,
    reason: Option<&str>,
    rows: &[Row],
) -> CliResult<()> {
    if path.file_name().is_none() {
        return Err(CliError::Usage(format!(
            "--json {}: not a file name",
            path.display()
        )));
    }
    let text = json(ctx, status, reason, rows).map_err(|e| CliError::io(path, e.into()))?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| CliError::io(dir, e))?;
    }
    write_atomic(path, text.as_bytes(), MODE_PUBLIC).map_err(|e| CliError::io(path, e))
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
    }

    #[test]
    fn dates_are_utc_to_the_minute() {
        let at = |secs: i64| OffsetDateTime::from_unix_timestamp(secs).map(date_text);
        assert_eq!(at(0).ok().as_deref(), Some("1970-01-01 00:00 UTC"));
        assert_eq!(
            at(19_723 * 86_400 + 59).ok().as_deref(),
            Some("2024-01-01 00:00 UTC")
        );
        assert_eq!(
            at(20_513 * 86_400 + 12 * 3600 + 34 * 60 + 56)
                .ok()
                .as_deref(),
            Some("2026-03-01 12:34 UTC")
        );
    }

    fn context() -> Context {
        Context {
            date: "2026-03-01 12:34 UTC".into(),
            backend: "host".into(),
            device: DeviceSummary {
                name: "cpu \"x\"\n\u{1}".into(),
                ..DeviceSummary::default()
            },
            cpus: 2,
            quick: true,
        }
    }

    #[test]
    fn json_document_keys_and_values() -> serde_json::Result<()> {
        let mut row = Row::new(
            "wide_dag",
            "ms",
            "1-stream time / 2-stream time",
            Goal::gt(1.0),
        );
        row.value = Some(Spread {
            median: 2.5,
            p25: f64::NAN,
            p75: f64::INFINITY,
        });
        row.notes.push("a \\ note".into());
        let mut failed = Row::new("copy_bandwidth", "", "", None);
        failed.status = Status::Failed("boom".into());
        let text = json(&context(), "ran", None, &[row, failed])?;
        assert!(text.ends_with("}\n"));
        let v: serde_json::Value = serde_json::from_str(&text)?;
        // Every object has exactly these keys, written in this order.
        let has_keys = |v: &serde_json::Value, from: usize, want: &[&str]| {
            let mut got: Vec<&str> = v
                .as_object()
                .map(|o| o.keys().map(String::as_str).collect())
                .unwrap_or_default();
            got.sort_unstable();
            let mut sorted = want.to_vec();
            sorted.sort_unstable();
            assert_eq!(got, sorted);
            let mut at = from;
            for k in want {
                let found = text[at..].find(&format!("\"{k}\":"));
                assert!(found.is_some(), "key `{k}` out of order");
                at += found.unwrap_or(0);
            }
        };
        has_keys(
            &v,
            0,
            &[
                "format",
                "xthunk_version",
                "date",
                "status",
                "reason",
                "quick",
                "cpus",
                "backend",
                "device",
                "results",
            ],
        );
        let device_at = text.find("\"device\":").unwrap_or(0);
        has_keys(
            &v["device"],
            device_at,
            &[
                "ordinal",
                "name",
                "vendor",
                "arch",
                "emulated",
                "total_memory",
                "compute_units",
                "label",
            ],
        );
        let results_at = text.find("\"results\":").unwrap_or(0);
        has_keys(
            &v["results"][0],
            results_at,
            &[
                "name",
                "status",
                "reason",
                "work",
                "unit",
                "value",
                "baseline_label",
                "baseline_work",
                "baseline",
                "ratio_definition",
                "ratio",
                "goal",
                "verdict",
                "rounds",
                "notes",
            ],
        );
        assert_eq!(v["format"], FORMAT);
        assert_eq!(v["reason"], serde_json::Value::Null);
        assert_eq!(v["device"]["name"], "cpu \"x\"\n\u{1}");
        let r0 = &v["results"][0];
        assert_eq!(r0["value"]["median"], 2.5);
        assert_eq!(r0["value"]["p25"], serde_json::Value::Null);
        assert_eq!(r0["value"]["p75"], serde_json::Value::Null);
        assert_eq!(r0["baseline"], serde_json::Value::Null);
        assert_eq!(r0["goal"]["op"], ">");
        assert_eq!(r0["goal"]["value"], 1.0);
        assert_eq!(r0["verdict"], "info");
        assert_eq!(r0["notes"][0], "a \\ note");
        let r1 = &v["results"][1];
        assert_eq!(
            (&r1["status"], &r1["reason"]),
            (&"failed".into(), &"boom".into())
        );
        assert_eq!(r1["goal"], serde_json::Value::Null);
        let skipped: serde_json::Value =
            serde_json::from_str(&json(&context(), "skipped", Some("no GPU"), &[])?)?;
        assert_eq!(skipped["reason"], "no GPU");
        assert_eq!(skipped["results"], serde_json::json!([]));
        Ok(())
    }

    #[test]
    fn json_file_is_written_in_a_new_folder() -> Result<(), Box<dyn std::error::Error>> {
        let dir = std::env::temp_dir().join(format!("xthunk-bench-unit-{}", std::process::id()));
        let path = dir.join("sub/out.json");
        write_json(&path, &context(), "skipped", Some("why"), &[])?;
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path)?)?;
        std::fs::remove_dir_all(&dir)?;
        assert_eq!(v["status"], "skipped");
        assert!(write_json(Path::new("/"), &context(), "ran", None, &[]).is_err());
        Ok(())
    }
}
