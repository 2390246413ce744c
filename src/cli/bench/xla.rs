//! The XLA:CPU baseline of the StableHLO rows: a Python child process (`jax/xla_child.py`,
//! embedded here) that compiles the same StableHLO text once with jaxlib's CPU client and then
//! runs one timed execution per request, over a line protocol on its stdin and stdout, so the
//! rounds interleave it with xthunk as every other row's baseline. The numpy baseline of
//! `gemm_f32_numpy` ([`super::numpy`]) is a child of the same protocol ([`XlaChild::spawn`]).

use super::setup::Res;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::Duration;

/// The child's script (written into the run's temp folder).
pub const SCRIPT: &str = include_str!("jax/xla_child.py");

/// How long the child may take to import jax and compile the module.
const START_TIMEOUT: Duration = Duration::from_secs(180);
/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// The Python that runs the child: `--python`, else `$XTHUNK_PYTHON`, else the CI venv's
/// (`$XTHUNK_VENV` or `~/.cache/xthunk/venv`, `bin/python`) if it exists, else `python3` on
/// the PATH. Returns it with where it came from.
pub fn python(option: Option<&Path>) -> (PathBuf, &'static str) {
    if let Some(p) = option {
        return (p.to_path_buf(), "--python");
    }
    if let Some(p) = std::env::var_os("XTHUNK_PYTHON").filter(|p| !p.is_empty()) {
        return (PathBuf::from(p), "XTHUNK_PYTHON");
    }
    let venv = std::env::var_os("XTHUNK_VENV")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/xthunk/venv")));
    if let Some(py) = venv.map(|v| v.join("bin/python")).filter(|p| p.is_file()) {
        return (py, "the CI venv");
    }
    (PathBuf::from("python3"), "PATH")
}

/// The XLA:CPU child's name in errors.
pub const XLA: &str = "the XLA:CPU child process";

fn failed_as(who: &str, what: &str) -> xthunk::Error {
    xthunk::Error::InvalidArgument(format!("{who}: {what}"))
}

/// A running child that compiled one module.
pub struct XlaChild {
    /// Its name in errors ([`XLA`], `the numpy child process`).
    who: &'static str,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// Where the child's stderr goes (its last line is quoted when it ends unexpectedly).
    stderr: PathBuf,
    /// What the child said once it had compiled.
    pub ready: Ready,
}

/// The child's `ready` line (each child fills its own fields).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
pub struct Ready {
    /// jaxlib's version.
    pub jaxlib: String,
    /// Kernel-ish instructions of XLA's optimized HLO, per opcode (`fusion(kLoop)`, `dot`, …).
    pub kernels: BTreeMap<String, u64>,
    /// numpy's version (the numpy child).
    pub numpy: String,
    /// numpy's BLAS, `name version (details)` (the numpy child).
    pub blas: String,
}

/// What starting the child gave.
pub enum Started {
    Ready(XlaChild),
    /// No Python, or no jax in it: the row is skipped with this reason.
    Unavailable(String),
}

impl XlaChild {
    /// Starts `python script module inputs n_inputs` (its stderr into `stderr`) and waits
    /// until it has compiled.
    pub fn start(
        python: &Path,
        script: &Path,
        module: &Path,
        inputs: &Path,
        n_inputs: usize,
        stderr: &Path,
    ) -> Res<Started> {
        let n = n_inputs.to_string();
        Self::spawn(
            XLA,
            "compiling the module",
            python,
            &[
                script.as_os_str(),
                module.as_os_str(),
                inputs.as_os_str(),
                n.as_ref(),
            ],
            stderr,
        )
    }

