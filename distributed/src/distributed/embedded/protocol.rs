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
//!
//! Values travel as hex strings (two characters a byte). A value may have up to
//! [`MAX_VALUE`] bytes (the client refuses a larger one before sending it, the server too),
//! so that every line fits in [`MAX_LINE`]; a longer line is read to its end and answered
//! with an error, never dropped.

use super::super::{DistributedError, RankFailure};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};
use std::time::Duration;

/// The largest value of [`Request::Set`]: 4 MiB (coordinator values are meant to be small:
/// ids, addresses, positions, causes).
pub const MAX_VALUE: usize = 4 << 20;

/// The longest line either side accepts: a value of [`MAX_VALUE`] bytes in hex, and room for
/// the rest of the request (a key of at most 1,024 bytes, the job id, JSON escapes).
pub const MAX_LINE: usize = 2 * MAX_VALUE + (64 << 10);

/// How much of an over-long line is read (and dropped) to answer it with an error; a peer
/// that sends more without a line end is cut off.
const MAX_DRAIN: usize = 32 * MAX_LINE;

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
    /// Sets `key` of `job` (with `if_absent`, only if it has no value yet: the answer is then
    /// [`Response::Value`] with the value that holds).
    Set {
        job: String,
        rank: usize,
        key: String,
        #[serde(with = "hex_bytes")]
        value: Vec<u8>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        if_absent: bool,
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
    /// The answer of [`Request::Get`] (and of a [`Request::Set`] `if_absent`).
    Value {
        #[serde(with = "hex_opt")]
        value: Option<Vec<u8>>,
    },
    /// A call failed.
    Error(WireError),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireFailure {
    pub rank: usize,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coordinator_lost: Option<String>,
}

impl From<WireFailure> for RankFailure {
    fn from(f: WireFailure) -> Self {
        RankFailure {
            rank: f.rank,
            reason: f.reason,
            coordinator_lost: f.coordinator_lost,
        }
    }
}

impl From<&RankFailure> for WireFailure {
    fn from(f: &RankFailure) -> Self {
        WireFailure {
            rank: f.rank,
            reason: f.reason.clone(),
            coordinator_lost: f.coordinator_lost.clone(),
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
    /// A value of [`Request::Set`] larger than [`MAX_VALUE`].
    ValueTooLarge {
        key: String,
        size: usize,
        limit: usize,
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
            WireError::ValueTooLarge { key, size, limit } => DistributedError::ValueTooLarge {
                job,
                backend: super::BACKEND,
                key,
                size,
                limit,
            },
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

/// Reads one line as a `T`: `Ok(None)` at the end of the stream. A line longer than
/// [`MAX_LINE`] is an error, after the rest of it was read and dropped (up to a bound), so
/// that a peer still writing it can read the answer.
pub fn read_line<T: for<'de> Deserialize<'de>>(r: &mut impl BufRead) -> std::io::Result<Option<T>> {
    let mut line = Vec::new();
    let n = std::io::Read::take(&mut *r, MAX_LINE as u64 + 1).read_until(b'\n', &mut line)?;
    if n == 0 {
        return Ok(None);
    }
    if line.len() > MAX_LINE {
        if line.last() != Some(&b'\n') {
            drain_line(r)?;
        }
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "a line longer than {MAX_LINE} bytes, the limit of the embedded coordinator's \
                 protocol (values of at most {MAX_VALUE} bytes)"
            ),
        ));
    }
    serde_json::from_slice(&line)
        .map(Some)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Reads and drops the rest of a line (through its `\n`), at most [`MAX_DRAIN`] bytes.
fn drain_line(r: &mut impl BufRead) -> std::io::Result<()> {
    let mut dropped = 0usize;
    while dropped < MAX_DRAIN {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            return Ok(());
        }
        if let Some(end) = buf.iter().position(|b| *b == b'\n') {
            r.consume(end + 1);
            return Ok(());
        }
        let n = buf.len();
        r.consume(n);
        dropped = dropped.saturating_add(n);
    }
    Ok(())
}

/// Lowercase hex, two characters a byte.
fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len().saturating_mul(2));
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    s
}

