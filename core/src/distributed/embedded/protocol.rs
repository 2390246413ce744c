//! The embedded coordinator's wire format: one JSON object per line on a Unix socket.
//!
//! Two kinds of connection:
//!
//! - the **session** of a rank: the client sends [`Request::Join`]; the server answers
//!   [`Response::Joined`] (or an error) and from then on pushes a [`Response::Failure`] line
//!   for every failure of the job; the client sends [`Request::Heartbeat`] every TTL/3 and
//!   ends with [`Request::Leave`]. A session that ends without `Leave`, or stays silent for a
//!   TTL, is a failed rank;
//! - one connection per **call** ([`Request::Set`], [`Request::Get`], [`Request::Barrier`]):
//!   one request line, one response line (a waiting call waits on the server).

use super::super::{DistributedError, RankFailure};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};
use std::time::Duration;

/// The longest line either side accepts (a value of `set` is meant to be small).
pub const MAX_LINE: usize = 8 << 20;

/// What a client asks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Opens a session: `rank` of `world` ranks of `job`, heartbeats every `ttl_ms / 3`.
    Join {
        job: String,
        rank: usize,
        world: usize,
        ttl_ms: u64,
    },
    /// A session is alive.
    Heartbeat,
    /// A session ends: the rank leaves the job (cleanly after its shutdown barrier when
    /// `clean`; otherwise the other ranks see it failed, with `reason`).
    Leave { clean: bool, reason: Option<String> },
    /// Sets `key` of `job`.
    Set {
        job: String,
        rank: usize,
        key: String,
        value: Vec<u8>,
    },
    /// The value of `key`: now (`wait_ms` absent) or once some rank sets it.
    Get {
        job: String,
        rank: usize,
        key: String,
        wait_ms: Option<u64>,
    },
    /// Round `round` of barrier `name` (`internal`: the shutdown barrier's namespace).
    Barrier {
        job: String,
        rank: usize,
        internal: bool,
        name: String,
        round: u64,
        wait_ms: u64,
    },
}

/// What the server answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Response {
    /// The session is open; `failures` are those of the job so far.
    Joined { failures: Vec<WireFailure> },
    /// A failure of the job (pushed on every session).
    Failure(WireFailure),
    /// A call succeeded.
    Ok,
    /// The answer of [`Request::Get`].
    Value { value: Option<Vec<u8>> },
    /// A call failed.
    Error(WireError),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireFailure {
    pub rank: usize,
    pub reason: String,
}

impl From<WireFailure> for RankFailure {
    fn from(f: WireFailure) -> Self {
        RankFailure {
            rank: f.rank,
            reason: f.reason,
        }
    }
}

impl From<&RankFailure> for WireFailure {
    fn from(f: &RankFailure) -> Self {
        WireFailure {
            rank: f.rank,
            reason: f.reason.clone(),
        }
    }
}

/// The errors of [`DistributedError`] that the server reports, without the job id (the
/// client knows it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WireError {
    GetTimeout {
        key: String,
        wait_ms: u64,
    },
    BarrierTimeout {
        name: String,
        wait_ms: u64,
        missing: Vec<usize>,
        dead: Vec<usize>,
    },
    RankFailed(WireFailure),
    Config {
        message: String,
    },
    /// Anything else (a malformed request, a session call on a call connection).
    Protocol {
        message: String,
    },
}

impl WireError {
    /// The error a client of `job` reports.
    pub fn into_error(self, job: &str) -> DistributedError {
        let job = job.to_string();
        match self {
            WireError::GetTimeout { key, wait_ms } => DistributedError::GetTimeout {
                job,
                key,
                timeout: Duration::from_millis(wait_ms),
            },
            WireError::BarrierTimeout {
                name,
                wait_ms,
                missing,
                dead,
            } => DistributedError::BarrierTimeout {
                job,
                name,
                timeout: Duration::from_millis(wait_ms),
                missing,
                dead,
            },
            WireError::RankFailed(f) => DistributedError::RankFailed {
                job,
                failure: f.into(),
            },
            WireError::Config { message } => DistributedError::Config(message),
            WireError::Protocol { message } => DistributedError::Store {
                job,
                backend: super::BACKEND,
                op: "request".into(),
                message,
            },
        }
    }
}

/// `d` in whole milliseconds (saturating).
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Writes `msg` as one line.
pub fn write_line<T: Serialize>(w: &mut impl Write, msg: &T) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(msg).map_err(std::io::Error::other)?;
    line.push(b'\n');
    w.write_all(&line)?;
    w.flush()
}

/// Reads one line as a `T`: `Ok(None)` at the end of the stream.
pub fn read_line<T: for<'de> Deserialize<'de>>(r: &mut impl BufRead) -> std::io::Result<Option<T>> {
    let mut line = Vec::new();
    let n = std::io::Read::take(&mut *r, MAX_LINE as u64 + 1).read_until(b'\n', &mut line)?;
    if n == 0 {
        return Ok(None);
    }
    if line.len() > MAX_LINE {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a line longer than {MAX_LINE} bytes"),
        ));
    }
    serde_json::from_slice(&line)
        .map(Some)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip() {
        let msgs = vec![
            Request::Join {
                job: "j".into(),
                rank: 1,
                world: 2,
                ttl_ms: 5000,
            },
            Request::Heartbeat,
            Request::Set {
                job: "j".into(),
                rank: 0,
                key: "k".into(),
                value: vec![0, 255],
            },
        ];
        let mut buf = Vec::new();
        for m in &msgs {
            write_line(&mut buf, m).unwrap();
        }
        assert_eq!(buf.iter().filter(|b| **b == b'\n').count(), 3);
        let mut r = std::io::Cursor::new(buf);
        for m in &msgs {
            assert_eq!(read_line::<Request>(&mut r).unwrap().as_ref(), Some(m));
        }
        assert_eq!(read_line::<Request>(&mut r).unwrap(), None);
        let bad = read_line::<Request>(&mut std::io::Cursor::new(b"{\"op\":\"nope\"}\n".to_vec()));
        assert!(bad.is_err());
    }
}
