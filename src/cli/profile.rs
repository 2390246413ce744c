//! `xthunk profile PROGRAM`: runs a program with a trace with device times (stream times on
//! the host) and prints where the step goes: per thunk kind and for the top thunks their count,
//! total and mean time, share of the step and achieved GB/s or TFLOP/s; the sum of the
//! per-thunk times and the critical path (the longest chain through stream order and
//! cross-stream waits) against the measured step time.

use super::error::{CliError, CliResult};
use super::run::{check_backend_name, open_device, random_input};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use xthunk::core::executor::{ExecutorConfig, Session};
use xthunk::core::trace::{Execution, NodeInfo, TraceConfig, Tracer};
use xthunk::{ExecuteOptions, Runtime};

/// `xthunk profile` as parsed.
#[derive(Debug, clap::Args)]
pub struct ProfileArgs {
    /// The program file (.txtpb text or .pb binary; StableHLO: .mlir text, or a portable
    /// artifact — VHLO bytecode or jax.export's serialized bytes — told by content).
    pub program: PathBuf,
    /// auto (cuda, then rocm, then host), or a backend name (host, cuda, rocm).
    #[arg(long, default_value = "auto")]
    pub backend: String,
    /// Device ordinal within the backend.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Executions measured (after one warm-up execution that is not).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub iterations: u32,
    /// How many of the slowest thunks to list.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Also write the trace of the measured executions (Chrome JSON) to this file.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
}

/// What one node (or one kind) added up to over the measured executions.
#[derive(Default, Clone)]
struct Sum {
    count: u64,
    total: Duration,
    bytes: u64,
    flops: u64,
}

impl Sum {
    fn add(&mut self, d: Duration, info: &NodeInfo) {
        self.count += 1;
        self.total += d;
        self.bytes = self.bytes.saturating_add(info.bytes);
        self.flops = self.flops.saturating_add(info.flops);
    }

    /// GB/s (1 GB = 10⁹ B) or TFLOP/s, where meaningful.
    fn achieved(&self) -> String {
        let s = self.total.as_secs_f64();
        if s <= 0.0 {
            return String::new();
        }
        let rate = self.flops as f64 / s;
        if self.flops > 0 && rate >= 1e12 {
            format!("{:.3} TFLOP/s", rate / 1e12)
        } else if self.flops > 0 {
            format!("{:.2} GFLOP/s", rate / 1e9)
        } else if self.bytes > 0 {
            format!("{:.2} GB/s", self.bytes as f64 / s / 1e9)
        } else {
            String::new()
        }
    }
}

fn duration(span: (u64, u64)) -> Duration {
    Duration::from_nanos(span.1.saturating_sub(span.0))
}

