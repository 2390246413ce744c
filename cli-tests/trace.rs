//! `xthunk run --trace`: the examples traced on the host (one device and 4-rank SPMD, with and
//! without device times) and on emulated CUDA (device times from the emulator's events); each
//! file is parsed and checked: every top-level thunk has one slice per execution on its
//! stream's track, slices on one track do not overlap, lie inside their execution and, for
//! collectives of an SPMD run with device times, overlap across ranks (one clock); every
//! cross-stream wait is a flow between the two slices; collective slices carry bytes and peers.
//! Also `xthunk profile` (its per-thunk times against the step time), `trace-merge` and
//! `--log-format json`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "common/emulator.rs"]
mod emulator;
use emulator::{emulated_command, emulator_lib};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("xthunk-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Runs `xthunk ARGS` (through ci/with-emulator.sh with `emulated` devices) and returns stdout.
fn xthunk(emulated: Option<u32>, args: &[&str]) -> String {
    let bin = env!("CARGO_BIN_EXE_xthunk");
    let mut cmd = match emulated {
        Some(devices) => {
            let mut c = emulated_command(bin);
            c.env("XTHUNK_EMU_DEVICES", devices.to_string());
            c
        }
        None => Command::new(bin),
    };
    let o = cmd.args(args).current_dir(root()).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "xthunk {args:?} failed:\n{out}\n{err}");
    out
}

const COLLECTIVES: [&str; 8] = [
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "broadcast",
    "collective_permute",
    "send",
    "recv",
];

/// Rounding of µs values written with ns precision.
const TOL: f64 = 0.002;

struct Slice<'a> {
    ts: f64,
    end: f64,
    v: &'a Value,
}

fn slice(v: &Value) -> Slice<'_> {
    let ts = v["ts"].as_f64().unwrap();
    Slice {
        ts,
        end: ts + v["dur"].as_f64().unwrap(),
        v,
    }
}

