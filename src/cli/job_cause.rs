//! The root cause of a launched job's failure as one of its processes reports it: processes
//! and global ranks named apart ([`Naming`]), consequences told from causes
//! ([`is_consequence`]), and the main thread's failure turned into the job's cause ([`fail`]).
//!
//! A process of a job holds `d` consecutive global ranks (`--devices d`); its coordinator
//! speaks of processes. With one rank per process the two are the same number and a process
//! is called `rank P`; with several it is `process P (ranks A–B, pid N, host H)`, what it
//! published under [`process_key`] when it joined.
//!
//! The cause is the first failure in causal order: a rank whose failure follows another's
//! (its communicator aborted by a peer, a driver or NCCL error after an abort, a process of
//! the job gone) waits a moment for that other failure and reports it, with its own error as
//! the consequence (`…; this rank aborts because of it (…)`); it publishes its own error only
//! when nothing else is known.

use super::error::CliError;
use super::rank_stop::ExitClaim;
use std::sync::Arc;
use std::time::{Duration, Instant};
use xthunk::core::collectives::CliqueProvider;
use xthunk::core::distributed::{Coordinator, CoordinatorSpec, DistributedError, RankFailure};
use xthunk::core::host::remove_job_segments;

/// The key under which process `p` of a job says which global ranks it holds, its pid and its
/// host (`ranks 2–3, pid 4242, host node7`).
pub fn process_key(p: usize) -> String {
    format!("xthunk.process/{p}")
}

/// This host's name (for the process description), `?` when unknown.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "?".into())
}

/// `rank 2` or `ranks 2–3`.
fn span(ranks: &std::ops::Range<usize>) -> String {
    if ranks.len() == 1 {
        format!("rank {}", ranks.start)
    } else {
        format!("ranks {}–{}", ranks.start, ranks.end.saturating_sub(1))
    }
}

/// How the processes and ranks of a job are named: process `p` holds the global ranks
/// `p·d .. p·d + d` (`d` = `per_process`, the same in every process of a job).
#[derive(Clone, Copy, Debug)]
pub struct Naming {
    pub per_process: usize,
}

impl Naming {
    /// The global ranks of process `p`.
    pub fn ranks(&self, p: usize) -> std::ops::Range<usize> {
        let first = p.saturating_mul(self.per_process);
        first..first.saturating_add(self.per_process)
    }

    /// What this process publishes under [`process_key`] (its ranks, pid and host).
    pub fn describe_self(&self, p: usize) -> String {
        format!(
            "{}, pid {}, host {}",
            span(&self.ranks(p)),
            std::process::id(),
            host_name()
        )
    }

    /// Process `p` in words: `rank P` with one rank per process, else `process P (ranks A–B,
    /// pid N, host H)` (pid and host as it published them, when they can be read).
    pub fn process(&self, c: Option<&dyn Coordinator>, p: usize) -> String {
        if self.per_process == 1 {
            return format!("rank {p}");
        }
        let published = c
            .and_then(|c| c.try_get(&process_key(p)).ok().flatten())
            .map(|v| String::from_utf8_lossy(&v).into_owned());
        process_words(p, published.as_deref(), &self.ranks(p))
    }

    /// A failure the coordinator reported (of a process) in words: as it is with one rank per
    /// process (`rank 1 failed: …`), else naming the process and its ranks.
    pub fn failure(&self, c: Option<&dyn Coordinator>, f: &RankFailure) -> String {
        if self.per_process == 1 || f.coordinator_lost.is_some() {
            return f.to_string();
        }
        format!("{} {}", self.process(c, f.rank), failure_words(&f.reason))
    }

    /// Which global ranks (of `world`) belong to a process that is gone: one the coordinator
    /// reports failed, or the one whose end is the published cause.
    pub fn gone(&self, c: &dyn Coordinator, world: usize) -> Vec<bool> {
        let mut gone = vec![false; world];
        let mut processes: Vec<usize> = c
            .failures()
            .into_iter()
            .filter(|f| f.coordinator_lost.is_none() && f.rank != c.rank())
            .map(|f| f.rank)
            .collect();
        if let Ok(Some(cause)) = c.published_cause() {
            processes.extend(ended_process(&cause).filter(|p| *p != c.rank()));
        }
        for p in processes {
            for g in self.ranks(p) {
                if let Some(x) = gone.get_mut(g) {
                    *x = true;
                }
            }
        }
        gone
    }
}

