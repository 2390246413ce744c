//! The Chrome JSON trace-event format of a [`Tracer`]'s records (opened by ui.perfetto.dev
//! and chrome://tracing): one process per rank (`pid` = rank), in it the `host` track
//! (`tid` 0: executions, issue spans, loads) and one track per stream (`tid` 1 + stream);
//! a complete event (`"ph": "X"`) per thunk per execution, flows (`"ph": "s"` / `"f"`) for
//! cross-stream event waits. Times are microseconds since the tracer's origin, whose wall-clock
//! time is in `otherData.origin_unix_ns`; [`merge`] aligns several documents by it.

use super::{Execution, ThunkTimes, Tracer};
use serde_json::{Map, Value, json};
use std::io::{self, Write};

/// The track of the host (issuing) thread of each rank.
pub const HOST_TID: u64 = 0;

/// The track of stream `s`.
pub fn stream_tid(s: u32) -> u64 {
    1 + u64::from(s)
}

fn us(ns: u64) -> Value {
    // Microseconds with nanosecond precision.
    json!(ns as f64 / 1e3)
}

fn complete(
    pid: u32,
    tid: u64,
    name: &str,
    cat: &str,
    (start, end): (u64, u64),
    args: Map<String, Value>,
) -> Value {
    json!({
        "ph": "X", "pid": pid, "tid": tid, "name": name, "cat": cat,
        "ts": us(start), "dur": us(end.saturating_sub(start)), "args": args,
    })
}

fn metadata(pid: u32, tid: Option<u64>, what: &str, name: &str) -> Value {
    let mut v = json!({"ph": "M", "pid": pid, "name": what, "args": {"name": name}});
    if let Some(t) = tid {
        v["tid"] = json!(t);
    }
    v
}

/// Where a thunk ran on its stream: device times when measured, else its issue span.
fn stream_span(t: &ThunkTimes) -> (u64, u64) {
    t.device.unwrap_or(t.issue)
}

fn execution_events(e: &Execution, flow_id: &mut u64, out: &mut Vec<Value>) {
    let pid = e.rank;
    let mut args = Map::new();
    args.insert("ok".into(), json!(e.ok));
    args.insert("thunks".into(), json!(e.thunks.len()));
    args.insert("clock".into(), json!(e.clock));
    out.push(complete(
        pid,
        HOST_TID,
        &format!("execute {} #{}", e.program, e.index),
        "execution",
        (e.start_ns, e.end_ns),
        args,
    ));
    // Where each node's record is, for its waiters' flows.
    let mut at = vec![None; e.nodes.len()];
    for (i, t) in e.thunks.iter().enumerate() {
        if let Some(slot) = at.get_mut(t.node as usize) {
            *slot = Some(i);
        }
    }
    for t in &e.thunks {
        let Some(info) = e.nodes.get(t.node as usize) else {
            continue;
        };
        let tid = stream_tid(info.stream);
        let mut args = info.args.clone();
        args.insert("execution".into(), json!(e.index));
        args.insert(
            "time".into(),
            json!(if t.device.is_some() {
                "stream (device events)"
            } else {
                "host issue"
            }),
        );
        if let Some(n) = t.command_buffer.name() {
            args.insert("command_buffer".into(), json!(n));
        }
        if info.communicates {
            args.insert("clique_wait_us".into(), us(t.clique_wait_ns));
        }
        let span = stream_span(t);
        let mut issue_args = Map::new();
        issue_args.insert("stream".into(), json!(info.stream));
        if t.device.is_some() {
            args.insert("issue_us".into(), us(t.issue.1.saturating_sub(t.issue.0)));
            out.push(complete(
                pid, HOST_TID, &info.name, "issue", t.issue, issue_args,
            ));
        }
        out.push(complete(pid, tid, &info.name, info.kind, span, args));
        for w in &info.waits {
            let Some(Some(j)) = at.get(*w as usize) else {
                continue;
            };
            let (u, ui) = (&e.thunks[*j], &e.nodes[*w as usize]);
            let (us0, us1) = stream_span(u);
            let (vs0, vs1) = span;
            *flow_id += 1;
            // Inside both slices (a flow binds to the slice enclosing its time).
            out.push(json!({
                "ph": "s", "id": *flow_id, "pid": pid, "tid": stream_tid(ui.stream),
                "name": "event wait", "cat": "wait", "ts": us(us0 + (us1 - us0) / 2),
            }));
            out.push(json!({
                "ph": "f", "bp": "e", "id": *flow_id, "pid": pid, "tid": tid,
                "name": "event wait", "cat": "wait", "ts": us(vs0 + (vs1.saturating_sub(vs0)) / 2),
            }));
        }
    }
}

