//! A running `xthunk launch` for tests: its output lines as they come, with their time, and
//! what they say (each rank's pid, the job id, each rank's lines). Killed when dropped.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// A running `xthunk launch`, its lines as they come with their time; killed when dropped.
pub struct Launch {
    pub child: Child,
    lines: mpsc::Receiver<(String, Instant)>,
    pub seen: Vec<(String, Instant)>,
}

impl Drop for Launch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Launch {
    /// Starts `cmd` with its stdout and stderr read line by line.
    pub fn spawn(mut cmd: Command) -> Launch {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, rx) = mpsc::channel();
        let streams: [Box<dyn std::io::Read + Send>; 2] = [
            Box::new(child.stdout.take().unwrap()),
            Box::new(child.stderr.take().unwrap()),
        ];
        for stream in streams {
            let tx = tx.clone();
            thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    let _ = tx.send((line, Instant::now()));
                }
            });
        }
        Launch {
            child,
            lines: rx,
            seen: Vec::new(),
        }
    }

    pub fn text(&self) -> String {
        let lines: Vec<&str> = self.seen.iter().map(|(l, _)| l.as_str()).collect();
        lines.join("\n")
    }

    pub fn wait_for(&mut self, needle: &str, count: usize, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self.seen.iter().filter(|l| l.0.contains(needle)).count() < count {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => self.seen.push(l),
                Err(_) => panic!(
                    "no {count} lines with {needle:?} in {limit:?}:\n{}",
                    self.text()
                ),
            }
        }
    }

    pub fn wait(&mut self, limit: Duration) -> (ExitStatus, Instant) {
        let deadline = Instant::now() + limit;
        let status = loop {
            while let Ok(l) = self.lines.try_recv() {
                self.seen.push(l);
            }
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "the job still ran after {limit:?}:\n{}",
                self.text()
            );
            thread::sleep(Duration::from_millis(10));
        };
        let exited = Instant::now();
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.seen.push(l);
        }
        (status, exited)
    }

    /// Each rank's pid and the job id, from the ranks' first lines.
    pub fn pids(&self) -> (BTreeMap<usize, u32>, String) {
        let mut pids = BTreeMap::new();
        let mut job = String::new();
        for (l, _) in &self.seen {
            if let Some(rest) = l.strip_prefix("[rank ")
                && let Some((r, rest)) = rest.split_once(']')
                && let Some((_, p)) = rest.split_once("(pid ")
                && let Some((p, _)) = p.split_once(')')
            {
                pids.insert(r.parse().unwrap(), p.parse().unwrap());
                if let Some((_, j)) = rest.split_once("job ") {
                    job = j.split(':').next().unwrap().to_string();
                }
            }
        }
        (pids, job)
    }

    pub fn rank_lines(&self, r: usize) -> Vec<(&str, Instant)> {
        let prefix = format!("[rank {r}] ");
        self.seen
            .iter()
            .filter_map(|(l, t)| l.strip_prefix(&prefix).map(|l| (l, *t)))
            .collect()
    }

    /// The first `error:` line of rank `r`, and when it came.
    pub fn error_of(&self, r: usize) -> Option<(&str, Instant)> {
        self.rank_lines(r)
            .into_iter()
            .find(|(l, _)| l.starts_with("error:"))
    }
}
