//! The Chrome JSON trace-event format of a [`Tracer`]'s records (opened by ui.perfetto.dev
//! and chrome://tracing): one process per rank (`pid` = rank), in it the `host` track
//! (`tid` 0: executions, issue spans, loads) and one track per stream (`tid` 1 + stream);
//! a complete event (`"ph": "X"`) per thunk per execution, flows (`"ph": "s"` / `"f"`) for
//! cross-stream event waits. Times are microseconds since the tracer's origin, whose wall-clock
//! time is in `otherData.origin_unix_ns`; [`merge`] aligns several documents by it.

use super::{Execution, Recording, ThunkTimes, Tracer};
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
            if let Some(k) = t.registered {
                args.insert("registered".into(), json!(k.name()));
            }
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
    /// Hands every event of the trace to `sink`, in order: metadata, host spans, then each
    /// execution's (by rank, then start).
    fn each_event(&self, sink: &mut dyn FnMut(Value) -> io::Result<()>) -> io::Result<()> {
        let labels = self.rank_labels();
        let spans = self.spans();
        self.with_recordings(|executions| {
            let mut ranks: std::collections::BTreeSet<u32> = labels.keys().copied().collect();
            let mut streams: std::collections::BTreeSet<(u32, u32)> = Default::default();
            for e in executions {
                ranks.insert(e.rank);
                streams.extend(e.streams().map(|s| (e.rank, s)));
            }
            ranks.extend(spans.iter().map(|s| s.rank));
            for r in &ranks {
                let label = match labels.get(r) {
                    Some(l) if !l.is_empty() => format!("rank {r}: {l}"),
                    _ => format!("rank {r}"),
                };
                sink(metadata(*r, None, "process_name", &label))?;
                sink(json!({"ph": "M", "pid": r, "name": "process_sort_index",
                    "args": {"sort_index": r}}))?;
                sink(metadata(*r, Some(HOST_TID), "thread_name", "host"))?;
            }
            for (r, s) in &streams {
                let name = format!("stream {s}");
                sink(metadata(*r, Some(stream_tid(*s)), "thread_name", &name))?;
            }
            for s in &spans {
                let span = (s.start_ns, s.end_ns);
                sink(complete(
                    s.rank,
                    HOST_TID,
                    &s.name,
                    s.category,
                    span,
                    s.args.clone(),
                ))?;
            }
            let mut order: Vec<&Recording> = executions.iter().collect();
            order.sort_by_key(|e| (e.rank, e.start_ns));
            let mut flow_id = 0u64;
            let mut buf = vec![];
            for e in order {
                // In nanoseconds one at a time: the trace's memory stays the compact marks.
                execution_events(&e.expand(), &mut flow_id, &mut buf);
                for v in buf.drain(..) {
                    sink(v)?;
                }
            }
            Ok(())
        })
    }

    fn other_data(&self) -> Value {
        json!({
            "producer": "xthunk",
            "origin_unix_ns": self.origin_unix_ns(),
            "device_times": self.config().device_times,
            "thunk_clock": match self.clock().source() {
                super::ClockSource::Tsc => "tsc",
                super::ClockSource::Instant => "instant",
            },
            "dropped_executions": self.dropped_executions(),
        })
    }

    /// The trace as one Chrome JSON document (in memory: for tests and small traces; files
    /// are written event by event by [`Tracer::write_chrome`]).
    pub fn to_chrome(&self) -> Value {
        let mut events = vec![];
        // Pushing into a vector cannot fail.
        let _ = self.each_event(&mut |v| {
            events.push(v);
            Ok(())
        });
        json!({"traceEvents": events, "displayTimeUnit": "ns", "otherData": self.other_data()})
    }

    /// Writes the Chrome JSON document one event at a time.
    pub fn write_chrome(&self, w: &mut dyn Write) -> io::Result<()> {
        w.write_all(b"{\"traceEvents\":[")?;
        let mut first = true;
        self.each_event(&mut |v| {
            if !std::mem::take(&mut first) {
                w.write_all(b",\n")?;
            }
            serde_json::to_writer(&mut *w, &v).map_err(io::Error::other)
        })?;
        w.write_all(b"],\"displayTimeUnit\":\"ns\",\"otherData\":")?;
        serde_json::to_writer(&mut *w, &self.other_data()).map_err(io::Error::other)?;
        w.write_all(b"}\n")?;
        w.flush()
    }

    /// Writes the trace to `path` atomically (a temporary file, then a rename).
    pub fn save(&self, path: &std::path::Path) -> io::Result<()> {
        let mut file = crate::files::StagedFile::create(path, 0o644)?;
        {
            let mut w = io::BufWriter::new(Staged(&mut file));
            self.write_chrome(&mut w)?;
        }
        file.commit()
    }
}

/// A staged file as an [`io::Write`].
struct Staged<'a>(&'a mut crate::files::StagedFile);

impl Write for Staged<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write_all(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
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
