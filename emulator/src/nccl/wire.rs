//! The messages emulator processes exchange for a clique that spans processes, and their
//! framing on a Unix stream socket.
//!
//! A frame is a tag byte, a little-endian `u64` payload length, then the payload. Lengths are
//! bounded before anything is allocated: control messages by [`MAX_CONTROL`], a `Data`
//! message by the largest buffer an emulated device of this process can hold
//! (`XTHUNK_EMU_MEMORY`) plus its header. Integers are little-endian; strings are a `u32`
//! length and UTF-8 bytes (lossily decoded).

use super::reduce::{Dt, Red};
use super::types::{Meta, OpKind, SlotKey};
use std::io::{self, Read, Write};

/// The largest control message (everything but `Data`'s payload): a `Join` of many ranks, a
/// reason text.
pub(super) const MAX_CONTROL: u64 = 16 << 20;

/// The wire protocol's version: a peer speaking another one is refused.
pub(super) const VERSION: u32 = 1;

/// One message between two processes of a clique.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Msg {
    /// The sender holds `ranks` of the clique made from `uid` (sent first on every
    /// connection, and again when the sender gains ranks).
    Join {
        version: u32,
        pid: u32,
        nranks: u32,
        uid: Box<[u8; 128]>,
        ranks: Vec<u32>,
    },
    /// A rank's part of a slot: its metadata and its input (when the receiver needs it), or
    /// why the input could not be read.
    Data {
        key: SlotKey,
        place: u32,
        meta: Meta,
        input: Result<Option<Vec<u8>>, String>,
    },
    /// The receiver of a message performed it (`Ok`) or failed it (the code and why).
    Done {
        key: SlotKey,
        result: Result<(), (i32, String)>,
    },
    /// A rank's contribution to the `round`-th `ncclCommSplit` of the clique.
    Split {
        round: u64,
        rank: u32,
        color: i32,
        key: i32,
    },
    /// The sender aborted the clique (`ncclCommAbort`, a failed initialization).
    Abort { reason: String },
    /// The sender destroyed all its communicators of the clique: its connections close next.
    Leave,
}

const JOIN: u8 = 1;
const DATA: u8 = 2;
const DONE: u8 = 3;
const SPLIT: u8 = 4;
const ABORT: u8 = 5;
const LEAVE: u8 = 6;

fn put_u32(b: &mut Vec<u8>, v: u32) {
    b.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(b: &mut Vec<u8>, v: u64) {
    b.extend_from_slice(&v.to_le_bytes());
}

fn put_str(b: &mut Vec<u8>, s: &str) {
    // Texts are ours (reasons, messages): truncated to a sane length.
    let s = &s.as_bytes()[..s.len().min(64 << 10)];
    put_u32(b, s.len() as u32);
    b.extend_from_slice(s);
}

fn put_key(b: &mut Vec<u8>, k: SlotKey) {
    match k {
        SlotKey::Coll(n) => {
            b.push(0);
            put_u64(b, n);
            put_u64(b, 0);
            put_u64(b, 0);
        }
        SlotKey::P2p(s, r, n) => {
            b.push(1);
            put_u64(b, n);
            put_u64(b, s as u64);
            put_u64(b, r as u64);
        }
    }
}

fn put_meta(b: &mut Vec<u8>, m: &Meta) {
    b.push(m.kind.code());
    put_u64(b, m.bytes as u64);
    b.push(m.dt.code());
    b.push(m.op.code());
    put_u64(b, m.root as u64);
}

/// The frame of `m`: its header and fixed part, and the payload bytes that follow them (a
/// `Data` message's input, written without copying it).
pub(super) fn encode(m: &Msg) -> (Vec<u8>, &[u8]) {
    let mut b = Vec::with_capacity(64);
    let mut tail: &[u8] = &[];
    let tag = match m {
        Msg::Join {
            version,
            pid,
            nranks,
            uid,
            ranks,
        } => {
            put_u32(&mut b, *version);
            put_u32(&mut b, *pid);
            put_u32(&mut b, *nranks);
            b.extend_from_slice(&uid[..]);
            put_u32(&mut b, ranks.len() as u32);
            for r in ranks {
                put_u32(&mut b, *r);
            }
            JOIN
        }
        Msg::Data {
            key,
            place,
            meta,
            input,
        } => {
            put_key(&mut b, *key);
            put_u32(&mut b, *place);
            put_meta(&mut b, meta);
            match input {
                Ok(None) => b.push(0),
                Ok(Some(d)) => {
                    b.push(1);
                    put_u64(&mut b, d.len() as u64);
                    tail = d;
                }
                Err(e) => {
                    b.push(2);
                    put_str(&mut b, e);
                }
            }
            DATA
        }
        Msg::Done { key, result } => {
            put_key(&mut b, *key);
            match result {
                Ok(()) => b.push(0),
                Err((code, msg)) => {
                    b.push(1);
                    put_u32(&mut b, *code as u32);
                    put_str(&mut b, msg);
                }
            }
            DONE
        }
        Msg::Split {
            round,
            rank,
            color,
            key,
        } => {
            put_u64(&mut b, *round);
            put_u32(&mut b, *rank);
            put_u32(&mut b, *color as u32);
            put_u32(&mut b, *key as u32);
            SPLIT
        }
        Msg::Abort { reason } => {
            put_str(&mut b, reason);
            ABORT
        }
        Msg::Leave => LEAVE,
    };
    let len = (b.len() + tail.len()) as u64;
    let mut frame = Vec::with_capacity(9 + b.len());
    frame.push(tag);
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(&b);
    (frame, tail)
}

/// Writes one message.
pub(super) fn write(w: &mut impl Write, m: &Msg) -> io::Result<()> {
    let (head, tail) = encode(m);
    w.write_all(&head)?;
    if !tail.is_empty() {
        w.write_all(tail)?;
    }
    w.flush()
}

/// A cursor over a payload: every read is checked against its end.
struct Cur<'a> {
    b: &'a [u8],
}