/// The bytes of a hex string (either case).
fn from_hex(s: &str) -> Result<Vec<u8>, String> {
    fn nibble(c: u8) -> Result<u8, String> {
        match c {
            b'0'..=b'9' => Ok(c - b'0'),
            b'a'..=b'f' => Ok(c - b'a' + 10),
            b'A'..=b'F' => Ok(c - b'A' + 10),
            _ => Err(format!("`{}` is not a hex digit", char::from(c))),
        }
    }
    let s = s.as_bytes();
    if !s.len().is_multiple_of(2) {
        return Err(format!("a hex value of odd length {}", s.len()));
    }
    s.chunks_exact(2)
        .map(|p| Ok((nibble(p[0])? << 4) | nibble(p[1])?))
        .collect()
}

/// `Vec<u8>` as a hex string.
mod hex_bytes {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::to_hex(v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = std::borrow::Cow::<str>::deserialize(d)?;
        super::from_hex(&text).map_err(D::Error::custom)
    }
}

/// `Option<Vec<u8>>` as a hex string or null.
mod hex_opt {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => s.serialize_some(&super::to_hex(v)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        let text = Option::<std::borrow::Cow<str>>::deserialize(d)?;
        text.map(|t| super::from_hex(&t).map_err(D::Error::custom))
            .transpose()
    }
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
                value: vec![0, 255, 16, 9],
                if_absent: false,
            },
            Request::Set {
                job: "j".into(),
                rank: 1,
                key: "k".into(),
                value: vec![],
                if_absent: true,
            },
        ];
        let mut buf = Vec::new();
        for m in &msgs {
            write_line(&mut buf, m).unwrap();
        }
        assert_eq!(buf.iter().filter(|b| **b == b'\n').count(), 4);
        // Values are hex: two characters a byte, not a JSON array of numbers.
        assert!(
            String::from_utf8_lossy(&buf).contains(r#""value":"00ff1009""#),
            "{}",
            String::from_utf8_lossy(&buf)
        );
        let mut r = std::io::Cursor::new(buf);
        for m in &msgs {
            assert_eq!(read_line::<Request>(&mut r).unwrap().as_ref(), Some(m));
        }
        assert_eq!(read_line::<Request>(&mut r).unwrap(), None);
        let bad = read_line::<Request>(&mut std::io::Cursor::new(b"{\"op\":\"nope\"}\n".to_vec()));
        assert!(bad.is_err());
        for v in [Some(vec![1u8, 2, 254]), None] {
            let r = Response::Value { value: v };
            let mut buf = Vec::new();
            write_line(&mut buf, &r).unwrap();
            let back = read_line::<Response>(&mut std::io::Cursor::new(buf)).unwrap();
            assert_eq!(back, Some(r));
        }
        let odd = br#"{"op":"set","job":"j","rank":0,"key":"k","value":"abc"}"#.to_vec();
        assert!(read_line::<Request>(&mut std::io::Cursor::new(odd)).is_err());
        let not_hex = br#"{"op":"set","job":"j","rank":0,"key":"k","value":"zz"}"#.to_vec();
        assert!(read_line::<Request>(&mut std::io::Cursor::new(not_hex)).is_err());
    }

    #[test]
    fn an_over_long_line_is_an_error_and_the_next_line_is_read() {
        let mut buf = vec![b'x'; MAX_LINE + 10];
        buf.push(b'\n');
        write_line(&mut buf, &Request::Heartbeat).unwrap();
        let mut r = std::io::BufReader::new(std::io::Cursor::new(buf));
        let e = read_line::<Request>(&mut r).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        assert!(e.to_string().contains(&MAX_LINE.to_string()), "{e}");
        // The rest of the long line was dropped: the next one reads.
        assert_eq!(
            read_line::<Request>(&mut r).unwrap(),
            Some(Request::Heartbeat)
        );
    }

    #[test]
    fn the_largest_value_fits_in_a_line() {
        let r = Request::Set {
            job: "j".repeat(128),
            rank: usize::MAX,
            key: "\u{1}".repeat(1024),
            value: vec![0xab; MAX_VALUE],
            if_absent: true,
        };
        let mut buf = Vec::new();
        write_line(&mut buf, &r).unwrap();
        assert!(buf.len() <= MAX_LINE, "{} > {MAX_LINE}", buf.len());
        let back = read_line::<Request>(&mut std::io::Cursor::new(buf)).unwrap();
        assert_eq!(back, Some(r));
    }
}