    /// Starts `python args…` (its stderr into `stderr`; `who` names it in errors) and waits
    /// (`doing` that) for its first line: `ready <json>` or `unavailable <reason>`.
    pub fn spawn(
        who: &'static str,
        doing: &str,
        python: &Path,
        args: &[&std::ffi::OsStr],
        stderr: &Path,
    ) -> Res<Started> {
        let err_file = std::fs::File::create(stderr)
            .map_err(|e| failed_as(who, &format!("creating {}: {e}", stderr.display())))?;
        let spawned = Command::new(python)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(err_file)
            .spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                return Ok(Started::Unavailable(format!(
                    "cannot start {}: {e}",
                    python.display()
                )));
            }
        };
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(failed_as(who, "no pipes to the child"));
        };
        // A reader thread, so that a child that hangs is a timeout, not a hang.
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut me = XlaChild {
            who,
            child,
            stdin: Some(stdin),
            lines,
            stderr: stderr.to_path_buf(),
            ready: Ready::default(),
        };
        let first = me.line(START_TIMEOUT, doing)?;
        if let Some(why) = first.strip_prefix("unavailable ") {
            return Ok(Started::Unavailable(why.to_string()));
        }
        let Some(json) = first.strip_prefix("ready ") else {
            return Err(failed_as(
                me.who,
                &format!("expected `ready`, got `{first}`"),
            ));
        };
        me.ready = serde_json::from_str(json)
            .map_err(|e| failed_as(me.who, &format!("its `ready` line `{json}`: {e}")))?;
        Ok(Started::Ready(me))
    }

    /// The next line, within `timeout`; `error …` lines and an ended child are errors.
    fn line(&mut self, timeout: Duration, doing: &str) -> Res<String> {
        match self.lines.recv_timeout(timeout) {
            Ok(l) => match l.strip_prefix("error ") {
                Some(e) => Err(failed_as(self.who, &format!("{doing}: {e}"))),
                None => Ok(l),
            },
            Err(RecvTimeoutError::Timeout) => Err(failed_as(
                self.who,
                &format!("{doing}: no answer within {} s", timeout.as_secs()),
            )),
            Err(RecvTimeoutError::Disconnected) => {
                let status = self.child.wait().map(|s| s.to_string());
                let said = std::fs::read_to_string(&self.stderr).unwrap_or_default();
                let last = said.lines().rev().find(|l| !l.trim().is_empty());
                Err(failed_as(
                    self.who,
                    &format!(
                        "{doing}: it ended ({}){}",
                        status.unwrap_or_else(|e| e.to_string()),
                        last.map(|l| format!(": {}", l.trim())).unwrap_or_default()
                    ),
                ))
            }
        }
    }

    fn request(&mut self, line: &str, doing: &str) -> Res<String> {
        let sent = match self.stdin.as_mut() {
            Some(s) => writeln!(s, "{line}").and_then(|()| s.flush()),
            None => Err(std::io::Error::other("stdin closed")),
        };
        sent.map_err(|e| failed_as(self.who, &format!("{doing}: {e}")))?;
        self.line(REQUEST_TIMEOUT, doing)
    }

    /// One execution; the seconds it took (measured in the child, from the call until every
    /// output is ready).
    pub fn run(&mut self) -> Res<f64> {
        let l = self.request("run", "running the module")?;
        l.strip_prefix("time ")
            .and_then(|t| t.trim().parse::<f64>().ok())
            .ok_or_else(|| failed_as(self.who, &format!("expected `time <seconds>`, got `{l}`")))
    }

    /// One execution with its outputs written as `dir/out<i>.npy`; their number.
    pub fn save(&mut self, dir: &Path) -> Res<usize> {
        let text = dir
            .to_str()
            .filter(|t| !t.contains('\n'))
            .ok_or_else(|| failed_as(self.who, "the temp folder's path is not plain UTF-8"))?;
        let l = self.request(&format!("save {text}"), "saving the outputs")?;
        l.strip_prefix("saved ")
            .and_then(|t| t.trim().parse::<usize>().ok())
            .ok_or_else(|| failed_as(self.who, &format!("expected `saved <n>`, got `{l}`")))
    }
}

impl Drop for XlaChild {
    fn drop(&mut self) {
        if let Some(mut s) = self.stdin.take() {
            let _ = writeln!(s, "quit");
        }
        // Give it a moment to exit on its own, then end it.
        for _ in 0..50 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