impl<'a> Cur<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.b.len() < n {
            return Err("a message is shorter than its fields".into());
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, String> {
        let s = self.take(4)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }

    fn u64(&mut self) -> Result<u64, String> {
        let s = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(u64::from_le_bytes(a))
    }

    fn usize(&mut self) -> Result<usize, String> {
        usize::try_from(self.u64()?).map_err(|_| "a size does not fit this machine".to_string())
    }

    fn str(&mut self) -> Result<String, String> {
        let n = self.u32()? as usize;
        Ok(String::from_utf8_lossy(self.take(n)?).into_owned())
    }

    fn key(&mut self) -> Result<SlotKey, String> {
        let kind = self.u8()?;
        let n = self.u64()?;
        let s = self.usize()?;
        let r = self.usize()?;
        match kind {
            0 => Ok(SlotKey::Coll(n)),
            1 => Ok(SlotKey::P2p(s, r, n)),
            k => Err(format!("unknown slot kind {k}")),
        }
    }

    fn meta(&mut self) -> Result<Meta, String> {
        let kind = self.u8()?;
        let kind = OpKind::from_code(kind).ok_or(format!("unknown operation {kind}"))?;
        let bytes = self.usize()?;
        let dt = self.u8()?;
        let dt = Dt::from(dt.into()).ok_or(format!("unknown data type {dt}"))?;
        let op = self.u8()?;
        let op = Red::from(op.into()).ok_or(format!("unknown reduction {op}"))?;
        let root = self.usize()?;
        Ok(Meta {
            kind,
            bytes,
            dt,
            op,
            root,
        })
    }
}