impl Tracer {
    /// The trace as one Chrome JSON document.
    pub fn to_chrome(&self) -> Value {
        let executions = self.executions();
        let mut events = vec![];
        let labels = self.rank_labels();
        let mut ranks: std::collections::BTreeSet<u32> = labels.keys().copied().collect();
        let mut streams: std::collections::BTreeSet<(u32, u32)> = Default::default();
        for e in &executions {
            ranks.insert(e.rank);
            for t in &e.thunks {
                if let Some(n) = e.nodes.get(t.node as usize) {
                    streams.insert((e.rank, n.stream));
                }
            }
        }
        let spans = self.spans();
        ranks.extend(spans.iter().map(|s| s.rank));
        for r in &ranks {
            let label = match labels.get(r) {
                Some(l) if !l.is_empty() => format!("rank {r}: {l}"),
                _ => format!("rank {r}"),
            };
            events.push(metadata(*r, None, "process_name", &label));
            events.push(json!({"ph": "M", "pid": r, "name": "process_sort_index",
                "args": {"sort_index": r}}));
            events.push(metadata(*r, Some(HOST_TID), "thread_name", "host"));
        }
        for (r, s) in &streams {
            events.push(metadata(
                *r,
                Some(stream_tid(*s)),
                "thread_name",
                &format!("stream {s}"),
            ));
        }
        for s in &spans {
            events.push(complete(
                s.rank,
                HOST_TID,
                &s.name,
                s.category,
                (s.start_ns, s.end_ns),
                s.args.clone(),
            ));
        }
        let mut flow_id = 0u64;
        for e in &executions {
            execution_events(e, &mut flow_id, &mut events);
        }
        json!({
            "traceEvents": events,
            "displayTimeUnit": "ns",
            "otherData": {
                "producer": "xthunk",
                "origin_unix_ns": self.origin_unix_ns(),
                "device_times": self.config().device_times,
                "dropped_executions": self.dropped_executions(),
            },
        })
    }

    /// Writes [`Tracer::to_chrome`].
    pub fn write_chrome(&self, w: &mut dyn Write) -> io::Result<()> {
        serde_json::to_writer(&mut *w, &self.to_chrome()).map_err(io::Error::other)?;
        w.flush()
    }

    /// Writes the trace to `path` atomically (a temporary file, then a rename).
    pub fn save(&self, path: &std::path::Path) -> io::Result<()> {
        let bytes = serde_json::to_vec(&self.to_chrome()).map_err(io::Error::other)?;
        crate::files::write_atomic(path, &bytes, 0o644)
    }
}

/// Merges Chrome documents written by [`Tracer::to_chrome`] in several processes into one,
/// shifting each document's times by its origin's wall-clock time relative to the earliest
/// (processes of one machine share that clock). Flow ids are renumbered apart.
pub fn merge(docs: Vec<Value>) -> Value {
    let origin = |d: &Value| d["otherData"]["origin_unix_ns"].as_u64().unwrap_or(0);
    let first = docs.iter().map(origin).min().unwrap_or(0);
    let mut events = vec![];
    let mut flow_base = 0u64;
    for d in &docs {
        let shift = origin(d).saturating_sub(first) as f64 / 1e3;
        let mut max_flow = 0;
        if let Some(list) = d["traceEvents"].as_array() {
            for e in list {
                let mut e = e.clone();
                if let Some(ts) = e["ts"].as_f64() {
                    e["ts"] = json!(ts + shift);
                }
                if let Some(id) = e["id"].as_u64() {
                    max_flow = max_flow.max(id);
                    e["id"] = json!(id + flow_base);
                }
                events.push(e);
            }
        }
        flow_base += max_flow;
    }
    json!({
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {"producer": "xthunk", "origin_unix_ns": first, "merged": docs.len()},
    })
}