/// Checks a trace of `iterations` executions on `ranks` ranks; returns the number of
/// cross-stream flows and of cross-rank collective overlaps it checked.
fn check_trace(path: &Path, iterations: u64, ranks: u64, device_times: bool) -> (usize, usize) {
    let doc: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let of = |ph: &'static str| events.iter().filter(move |e| e["ph"] == ph);
    // Every rank has its execution slices.
    let executions: Vec<Slice> = of("X")
        .filter(|e| e["cat"] == "execution")
        .map(slice)
        .collect();
    let pids: BTreeSet<u64> = executions
        .iter()
        .map(|s| s.v["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(pids, (0..ranks).collect(), "ranks with executions");
    assert_eq!(executions.len() as u64, iterations * ranks);
    let stream: Vec<Slice> = of("X")
        .filter(|e| e["tid"].as_u64().unwrap() >= 1)
        .map(slice)
        .collect();
    assert!(!stream.is_empty());
    // One slice per thunk per execution, on the track of its stream.
    let mut per: BTreeMap<(u64, String), BTreeSet<u64>> = BTreeMap::new();
    for s in &stream {
        let a = &s.v["args"];
        let pid = s.v["pid"].as_u64().unwrap();
        assert_eq!(
            s.v["tid"].as_u64().unwrap(),
            1 + a["stream"].as_u64().unwrap(),
            "{}",
            s.v
        );
        let key = (pid, a["path"].as_str().unwrap().to_string());
        let exec = a["execution"].as_u64().unwrap();
        assert!(
            per.entry(key).or_default().insert(exec),
            "two slices: {}",
            s.v
        );
        let want = if device_times {
            "stream (device events)"
        } else {
            "host issue"
        };
        assert_eq!(a["time"], want, "{}", s.v);
        // Inside its execution.
        let e = executions
            .iter()
            .find(|e| {
                e.v["pid"] == s.v["pid"]
                    && e.v["name"].as_str().unwrap().ends_with(&format!("#{exec}"))
            })
            .unwrap();
        assert!(
            s.ts + TOL >= e.ts && s.end <= e.end + TOL,
            "{} outside {}",
            s.v,
            e.v
        );
        if COLLECTIVES.contains(&s.v["cat"].as_str().unwrap()) {
            assert!(a["bytes"].as_u64().unwrap() > 0, "{}", s.v);
            assert!(!a["peers"].is_null(), "{}", s.v);
            assert!(a["clique_wait_us"].as_f64().is_some(), "{}", s.v);
        }
    }
    let paths: BTreeSet<&String> = per.keys().map(|(_, p)| p).collect();
    for ((pid, p), execs) in &per {
        assert_eq!(execs, &(0..iterations).collect(), "rank {pid} {p}");
    }
    for pid in 0..ranks {
        for p in &paths {
            assert!(
                per.contains_key(&(pid, p.to_string())),
                "rank {pid} lacks {p}"
            );
        }
    }
    // With device times, the host track has an issue slice per thunk too.
    let issues = of("X").filter(|e| e["cat"] == "issue").count();
    assert_eq!(issues, if device_times { stream.len() } else { 0 });
    // No overlap on a track.
    let mut tracks: BTreeMap<(u64, u64), Vec<&Slice>> = BTreeMap::new();
    for s in &stream {
        let k = (s.v["pid"].as_u64().unwrap(), s.v["tid"].as_u64().unwrap());
        tracks.entry(k).or_default().push(s);
    }
    for (k, mut v) in tracks {
        v.sort_by(|a, b| a.ts.total_cmp(&b.ts));
        for w in v.windows(2) {
            assert!(
                w[0].end <= w[1].ts + TOL,
                "overlap on {k:?}: {} {}",
                w[0].v,
                w[1].v
            );
        }
    }
    // Every cross-stream wait is a flow from the waited slice to the waiting one.
    let starts: BTreeMap<u64, &Value> = of("s").map(|e| (e["id"].as_u64().unwrap(), e)).collect();
    let ends: Vec<&Value> = of("f").collect();
    assert_eq!(starts.len(), ends.len());
    let inside = |e: &Value, s: &Slice| {
        e["pid"] == s.v["pid"] && e["tid"] == s.v["tid"] && {
            let t = e["ts"].as_f64().unwrap();
            s.ts - TOL <= t && t <= s.end + TOL
        }
    };
    let mut flows = 0;
    for s in &stream {
        let Some(waits) = s.v["args"]["waits_for"].as_array() else {
            continue;
        };
        let mine: Vec<&&Value> = ends.iter().filter(|f| inside(f, s)).collect();
        assert_eq!(mine.len(), waits.len(), "flows into {}", s.v);
        for w in waits {
            let from = stream
                .iter()
                .find(|u| {
                    u.v["pid"] == s.v["pid"]
                        && u.v["args"]["path"] == *w
                        && u.v["args"]["execution"] == s.v["args"]["execution"]
                })
                .unwrap();
            assert_ne!(from.v["tid"], s.v["tid"], "a wait on the same stream");
            let ok = mine.iter().any(|f| {
                starts
                    .get(&f["id"].as_u64().unwrap())
                    .is_some_and(|st| inside(st, from))
            });
            assert!(ok, "no flow from {} to {}", from.v, s.v);
            flows += 1;
        }
    }
    // One clock: with device times anchored exactly, a collective's slices overlap across
    // the ranks of each replica group.
    let exact = executions
        .iter()
        .all(|e| e.v["args"]["clock"] == "device, anchored exactly");
    let mut overlaps = 0;
    if device_times && ranks > 1 && exact {
        let mut by: BTreeMap<(String, u64, String), Vec<&Slice>> = BTreeMap::new();
        for s in stream
            .iter()
            .filter(|s| ["all_reduce", "all_gather"].contains(&s.v["cat"].as_str().unwrap()))
        {
            let a = &s.v["args"];
            let group = match a["peers"].as_array() {
                Some(groups) => groups
                    .iter()
                    .find(|g| g.as_array().unwrap().contains(&s.v["pid"]))
                    .unwrap()
                    .to_string(),
                None => "all".to_string(),
            };
            let path = a["path"].as_str().unwrap().to_string();
            by.entry((path, a["execution"].as_u64().unwrap(), group))
                .or_default()
                .push(s);
        }
        for (k, v) in by {
            overlaps += 1;
            let latest_start = v.iter().map(|s| s.ts).fold(f64::MIN, f64::max);
            let earliest_end = v.iter().map(|s| s.end).fold(f64::MAX, f64::min);
            assert!(
                latest_start <= earliest_end + TOL,
                "{k:?}: ranks do not overlap"
            );
        }
    }
    (flows, overlaps)
}

#[test]
fn host_traces_of_the_examples() {
    let (mut flows, mut overlaps) = (0, 0);
    for device_times in [false, true] {
        let t = if device_times { "-dt" } else { "" };
        let file = scratch(&format!("mlp{t}.json"));
        let mut args = vec![
            "run",
            "examples/mlp.txtpb",
            "--backend",
            "host",
            "--iterations",
            "3",
            "--trace",
            file.to_str().unwrap(),
        ];
        if device_times {
            args.push("--trace-device-times");
        }
        xthunk(None, &args);
        check_trace(&file, 3, 1, device_times);
        for p in ["exchange", "while_async", "permute_ring", "dp_step"] {
            let file = scratch(&format!("{p}{t}.json"));
            let program = format!("examples/{p}.txtpb");
            let mut args = vec![
                "run",
                &program,
                "--backend",
                "host",
                "--devices",
                "4",
                "--iterations",
                "2",
                "--trace",
                file.to_str().unwrap(),
            ];
            if device_times {
                args.push("--trace-device-times");
            }
            xthunk(None, &args);
            let (f, o) = check_trace(&file, 2, 4, device_times);
            flows += f;
            overlaps += o;
        }
    }
    // exchange, while_async and permute_ring have cross-stream waits.
    assert!(flows >= 3 * 4 * 2 * 2, "{flows} flows");
    // The host's timing events give exact anchors: exchange's and dp_step's all-reduces and
    // all-gathers were compared across ranks.
    assert!(overlaps >= 4, "{overlaps} collective overlaps checked");
}

#[test]
fn emulated_cuda_trace_has_device_times() {
    if emulator_lib().is_none() {
        let why = "the emulator library is not built (cargo build -p xthunk-emulator)";
        if std::env::var_os("XTHUNK_REQUIRE_EMULATOR").is_some() {
            panic!("{why}");
        }
        eprintln!("SKIPPED emulated_cuda_trace_has_device_times: {why}");
        return;
    }
    let file = scratch("exchange-cuda.json");
    xthunk(
        Some(4),
        &[
            "run",
            "examples/exchange.txtpb",
            "--backend",
            "cuda",
            "--devices",
            "4",
            "--iterations",
            "2",
            "--trace",
            file.to_str().unwrap(),
            "--trace-device-times",
        ],
    );
    let (flows, _) = check_trace(&file, 2, 4, true);
    assert!(flows >= 4 * 2, "{flows} flows");
}

#[test]
fn trace_merge_aligns_files() {
    let a = scratch("merge-a.json");
    let b = scratch("merge-b.json");
    for f in [&a, &b] {
        xthunk(
            None,
            &[
                "run",
                "examples/mlp.txtpb",
                "--backend",
                "host",
                "--trace",
                f.to_str().unwrap(),
            ],
        );
    }
    let merged = scratch("merged.json");
    xthunk(
        None,
        &[
            "trace-merge",
            merged.to_str().unwrap(),
            a.to_str().unwrap(),
            b.to_str().unwrap(),
        ],
    );
    let read = |p: &Path| -> Value { serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap() };
    let (da, db, dm) = (read(&a), read(&b), read(&merged));
    let n = |d: &Value| d["traceEvents"].as_array().unwrap().len();
    assert_eq!(n(&dm), n(&da) + n(&db));
    // The second file ran after the first: its execution starts later in the merged file by
    // the difference of the origins.
    let exec_ts = |d: &Value, skip: usize| {
        d["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["cat"] == "execution")
            .nth(skip)
            .unwrap()["ts"]
            .as_f64()
            .unwrap()
    };
    let origin = |d: &Value| d["otherData"]["origin_unix_ns"].as_u64().unwrap();
    let shift = (origin(&db) - origin(&da)) as f64 / 1e3;
    assert!(shift > 0.0);
    assert!((exec_ts(&dm, 1) - (exec_ts(&db, 0) + shift)).abs() < 1.0);
    assert!((exec_ts(&dm, 0) - exec_ts(&da, 0)).abs() < 1e-6);
}

#[test]
fn profile_of_mlp_adds_up_to_the_step() {
    let out = xthunk(
        None,
        &[
            "profile",
            "examples/mlp.txtpb",
            "--backend",
            "host",
            "--iterations",
            "4",
        ],
    );
    for want in [
        "kind",
        "gemm",
        "kernel",
        "top 6 thunks",
        "entry[0] gemm f32 64x1024x512",
    ] {
        assert!(out.contains(want), "{want}:\n{out}");
    }
    assert!(out.contains("FLOP/s") && out.contains("GB/s"), "{out}");
    let number_before = |line: &str, marker: &str| -> f64 {
        let head = &line[..line.find(marker).unwrap()];
        head.rsplit([' ', '(']).next().unwrap().parse().unwrap()
    };
    let line = out
        .lines()
        .find(|l| l.starts_with("sum of per-thunk times per step:"))
        .unwrap();
    let sum = number_before(line, " ms");
    let share = number_before(line, "% of the step time");
    let step_line = out.lines().find(|l| l.starts_with("step time")).unwrap();
    let step = number_before(step_line, " ms");
    assert!(
        (sum / step * 100.0 - share).abs() < 0.2,
        "{line} vs {step_line}"
    );
    assert!(
        (90.0..=110.0).contains(&share),
        "per-thunk times are {share}% of the step:\n{out}"
    );
    // The per-kind rows add up to the same sum (4 executions).
    let kinds: f64 = out
        .lines()
        .filter(|l| l.starts_with("gemm ") || l.starts_with("kernel "))
        .map(|l| l.split_whitespace().nth(2).unwrap().parse::<f64>().unwrap())
        .sum();
    assert!(
        (kinds / 4.0 - sum).abs() <= 0.01 * sum + 0.01,
        "{kinds} / 4 vs {sum}"
    );
}

#[test]
fn json_logs_are_one_object_per_line_with_spans_and_causes() {
    let o = Command::new(env!("CARGO_BIN_EXE_xthunk"))
        .args([
            "--log-format",
            "json",
            "-vv",
            "run",
            "examples/exchange.txtpb",
            "--backend",
            "host",
            "--devices",
            "4",
        ])
        .current_dir(root())
        .output()
        .unwrap();
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    let mut spans = BTreeSet::new();
    let mut objects = 0;
    for line in err.lines().filter(|l| l.starts_with('{')) {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(v["level"].is_string() && v["fields"].is_object(), "{line}");
        for s in v["spans"].as_array().into_iter().flatten() {
            spans.insert(s["name"].as_str().unwrap().to_string());
        }
        objects += 1;
    }
    assert!(objects > 5, "{err}");
    for want in ["rank", "compile", "execute"] {
        assert!(spans.contains(want), "no `{want}` span in {spans:?}");
    }
    // A failure: the error event carries its cause chain.
    let o = Command::new(env!("CARGO_BIN_EXE_xthunk"))
        .args(["--log-format", "json", "run", "examples/no-such-file.txtpb"])
        .current_dir(root())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    let event = err
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["fields"]["message"] == "command failed")
        .unwrap_or_else(|| panic!("no error event in {err}"));
    let causes: Vec<String> =
        serde_json::from_str(event["fields"]["causes"].as_str().unwrap()).unwrap();
    assert!(causes.len() >= 2, "{causes:?}");
    assert!(causes[0].contains("no-such-file.txtpb"), "{causes:?}");
    // The human line is still there.
    assert!(err.lines().any(|l| l.starts_with("error: ")), "{err}");
}

#[test]
fn a_launched_job_traces_merge_into_one_file() {
    let dir = scratch("job");
    std::fs::create_dir_all(&dir).unwrap();
    let pattern = dir.join("t{rank}.json");
    xthunk(
        None,
        &[
            "launch",
            "-n",
            "2",
            "--",
            "run",
            "examples/dp_step.txtpb",
            "--backend",
            "host",
            "--iterations",
            "2",
            "--trace",
            pattern.to_str().unwrap(),
        ],
    );
    // The first process merged both into tall.json after the job.
    check_trace(&dir.join("tall.json"), 2, 2, false);
    let (t0, t1, merged) = (
        dir.join("t0.json"),
        dir.join("t1.json"),
        dir.join("job.json"),
    );
    xthunk(
        None,
        &[
            "trace-merge",
            merged.to_str().unwrap(),
            t0.to_str().unwrap(),
            t1.to_str().unwrap(),
        ],
    );
    check_trace(&merged, 2, 2, false);
}

#[test]
fn a_failed_run_still_writes_its_trace() {
    // exchange.txtpb needs 4 ranks: on 2 its first all-gather fails on every rank.
    let file = scratch("failed.json");
    let o = Command::new(env!("CARGO_BIN_EXE_xthunk"))
        .args([
            "run",
            "examples/exchange.txtpb",
            "--backend",
            "host",
            "--devices",
            "2",
        ])
        .args(["--trace", file.to_str().unwrap()])
        .current_dir(root())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let doc: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    for rank in 0..2u64 {
        let exec = events
            .iter()
            .find(|e| e["cat"] == "execution" && e["pid"] == rank)
            .unwrap();
        assert_eq!(exec["args"]["ok"], false, "{exec}");
        // The thunk that failed has its slice.
        assert!(
            events.iter().any(|e| e["pid"] == rank
                && e["cat"] == "all_gather"
                && e["args"]["path"] == "entry[0]"),
            "rank {rank}"
        );
    }
}
