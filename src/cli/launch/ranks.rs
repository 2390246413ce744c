//! Running the ranks of a launch: N processes of one program, their output lines copied
//! behind `[rank R] ` (whole lines, one writer), their ends watched; after the first failure
//! the others get a grace, then are killed; every rank still running is killed and reaped
//! whatever the launcher's exit path, and on Linux a rank dies with the launcher's main
//! thread (`PR_SET_PDEATHSIG`). A stop signal of the launcher (SIGTERM, SIGINT, SIGHUP) is
//! forwarded to the ranks, which get the grace to exit; a second one kills them at once.

use super::signals;
use std::ffi::{OsString, c_int};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How the ranks ended.
#[derive(Debug)]
pub struct Outcome {
    /// Each rank's exit status, and whether the launcher killed it.
    pub ranks: Vec<(ExitStatus, bool)>,
    /// The first rank seen failing, with its status.
    pub first_failure: Option<(usize, ExitStatus)>,
    /// Writing the ranks' stdout failed (e.g. a closed pipe); later lines were dropped.
    pub stdout_error: Option<std::io::Error>,
    /// The launcher was stopped by a signal: how the ranks were stopped.
    pub stopped: Option<Stopped>,
}

/// How a stop signal of the launcher ended the ranks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stopped {
    /// The signal the launcher got first.
    pub signal: c_int,
    /// The ranks still running then: each was sent [`signals::forwarded`]`(signal)`.
    pub running: Vec<usize>,
    /// The ranks the launcher killed: after the grace, or at once on a second signal.
    pub killed: Vec<usize>,
    /// A second stop signal, which killed the ranks still running at once.
    pub second: Option<c_int>,
}

impl Outcome {
    /// 0 when every rank exited 0, 128 + the signal when a signal stopped the launch, else 1.
    pub fn exit_code(&self) -> u8 {
        match (&self.stopped, &self.first_failure) {
            (Some(s), _) => signals::exit_code(s.signal),
            (None, Some(_)) => 1,
            (None, None) => 0,
        }
    }

    /// The one line a launch stopped by a signal prints: the signal, the ranks it reached,
    /// and those that had to be killed.
    pub fn stop_line(&self, job: &str, grace: Duration) -> Option<String> {
        let s = self.stopped.as_ref()?;
        let sig = signals::name(s.signal);
        let what = if s.running.is_empty() {
            "no rank was running".to_string()
        } else {
            let sent = format!(
                "{} sent {}",
                rank_spans(&s.running),
                signals::name(signals::forwarded(s.signal))
            );
            match (s.killed.is_empty(), s.second) {
                (true, _) => format!("{sent}, all exited within the grace period ({grace:?})"),
                (false, Some(second)) => format!(
                    "{sent}; {} killed at once on a second {}",
                    rank_spans(&s.killed),
                    signals::name(second)
                ),
                (false, None) => format!(
                    "{sent}; {} killed after the grace period ({grace:?})",
                    rank_spans(&s.killed)
                ),
            }
        };
        Some(format!("xthunk launch: job {job} ended by {sig}: {what}"))
    }

    /// After a failure: one line per rank that did not exit 0, then the `error:` line that
    /// names the root cause: `cause` (what the job's coordinator recorded, or its loss),
    /// else the first rank that exited non-zero. Nothing when every rank succeeded. `name`
    /// names a process (`rank P`, or `process P (ranks A–B, …)` when it holds several).
    pub fn failure_report(
        &self,
        job: &str,
        cause: Option<&RootCause>,
        name: &dyn Fn(usize) -> String,
    ) -> Vec<String> {
        let Some((first, status)) = &self.first_failure else {
            return Vec::new();
        };
        let mut lines: Vec<String> = self
            .ranks
            .iter()
            .enumerate()
            .filter(|(_, (s, _))| !s.success())
            .map(|(r, (s, killed))| {
                let how = if *killed {
                    ", killed by the launcher"
                } else {
                    ""
                };
                format!("xthunk launch: {}: {s}{how}", name(r))
            })
            .collect();
        match cause {
            Some(RootCause::Recorded(cause)) => lines.push(format!(
                "error: job {job}: {cause} (the root cause its coordinator recorded; {} \
                 exited first: {status})",
                name(*first)
            )),
            Some(RootCause::CoordinatorLost(lost)) => lines.push(format!(
                "error: job {job}: {lost} (the launcher could not reach it either; {} \
                 exited first: {status})",
                name(*first)
            )),
            None => lines.push(format!("error: {} failed first: {status}", name(*first))),
        }
        lines
    }
}