/// `process P (WHAT)`, `WHAT` being what the process published (`ranks 2–3, pid …`) or else
/// its `ranks`; `rank P` when it published that it holds one rank (the launcher, which does
/// not know how many ranks a process holds, passes an empty range).
pub fn process_words(p: usize, published: Option<&str>, ranks: &std::ops::Range<usize>) -> String {
    match published {
        Some(text) if text.starts_with("ranks ") => format!("process {p} ({text})"),
        Some(_) => format!("rank {p}"),
        None if ranks.len() > 1 => format!("process {p} ({})", span(ranks)),
        None => format!("rank {p}"),
    }
}

/// The process whose end a cause reports (`rank 1 failed: its process ended …`, `process 1
/// (…) was killed by …`, `process 1 (…) failed: its process ended …`), if it reports one.
pub fn ended_process(cause: &str) -> Option<usize> {
    let (who, rest) = if let Some(rest) = cause.strip_prefix("process ") {
        let (p, rest) = rest.split_once(' ')?;
        (p, rest.split_once(") ").map(|(_, r)| r)?)
    } else {
        let rest = cause.strip_prefix("rank ")?;
        rest.split_once(' ')?
    };
    let ended = rest.starts_with("was killed by ")
        || rest.starts_with("failed: its process ended")
        || rest.starts_with("failed: its connection to the coordinator closed");
    ended.then(|| who.parse().ok()).flatten()
}

/// `failed: REASON`, or `was killed by SIGKILL` when the reason is a process's end by a
/// signal (`its process ended (signal: 9 (SIGKILL))`).
pub fn failure_words(reason: &str) -> String {
    let signal = reason
        .strip_prefix("its process ended (signal: ")
        .and_then(|rest| rest.split_once('('))
        .and_then(|(_, name)| name.split_once(')'))
        .map(|(name, _)| name.to_string());
    match signal {
        Some(name) if !name.is_empty() => format!("was killed by {name} ({reason})"),
        _ => format!("failed: {reason}"),
    }
}

/// What the executor's error says when a communicator failed asynchronously (a peer failed,
/// aborted, or its process ended): this rank's failure is then most likely another's.
const PEER_FAILED: &str = "collective watchdog failed";

/// Words of errors that follow another failure rather than cause one: a communicator aborted
/// or failed asynchronously (a peer failed or aborted it), and the driver and collective
/// library errors that an abort makes later calls return (a kernel of an aborted
/// communicator ends as a failed launch).
const CONSEQUENCES: [&str; 10] = [
    PEER_FAILED,
    "CUDA_ERROR_LAUNCH_FAILED",
    "hipErrorLaunchFailure",
    "ncclRemoteError",
    "ncclSystemError",
    "ncclInternalError",
    "rcclRemoteError",
    "communicator was aborted",
    "aborted because",
    "collectives were aborted",
];

/// Whether an error (`message`, one line) is a consequence of another failure (see
/// [`CONSEQUENCES`]) rather than a cause: a collective timeout, a mismatch or a deadline are
/// causes.
pub fn is_consequence(message: &str) -> bool {
    CONSEQUENCES.iter().any(|w| message.contains(w))
}

/// How long a rank whose failure is a consequence waits for its cause (published by the
/// rank that failed first, or by the launcher when a process ended, or reported by the
/// coordinator).
pub const PEER_CAUSE_WAIT: Duration = Duration::from_secs(3);