/// The longest chain through the nodes (each after the previous node of its stream and after
/// the nodes it waits for), weighted by each node's mean time.
fn critical_path(nodes: &[NodeInfo], mean: &[Duration]) -> Duration {
    let mut finish = vec![Duration::ZERO; nodes.len()];
    let mut last_on: BTreeMap<u32, usize> = BTreeMap::new();
    for (i, n) in nodes.iter().enumerate() {
        let mut start = last_on
            .get(&n.stream)
            .map(|p| finish[*p])
            .unwrap_or_default();
        for w in &n.waits {
            if let Some(f) = finish.get(*w as usize) {
                start = start.max(*f);
            }
        }
        finish[i] = start + mean.get(i).copied().unwrap_or_default();
        last_on.insert(n.stream, i);
    }
    finish.into_iter().max().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub fn profile(args: &ProfileArgs, out: &mut dyn Write) -> CliResult<()> {
    let program =
        xthunk::load_program(&args.program).map_err(|e| CliError::program(&args.program, e))?;
    let sig = program.signature.clone();
    let inputs = sig
        .parameters
        .iter()
        .enumerate()
        .map(|(i, p)| random_input(p, args.seed, i as u64))
        .collect::<CliResult<Vec<_>>>()?;
    let rt = Runtime::new();
    check_backend_name(&rt, &args.backend)?;
    let device = open_device(&rt, &args.backend, args.device)?;
    let session = Session::load(device.clone(), &program, &ExecutorConfig::default(), None)?;
    session.bind(&inputs)?;
    let config = TraceConfig { device_times: true };
    // One warm-up execution (pooled state, recordings, caches), not measured.
    let warm = ExecuteOptions {
        trace: Some(Arc::new(Tracer::new(config))),
        ..Default::default()
    };
    session.execute(&warm)?;
    let tracer = Arc::new(Tracer::new(config));
    tracer.name_rank(0, device.info().name.clone());
    let opts = ExecuteOptions {
        trace: Some(tracer.clone()),
        ..Default::default()
    };
    let steps: Duration = session
        .execute_iterations(args.iterations, &opts, |_, _| {})?
        .into_iter()
        .sum();
    if let Some(path) = &args.trace {
        tracer.save(path).map_err(|e| CliError::io(path, e))?;
    }
    let executions = tracer.executions();
    let e = session.loaded().executable();
    writeln!(
        out,
        "profile of {} ({} thunks) on {}:{} {}{}",
        e.name,
        e.thunk_count(),
        device.backend_name(),
        device.info().ordinal,
        device.info().name,
        if device.info().emulated {
            " [EMULATED, not a GPU]"
        } else {
            ""
        }
    )?;
    report(out, &executions, steps, args.iterations, args.top)
}

fn report(
    out: &mut dyn Write,
    executions: &[Execution],
    steps: Duration,
    iterations: u32,
    top: usize,
) -> CliResult<()> {
    let Some(first) = executions.first() else {
        return Err(CliError::Usage("profile: no execution was traced".into()));
    };
    let nodes = first.nodes.clone();
    let mut per_node = vec![Sum::default(); nodes.len()];
    let mut timed = 0u64;
    let mut untimed = 0u64;
    for e in executions {
        for t in &e.thunks {
            let (Some(info), Some(sum)) = (
                nodes.get(t.node as usize),
                per_node.get_mut(t.node as usize),
            ) else {
                continue;
            };
            match t.device {
                Some(span) => {
                    sum.add(duration(span), info);
                    timed += 1;
                }
                None => {
                    sum.add(duration(t.issue), info);
                    untimed += 1;
                }
            }
        }
    }
    let step = steps / iterations.max(1);
    let all = steps.max(Duration::from_nanos(1)).as_secs_f64();
    let share = |d: Duration| 100.0 * d.as_secs_f64() / all;
    writeln!(
        out,
        "{iterations} measured executions after 1 warm-up; thunk times: {}",
        if untimed == 0 {
            "stream times from timing events"
        } else if timed == 0 {
            "host issue spans (the backend has no timing events)"
        } else {
            "stream times where measured, else host issue spans"
        }
    )?;
    let mut kinds: BTreeMap<&str, Sum> = BTreeMap::new();
    for (n, s) in nodes.iter().zip(&per_node) {
        let k = kinds.entry(n.kind).or_default();
        k.count += s.count;
        k.total += s.total;
        k.bytes = k.bytes.saturating_add(s.bytes);
        k.flops = k.flops.saturating_add(s.flops);
    }
    let mut kinds: Vec<(&str, Sum)> = kinds.into_iter().collect();
    kinds.sort_by_key(|k| std::cmp::Reverse(k.1.total));
    writeln!(out)?;
    writeln!(
        out,
        "{:<24} {:>7} {:>11} {:>11} {:>7}  achieved",
        "kind", "count", "total ms", "mean us", "share"
    )?;
    for (k, s) in &kinds {
        writeln!(
            out,
            "{:<24} {:>7} {:>11.3} {:>11.1} {:>6.1}%  {}",
            k,
            s.count,
            ms(s.total),
            s.total.as_secs_f64() * 1e6 / s.count.max(1) as f64,
            share(s.total),
            s.achieved()
        )?;
    }
    let mut order: Vec<usize> = (0..nodes.len()).collect();
    order.sort_by_key(|i| std::cmp::Reverse(per_node[*i].total));
    writeln!(out)?;
    writeln!(
        out,
        "{:<48} {:>7} {:>11} {:>11} {:>7}  achieved",
        format!("top {} thunks", top.min(nodes.len())),
        "count",
        "total ms",
        "mean us",
        "share"
    )?;
    for i in order.into_iter().take(top) {
        let s = &per_node[i];
        if s.count == 0 {
            continue;
        }
        writeln!(
            out,
            "{:<48} {:>7} {:>11.3} {:>11.1} {:>6.1}%  {}",
            nodes[i].name,
            s.count,
            ms(s.total),
            s.total.as_secs_f64() * 1e6 / s.count as f64,
            share(s.total),
            s.achieved()
        )?;
    }
    let sum: Duration = per_node.iter().map(|s| s.total).sum();
    let per_step = sum / iterations.max(1);
    let mean: Vec<Duration> = per_node
        .iter()
        .map(|s| s.total / u32::try_from(s.count.max(1)).unwrap_or(u32::MAX))
        .collect();
    let cp = critical_path(&nodes, &mean);
    writeln!(out)?;
    writeln!(out, "step time (wall, mean): {:.3} ms", ms(step))?;
    writeln!(
        out,
        "sum of per-thunk times per step: {:.3} ms ({:.1}% of the step time)",
        ms(per_step),
        100.0 * per_step.as_secs_f64() / step.max(Duration::from_nanos(1)).as_secs_f64()
    )?;
    writeln!(
        out,
        "critical path: {:.3} ms ({:.1}% of the step time); streams overlap {:.2}x (sum / critical path)",
        ms(cp),
        100.0 * cp.as_secs_f64() / step.max(Duration::from_nanos(1)).as_secs_f64(),
        per_step.as_secs_f64() / cp.max(Duration::from_nanos(1)).as_secs_f64()
    )?;
    Ok(())
}