/// `rank 2`, `ranks 0-3`, `ranks 0-1, 3` (`ranks` ascending).
pub fn rank_spans(ranks: &[usize]) -> String {
    let mut spans: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        spans.push(if i == j {
            ranks[i].to_string()
        } else {
            format!("{}-{}", ranks[i], ranks[j])
        });
        i = j + 1;
    }
    let one = ranks.len() == 1;
    format!("rank{} {}", if one { "" } else { "s" }, spans.join(", "))
}

/// The root cause of a failed job, as the launcher learnt it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootCause {
    /// What the coordinator recorded: the cause a rank (or the launcher) published first,
    /// else the first failure it saw.
    Recorded(String),
    /// The coordinator could not be reached (`lost the coordinator …: …`): that is the cause.
    CoordinatorLost(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pipe {
    Out,
    Err,
}

enum Msg {
    Line(usize, Pipe, Vec<u8>),
    Eof,
}

/// One running rank.
struct Rank {
    child: Child,
    status: Option<ExitStatus>,
    killed: bool,
}

/// Every spawned rank: those still running are killed and reaped on drop, whatever the
/// launcher's exit path (an error, a panic).
struct Ranks(Vec<Rank>);

impl Ranks {
    fn kill_running(&mut self) -> Vec<usize> {
        let mut killed = Vec::new();
        for (r, rank) in self.0.iter_mut().enumerate() {
            if rank.status.is_none() {
                let _ = rank.child.kill();
                if let Ok(s) = rank.child.wait() {
                    rank.status = Some(s);
                }
                rank.killed = true;
                killed.push(r);
            }
        }
        killed
    }
}

impl Drop for Ranks {
    fn drop(&mut self) {
        self.kill_running();
    }
}

/// Where the ranks' lines go: `out` (their stdout) and `err` (their stderr, and the
/// launcher's own notes).
struct Sink<'a> {
    out: &'a mut dyn Write,
    err: &'a mut dyn Write,
    /// The first failed write to `out`; later stdout lines are dropped.
    stdout_error: Option<std::io::Error>,
}

impl Sink<'_> {
    fn line(&mut self, rank: usize, pipe: Pipe, mut line: Vec<u8>) {
        if line.last() != Some(&b'\n') {
            line.push(b'\n');
        }
        let prefix = format!("[rank {rank}] ");
        let w: &mut dyn Write = match pipe {
            Pipe::Out if self.stdout_error.is_some() => return,
            Pipe::Out => &mut *self.out,
            Pipe::Err => &mut *self.err,
        };
        let result = w
            .write_all(prefix.as_bytes())
            .and_then(|()| w.write_all(&line))
            .and_then(|()| w.flush());
        if let (Err(e), Pipe::Out) = (result, pipe) {
            self.stdout_error = Some(e);
        }
    }

    fn note(&mut self, msg: &str) {
        let _ = writeln!(self.err, "{msg}").and_then(|()| self.err.flush());
    }
}

fn forward(rank: usize, pipe: Pipe, stream: impl Read, tx: mpsc::Sender<Msg>) {
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = Vec::new();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                if tx.send(Msg::Line(rank, pipe, line)).is_err() {
                    break;
                }
            }
        }
    }
    let _ = tx.send(Msg::Eof);
}