/// The cause of this rank's failure when another's is known: the published cause, else a
/// failure of another process the coordinator reports, waiting up to `limit` for either (and
/// no longer once `found_here` says that a rank of this process found the cause).
pub fn wait_for_cause(
    c: &dyn Coordinator,
    naming: Naming,
    limit: Duration,
    found_here: &dyn Fn() -> bool,
) -> Option<String> {
    let until = Instant::now() + limit;
    loop {
        if let Ok(Some(cause)) = c.published_cause() {
            return Some(cause);
        }
        if let Some(f) = c
            .failures()
            .into_iter()
            .find(|f| f.rank != c.rank() || f.coordinator_lost.is_some())
        {
            let text = naming.failure(Some(c), &f);
            return Some(c.publish_cause(&text).unwrap_or(text));
        }
        if Instant::now() >= until || found_here() {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What a failure of the main thread (`e`) says about the job's coordinator and the other
/// ranks.
enum Blame {
    /// The coordinator is lost: nothing can be published or read.
    CoordinatorLost,
    /// Another process failed (as the coordinator reports it).
    Another(RankFailure),
    /// This rank failed by itself.
    Own,
}

fn blame(e: &CliError, rank: usize) -> Blame {
    let CliError::Core(xthunk::Error::Distributed(d)) = e else {
        return Blame::Own;
    };
    match d {
        DistributedError::CoordinatorLost { .. } => Blame::CoordinatorLost,
        DistributedError::RankFailed { failure, .. } if failure.coordinator_lost.is_some() => {
            Blame::CoordinatorLost
        }
        DistributedError::RankFailed { failure, .. } if failure.rank != rank => {
            Blame::Another(failure.clone())
        }
        _ => Blame::Own,
    }
}

/// When the main thread's failure `e` (`message`, one line) comes from the loss of the
/// coordinator `spec` (this rank's error, a failure its coordinator reported, or another
/// rank's that its collectives carried here): `lost the coordinator SPEC: WHY`.
fn lost_coordinator(
    e: &CliError,
    message: &str,
    job: &str,
    c: &dyn Coordinator,
    spec: &CoordinatorSpec,
) -> Option<String> {
    if matches!(blame(e, c.rank()), Blame::CoordinatorLost) {
        return Some(cause_text(message, job));
    }
    if let Some(f) = c
        .failures()
        .into_iter()
        .find(|f| f.coordinator_lost.is_some())
    {
        return Some(f.to_string());
    }
    // Carried as text (a collective aborted by a rank that lost it): up to the next clause.
    let needle = format!("lost the coordinator {spec}: ");
    let at = message.find(&needle)?;
    let rest = message.get(at..)?;
    Some(rest.split("; ").next().unwrap_or(rest).to_string())
}

/// `message` as a cause of job `job`'s failure: without a leading "job `J`: " (the launcher
/// names the job).
pub fn cause_text(message: &str, job: &str) -> String {
    let prefix = format!("job `{job}`: ");
    message.strip_prefix(&prefix).unwrap_or(message).to_string()
}

/// The global rank an execution's error names (`rank R of W: …`), if it names one.
fn failed_rank(message: &str) -> Option<usize> {
    let at = message.find("rank ")?;
    let rest = message.get(at + 5..)?;
    let (n, rest) = rest.split_once(' ')?;
    rest.starts_with("of ").then(|| n.parse().ok()).flatten()
}

/// What the failing process is: its job, coordinator, naming and the global ranks it holds.
pub struct Failing<'a> {
    pub job: &'a str,
    pub spec: &'a CoordinatorSpec,
    pub naming: Naming,
    pub exit: &'a ExitClaim,
}

/// The main thread failed with `e`: clean up and return it, unless the failure handler is
/// already ending the process.
pub fn fail(
    e: CliError,
    at: Failing<'_>,
    provider: Arc<dyn CliqueProvider>,
    coordinator: Arc<dyn Coordinator>,
) -> CliError {
    let Failing {
        job,
        spec,
        naming,
        exit,
    } = at;
    exit.release();
    if !exit.claim() {
        // The failure handler exits the process (it names the dead rank); let it.
        let since = Instant::now();
        while since.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(50));
        }
        return e;
    }
    let message = super::error::one_line(&e);
    provider.abort_all(&message);
    remove_job_segments(job);
    // The cause of the job's failure: the one published first, else this rank's own or the
    // failure of another it was told of (then published for the others and the launcher).
    let lost = lost_coordinator(&e, &message, job, coordinator.as_ref(), spec);
    let own_text = cause_text(&message, job);
    let c = coordinator.as_ref();
    let e = match (lost, blame(&e, c.rank())) {
        // The coordinator is gone: it is the cause, named first (and asked nothing more).
        (Some(lost), _) if lost == own_text => CliError::Usage(format!("{lost} (job {job})")),
        (Some(lost), _) => CliError::Usage(format!(
            "{lost}; this rank aborts because of it ({message})"
        )),
        (None, Blame::CoordinatorLost) => e,
        (None, Blame::Another(failure)) => {
            let failure = naming.failure(Some(c), &failure);
            match c.publish_cause(&failure) {
                Ok(root) if root != failure => CliError::Usage(format!(
                    "{root}; this rank aborts because of it ({message})"
                )),
                _ if naming.per_process > 1 => CliError::Usage(format!("{failure} (job {job})")),
                _ => e,
            }
        }
        (None, Blame::Own) => {
            // A failure that follows another's (a communicator a peer aborted, a driver or
            // NCCL error after an abort): the failure that came first is the cause, published
            // by whoever saw it (or reported by the coordinator); wait for it a moment. A
            // process of the job already known gone is the cause whatever this error is.
            let wait = if is_consequence(&message) {
                PEER_CAUSE_WAIT
            } else {
                Duration::ZERO
            };
            let known_gone = c
                .failures()
                .iter()
                .any(|f| f.rank != c.rank() && f.coordinator_lost.is_none());
            let peer = (known_gone || !wait.is_zero())
                .then(|| wait_for_cause(c, naming, wait, &|| false))
                .flatten();
            match peer {
                Some(root) => CliError::Usage(format!(
                    "{root}; this rank aborts because of it ({message})"
                )),
                None => {
                    let by = failed_rank(&message).unwrap_or_else(|| naming.ranks(c.rank()).start);
                    let cause = format!("{own_text} (found by rank {by})");
                    match c.publish_cause(&cause) {
                        // Another's failure was published meanwhile: it came first.
                        Ok(root) if root != cause => CliError::Usage(format!(
                            "{root}; this rank aborts because of it ({message})"
                        )),
                        Ok(_) => e,
                        Err(err) => {
                            tracing::warn!(error = %err, "could not publish the cause of the failure");
                            e
                        }
                    }
                }
            }
        }
    };
    drop(provider);
    // A rank that aborts because of another's failure says so as it leaves (its departure is
    // a consequence, never a cause); the coordinator is not lost then.
    if let CliError::Usage(text) = &e
        && let Some((root, _)) = text.split_once("; this rank aborts because of it (")
        && !root.starts_with("lost the coordinator")
    {
        coordinator.abandon(root);
    }
    // Dropped without shutdown, the coordinator revokes this rank's lease: the other ranks
    // learn at once that it failed, instead of after the TTL.
    if Arc::strong_count(&coordinator) > 1 {
        tracing::warn!("the coordinator is still in use; its lease expires with its TTL");
    }
    drop(coordinator);
    e
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn processes_of_several_ranks_are_named_as_processes() {
        let one = Naming { per_process: 1 };
        let two = Naming { per_process: 2 };
        let f = RankFailure::new(1, "its process ended (signal: 9 (SIGKILL))");
        assert_eq!(one.failure(None, &f), f.to_string());
        assert_eq!(
            two.failure(None, &f),
            "process 1 (ranks 2–3) was killed by SIGKILL (its process ended (signal: 9 \
             (SIGKILL)))"
        );
        let g = RankFailure::new(0, "its connection closed without shutdown");
        assert_eq!(
            two.failure(None, &g),
            "process 0 (ranks 0–1) failed: its connection closed without shutdown"
        );
        assert_eq!(
            process_words(1, Some("ranks 2–3, pid 7, host h"), &(0..0)),
            "process 1 (ranks 2–3, pid 7, host h)"
        );
        assert_eq!(
            process_words(1, Some("rank 1, pid 7, host h"), &(0..0)),
            "rank 1"
        );
        assert_eq!(process_words(1, None, &(0..0)), "rank 1");
    }

    #[test]
    fn consequences_are_told_from_causes() {
        assert!(is_consequence(
            "rank 0 of 4 failed: cuda: cuStreamQuery failed: CUDA_ERROR_LAUNCH_FAILED (719)"
        ));
        assert!(!is_consequence(
            "rank 0 of 4: collective #3 timed out after 3s waiting for rank 2"
        ));
        assert_eq!(failed_rank("job: rank 2 of 4: x"), Some(2));
        assert_eq!(failed_rank("rank 2 failed"), None);
        assert_eq!(
            ended_process("rank 1 failed: its process ended (signal: 9 (SIGKILL))"),
            Some(1)
        );
        assert_eq!(
            ended_process("process 1 (ranks 2–3, pid 7, host h) was killed by SIGKILL (x)"),
            Some(1)
        );
        assert_eq!(
            ended_process("rank 0 of 4 failed: timed out (found by rank 0)"),
            None
        );
    }
}