/// Reads one message; `Ok(None)` at a clean end of stream (between messages). `max_data`
/// bounds a `Data` message's input.
pub(super) fn read(r: &mut impl Read, max_data: u64) -> Result<Option<Msg>, String> {
    let mut head = [0u8; 9];
    let mut got = 0;
    while got < head.len() {
        match r.read(&mut head[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err("the connection closed inside a message".into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("reading a message: {e}")),
        }
    }
    let tag = head[0];
    let mut l = [0u8; 8];
    l.copy_from_slice(&head[1..]);
    let len = u64::from_le_bytes(l);
    let limit = if tag == DATA {
        max_data.saturating_add(MAX_CONTROL)
    } else {
        MAX_CONTROL
    };
    if len > limit {
        return Err(format!(
            "a message of {len} bytes (tag {tag}) is larger than the limit of {limit} bytes"
        ));
    }
    let len = usize::try_from(len).map_err(|_| "a message does not fit this machine")?;
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload)
        .map_err(|e| format!("reading a message of {len} bytes: {e}"))?;
    let mut c = Cur { b: &payload };
    let m = match tag {
        JOIN => {
            let version = c.u32()?;
            let pid = c.u32()?;
            let nranks = c.u32()?;
            let mut uid = Box::new([0u8; 128]);
            uid.copy_from_slice(c.take(128)?);
            let n = c.u32()? as usize;
            if n > c.b.len() / 4 {
                return Err("a join lists more ranks than it holds".into());
            }
            let mut ranks = Vec::with_capacity(n);
            for _ in 0..n {
                ranks.push(c.u32()?);
            }
            Msg::Join {
                version,
                pid,
                nranks,
                uid,
                ranks,
            }
        }
        DATA => {
            let key = c.key()?;
            let place = c.u32()?;
            let meta = c.meta()?;
            let input = match c.u8()? {
                0 => Ok(None),
                1 => {
                    let n = c.usize()?;
                    if n as u64 > max_data {
                        return Err(format!(
                            "an input of {n} bytes is larger than this process's emulated device memory"
                        ));
                    }
                    Ok(Some(c.take(n)?.to_vec()))
                }
                2 => Err(c.str()?),
                k => return Err(format!("unknown input marker {k}")),
            };
            Msg::Data {
                key,
                place,
                meta,
                input,
            }
        }
        DONE => {
            let key = c.key()?;
            let result = match c.u8()? {
                0 => Ok(()),
                _ => {
                    let code = c.u32()? as i32;
                    Err((code, c.str()?))
                }
            };
            Msg::Done { key, result }
        }
        SPLIT => Msg::Split {
            round: c.u64()?,
            rank: c.u32()?,
            color: c.u32()? as i32,
            key: c.u32()? as i32,
        },
        ABORT => Msg::Abort { reason: c.str()? },
        LEAVE => Msg::Leave,
        t => return Err(format!("unknown message tag {t}")),
    };
    if !c.b.is_empty() {
        return Err(format!("{} stray bytes after a message", c.b.len()));
    }
    Ok(Some(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(m: Msg) {
        let mut buf = vec![];
        assert!(write(&mut buf, &m).is_ok());
        let mut r: &[u8] = &buf;
        let back = read(&mut r, 1 << 20);
        assert_eq!(back, Ok(Some(m)));
        assert!(r.is_empty());
        assert_eq!(read(&mut r, 1 << 20), Ok(None));
    }

    #[test]
    fn messages_round_trip() {
        let meta = Meta {
            kind: OpKind::ReduceScatter,
            bytes: 12,
            dt: Dt::BF16,
            op: Red::Max,
            root: 3,
        };
        round_trip(Msg::Join {
            version: VERSION,
            pid: 77,
            nranks: 4,
            uid: Box::new([9; 128]),
            ranks: vec![2, 3],
        });
        round_trip(Msg::Data {
            key: SlotKey::Coll(5),
            place: 2,
            meta,
            input: Ok(Some(vec![1, 2, 3])),
        });
        round_trip(Msg::Data {
            key: SlotKey::P2p(1, 0, 9),
            place: 0,
            meta,
            input: Err("out of bounds".into()),
        });
        round_trip(Msg::Data {
            key: SlotKey::P2p(1, 1, 1),
            place: 1,
            meta,
            input: Ok(None),
        });
        round_trip(Msg::Done {
            key: SlotKey::P2p(0, 1, 2),
            result: Err((6, "gone".into())),
        });
        round_trip(Msg::Done {
            key: SlotKey::P2p(0, 1, 2),
            result: Ok(()),
        });
        round_trip(Msg::Split {
            round: 1,
            rank: 2,
            color: -1,
            key: 7,
        });
        round_trip(Msg::Abort {
            reason: "bye".into(),
        });
        round_trip(Msg::Leave);
    }

    #[test]
    fn bounded_and_checked() {
        // A length beyond the limit is refused before anything is allocated.
        let mut f = vec![JOIN];
        f.extend_from_slice(&u64::MAX.to_le_bytes());
        assert!(read(&mut &f[..], 1 << 20).is_err());
        // A Data message whose input is larger than the device memory.
        let m = Msg::Data {
            key: SlotKey::Coll(0),
            place: 0,
            meta: Meta {
                kind: OpKind::AllGather,
                bytes: 64,
                dt: Dt::U8,
                op: Red::Sum,
                root: 0,
            },
            input: Ok(Some(vec![0; 64])),
        };
        let mut buf = vec![];
        assert!(write(&mut buf, &m).is_ok());
        assert!(read(&mut &buf[..], 16).is_err());
        // Truncated frames and unknown tags.
        assert!(read(&mut &buf[..buf.len() - 1], 1 << 20).is_err());
        let mut bad = buf.clone();
        bad[0] = 99;
        assert!(read(&mut &bad[..], 1 << 20).is_err());
    }
}