/// Starts `world` processes `program args...` (rank `r` with the variables `env(r)`), copies
/// their output lines to `out`/`err` behind `[rank R] `, and waits for them all (`on_exit`
/// is told of each exit as it is seen, and names the process when it failed: `rank P`
/// otherwise); after the first failure the others get `grace`, then
/// are killed. `stop` is polled for a stop signal of the launcher: the first is forwarded to
/// the ranks still running ([`signals::forwarded`]), which get `grace` to exit before they
/// are killed (exits after it are not failures: `on_exit` is not told); a second kills them
/// at once. A signal before any rank started starts none. Call it from the thread that lives
/// as long as the ranks should: on Linux a rank is killed when that thread ends.
#[allow(clippy::too_many_arguments)]
pub fn run_ranks(
    program: &Path,
    args: &[OsString],
    world: usize,
    env: &dyn Fn(usize) -> Vec<(&'static str, String)>,
    grace: Duration,
    stop: &mut dyn FnMut() -> Option<c_int>,
    on_exit: &mut dyn FnMut(usize, ExitStatus) -> Option<String>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> std::io::Result<Outcome> {
    if let Some(signal) = stop() {
        return Ok(Outcome {
            ranks: Vec::new(),
            first_failure: None,
            stdout_error: None,
            stopped: Some(Stopped {
                signal,
                running: Vec::new(),
                killed: Vec::new(),
                second: None,
            }),
        });
    }
    let (tx, rx) = mpsc::channel::<Msg>();
    let mut ranks = Ranks(Vec::with_capacity(world));
    let mut readers = Vec::new();
    for r in 0..world {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .envs(env(r))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        die_with_parent(&mut cmd);
        // On error `ranks` drops here: the ranks already started are killed.
        let mut child = cmd.spawn()?;
        if let Some(s) = child.stdout.take() {
            let tx = tx.clone();
            readers.push(std::thread::spawn(move || forward(r, Pipe::Out, s, tx)));
        }
        if let Some(s) = child.stderr.take() {
            let tx = tx.clone();
            readers.push(std::thread::spawn(move || forward(r, Pipe::Err, s, tx)));
        }
        ranks.0.push(Rank {
            child,
            status: None,
            killed: false,
        });
    }
    drop(tx);

    let mut sink = Sink {
        out,
        err,
        stdout_error: None,
    };
    let mut open_pipes = readers.len();
    let mut first_failure: Option<(usize, ExitStatus)> = None;
    let mut kill_at: Option<Instant> = None;
    let mut all_exited_at: Option<Instant> = None;
    let mut stopped: Option<Stopped> = None;
    loop {
        // Output first: at most one poll interval of waiting.
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(Msg::Line(r, pipe, line)) => {
                sink.line(r, pipe, line);
                while let Ok(msg) = rx.try_recv() {
                    match msg {
                        Msg::Line(r, pipe, line) => sink.line(r, pipe, line),
                        Msg::Eof => open_pipes -= 1,
                    }
                }
            }
            Ok(Msg::Eof) => open_pipes -= 1,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => open_pipes = 0,
        }
        if let Some(signal) = stop() {
            match &mut stopped {
                None => {
                    let running: Vec<usize> = (0..ranks.0.len())
                        .filter(|r| ranks.0[*r].status.is_none())
                        .collect();
                    let to_ranks = signals::forwarded(signal);
                    for r in &running {
                        if let Err(e) = signals::send(ranks.0[*r].child.id(), to_ranks) {
                            tracing::warn!(rank = r, error = %e, "could not signal the rank");
                        }
                    }
                    let at = Instant::now() + grace;
                    kill_at = Some(kill_at.map_or(at, |k| k.min(at)));
                    stopped = Some(Stopped {
                        signal,
                        running,
                        killed: Vec::new(),
                        second: None,
                    });
                }
                Some(s) => {
                    s.second.get_or_insert(signal);
                    kill_at = Some(Instant::now());
                }
            }
        }
        for (r, rank) in ranks.0.iter_mut().enumerate() {
            if rank.status.is_some() {
                continue;
            }
            if let Some(status) = rank.child.try_wait()? {
                rank.status = Some(status);
                if stopped.is_some() {
                    // Stopping: no exit is a failure of the job.
                    continue;
                }
                let who = on_exit(r, status).unwrap_or_else(|| format!("rank {r}"));
                if !status.success() && first_failure.is_none() {
                    first_failure = Some((r, status));
                    sink.note(&format!(
                        "xthunk launch: {who} failed first ({status}); the other ranks get \
                         {grace:?} to exit, then are killed"
                    ));
                    kill_at = Some(Instant::now() + grace);
                }
            }
        }
        let running = ranks.0.iter().filter(|r| r.status.is_none()).count();
        if running > 0
            && let Some(at) = kill_at
            && Instant::now() >= at
        {
            let killed = ranks.kill_running();
            if let Some(s) = &mut stopped {
                s.killed.extend(killed);
                continue;
            }
            for r in killed {
                sink.note(&format!(
                    "xthunk launch: killed rank {r} (still running {grace:?} after the first \
                     failure)"
                ));
            }
        }
        if running == 0 {
            // The pipes close when the ranks exit, unless a process they started holds them:
            // wait a moment for the last lines, not forever.
            let since = *all_exited_at.get_or_insert_with(Instant::now);
            if open_pipes == 0 || since.elapsed() > Duration::from_secs(1) {
                break;
            }
        }
    }
    // Lines already read but not written.
    while let Ok(Msg::Line(r, pipe, line)) = rx.try_recv() {
        sink.line(r, pipe, line);
    }
    if open_pipes == 0 {
        for h in readers {
            let _ = h.join();
        }
    }
    let statuses: Vec<(ExitStatus, bool)> = ranks
        .0
        .iter()
        .filter_map(|r| r.status.map(|s| (s, r.killed)))
        .collect();
    let stdout_error = sink.stdout_error;
    Ok(Outcome {
        ranks: statuses,
        first_failure,
        stdout_error,
        stopped,
    })
}

/// On Linux: the child gets SIGKILL when the thread that spawned it ends (the launcher's main
/// thread: when the launcher dies, however it dies).
#[cfg(target_os = "linux")]
fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    const PR_SET_PDEATHSIG: std::ffi::c_int = 1;
    const SIGKILL: std::ffi::c_ulong = 9;
    unsafe extern "C" {
        fn prctl(option: std::ffi::c_int, ...) -> std::ffi::c_int;
    }
    let parent = std::process::id();
    // SAFETY: the closure runs in the child between fork and exec; it makes two
    // async-signal-safe system calls (prctl with integer arguments, as its C prototype takes
    // them; getppid) and allocates nothing (an `io::Error` from an OS code or a kind does not
    // allocate).
    unsafe {
        cmd.pre_exec(move || {
            if prctl(
                PR_SET_PDEATHSIG,
                SIGKILL,
                0 as std::ffi::c_ulong,
                0 as std::ffi::c_ulong,
                0 as std::ffi::c_ulong,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            // The launcher died before prctl took effect: nobody would stop this rank.
            if std::os::unix::process::parent_id() != parent {
                return Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_cmd: &mut Command) {}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use xthunk_core::distributed::env::{
        XTHUNK_COORDINATOR, XTHUNK_JOB_ID, XTHUNK_RANK, XTHUNK_WORLD_SIZE,
    };

    fn sh() -> PathBuf {
        PathBuf::from("/bin/sh")
    }

    fn script(s: &str) -> Vec<OsString> {
        vec!["-c".into(), s.into()]
    }

    fn env(rank: usize) -> Vec<(&'static str, String)> {
        vec![
            (XTHUNK_RANK, rank.to_string()),
            (XTHUNK_WORLD_SIZE, "3".into()),
            (XTHUNK_JOB_ID, "test-job".into()),
            (XTHUNK_COORDINATOR, "local".into()),
        ]
    }

    fn run(s: &str, world: usize, grace: Duration) -> (Outcome, String, String) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let o = run_ranks(
            &sh(),
            &script(s),
            world,
            &env,
            grace,
            &mut || None,
            &mut |_, _| None,
            &mut out,
            &mut err,
        )
        .unwrap();
        (
            o,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }

    fn sorted_lines(s: &str) -> Vec<&str> {
        let mut v: Vec<&str> = s.lines().collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn every_line_is_prefixed_with_its_rank() {
        let (o, out, err) = run(
            concat!(
                r#"echo "out $XTHUNK_RANK of $XTHUNK_WORLD_SIZE" "$XTHUNK_JOB_ID" "#,
                r#""$XTHUNK_COORDINATOR"; "#,
                r#"echo "err $XTHUNK_RANK" >&2; printf 'no newline'"#
            ),
            3,
            Duration::from_secs(1),
        );
        assert_eq!(o.exit_code(), 0);
        assert!(o.first_failure.is_none());
        assert_eq!(o.ranks.len(), 3);
        assert_eq!(
            sorted_lines(&out),
            vec![
                "[rank 0] no newline",
                "[rank 0] out 0 of 3 test-job local",
                "[rank 1] no newline",
                "[rank 1] out 1 of 3 test-job local",
                "[rank 2] no newline",
                "[rank 2] out 2 of 3 test-job local",
            ]
        );
        assert_eq!(
            sorted_lines(&err),
            vec!["[rank 0] err 0", "[rank 1] err 1", "[rank 2] err 2"]
        );
    }

    #[test]
    fn a_failed_rank_is_named_and_the_others_are_killed_after_the_grace() {
        let started = Instant::now();
        let (o, out, err) = run(
            r#"if [ "$XTHUNK_RANK" = 1 ]; then echo bye; exit 3; fi; echo $$; exec sleep 60"#,
            3,
            Duration::from_millis(300),
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(o.exit_code(), 1);
        let (first, status) = o.first_failure.unwrap();
        assert_eq!((first, status.code()), (1, Some(3)));
        assert!(o.ranks[0].1 && o.ranks[2].1, "ranks 0 and 2 were killed");
        assert!(!o.ranks[1].1);
        assert!(err.contains("rank 1 failed first"), "{err}");
        assert!(err.contains("killed rank 0"), "{err}");
        let lost = RootCause::CoordinatorLost("lost the coordinator etcd://h:1: gone".into());
        let report = o.failure_report("j", Some(&lost), &|p| format!("rank {p}"));
        assert_eq!(
            report.last().map(String::as_str),
            Some(
                "error: job j: lost the coordinator etcd://h:1: gone (the launcher could not \
                 reach it either; rank 1 exited first: exit status: 3)"
            )
        );
        let report = o.failure_report("j", None, &|p| format!("rank {p}"));
        assert_eq!(
            report.last().map(String::as_str),
            Some("error: rank 1 failed first: exit status: 3")
        );
        assert!(
            report
                .iter()
                .any(|l| l.starts_with("xthunk launch: rank 0: signal: 9")
                    && l.ends_with("killed by the launcher")),
            "{report:?}"
        );
        assert!(out.contains("[rank 1] bye"), "{out}");
        // The killed ranks are gone (reaped: not even zombies).
        for line in out.lines().filter(|l| !l.contains("bye")) {
            let pid = line.rsplit(' ').next().unwrap();
            assert!(!Path::new(&format!("/proc/{pid}")).exists(), "{line}");
        }
    }

    #[test]
    fn ranks_that_exit_within_the_grace_are_not_killed() {
        let (o, _, err) = run(
            r#"if [ "$XTHUNK_RANK" = 2 ]; then exit 5; fi; sleep 0.3; exit 1"#,
            3,
            Duration::from_secs(20),
        );
        assert_eq!(o.first_failure.map(|f| f.0), Some(2));
        assert!(o.ranks.iter().all(|r| !r.1), "nobody killed: {err}");
    }

    #[test]
    fn a_stop_signal_is_forwarded_and_the_ranks_that_ignore_it_are_killed_after_the_grace() {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        // Polled before the spawn (nothing), then: the launcher got SIGTERM once the ranks
        // said they are ready.
        let mut polls = 0;
        let started = Instant::now();
        let o = run_ranks(
            &sh(),
            &script(concat!(
                r#"if [ "$XTHUNK_RANK" = 0 ]; then trap 'echo got it; exit 0' TERM; "#,
                r#"else trap '' TERM; fi; "#,
                r#"while :; do sleep 0.05; done"#
            )),
            2,
            &env,
            Duration::from_millis(400),
            &mut || {
                polls += 1;
                (polls == 10).then_some(signal_hook::consts::SIGTERM)
            },
            &mut |_, _| panic!("a stopped rank is no failure"),
            &mut out,
            &mut err,
        )
        .unwrap();
        assert!(started.elapsed() < Duration::from_secs(10));
        let s = o.stopped.clone().unwrap();
        assert_eq!((s.running, s.killed), (vec![0, 1], vec![1]));
        assert_eq!(o.exit_code(), 143);
        assert_eq!(
            o.stop_line("j", Duration::from_millis(400)).unwrap(),
            "xthunk launch: job j ended by SIGTERM: ranks 0-1 sent SIGTERM; rank 1 killed \
             after the grace period (400ms)"
        );
        assert!(String::from_utf8(err).unwrap().is_empty());
        let out = String::from_utf8(out).unwrap();
        assert!(out.contains("[rank 0] got it"), "{out}");
        assert_eq!(rank_spans(&[0, 1, 2, 5, 7, 8]), "ranks 0-2, 5, 7-8");
    }

    #[test]
    fn a_rank_that_cannot_start_is_an_error() {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let e = run_ranks(
            Path::new("/nonexistent/xthunk"),
            &[],
            2,
            &env,
            Duration::ZERO,
            &mut || None,
            &mut |_, _| None,
            &mut out,
            &mut err,
        )
        .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn ranks_die_with_the_thread_that_started_them() {
        // The launcher's main thread is what a rank's life is tied to; here a helper thread
        // plays it, and ends while its rank still sleeps.
        let child = std::thread::spawn(|| {
            let mut cmd = Command::new("sleep");
            cmd.arg("60");
            die_with_parent(&mut cmd);
            cmd.spawn().unwrap()
        })
        .join()
        .unwrap();
        let mut child = child;
        let started = Instant::now();
        let status = child.wait().unwrap();
        assert!(started.elapsed() < Duration::from_secs(10));
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9), "{status}");
    }
}
