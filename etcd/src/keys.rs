//! The key layout of one job (see the crate documentation).

use etcd_client::{DeleteOptions, GetOptions, KeyValue, TxnOp};
use xthunk_core::distributed::escape_segment;

/// The options of a listing: every key under a prefix, without the values.
pub(crate) fn listing() -> GetOptions {
    GetOptions::new().with_prefix().with_keys_only()
}

/// Which rank-numbered key of `live/` an event is about.
pub(crate) enum LiveKey {
    Alive(usize),
    Left(usize),
}

/// Key layout of one job.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    pub(crate) prefix: String,
}

impl Keys {
    pub(crate) fn kv(&self, key: &str) -> String {
        format!("{}kv/{key}", self.prefix)
    }
    pub(crate) fn live(&self) -> String {
        format!("{}live/", self.prefix)
    }
    pub(crate) fn alive_prefix(&self) -> String {
        format!("{}live/alive/", self.prefix)
    }
    pub(crate) fn alive(&self, rank: usize) -> String {
        format!("{}live/alive/{rank}", self.prefix)
    }
    pub(crate) fn left(&self, rank: usize) -> String {
        format!("{}live/left/{rank}", self.prefix)
    }
    /// The launcher's claim of the job id, holding its incarnation token (`claim`).
    pub(crate) fn claim(&self) -> String {
        format!("{}meta/claim", self.prefix)
    }
    /// The published cause of a failure of run `run` of the job (see `session::Ctx::run`).
    pub(crate) fn cause(&self, run: &str) -> String {
        format!("{}cause/{}", self.prefix, escape_segment(run))
    }
    pub(crate) fn world(&self) -> String {
        format!("{}meta/world", self.prefix)
    }
    pub(crate) fn barrier(&self, internal: bool, name: &str, round: u64) -> String {
        let ns = if internal { "sys" } else { "barrier" };
        format!("{}{ns}/{}/{round}/", self.prefix, escape_segment(name))
    }
    /// The deletions (for one transaction) of every key of the job but `kept` (keys under
    /// the prefix): one range before, between and after them.
    pub(crate) fn delete_all_but(&self, kept: &[String]) -> Vec<TxnOp> {
        let mut kept: Vec<&[u8]> = kept.iter().map(|k| k.as_bytes()).collect();
        kept.sort_unstable();
        kept.dedup();
        let mut ops = Vec::with_capacity(kept.len() + 1);
        let mut from = self.prefix.as_bytes().to_vec();
        for k in kept {
            if from.as_slice() < k {
                ops.push(TxnOp::delete(
                    from.clone(),
                    Some(DeleteOptions::new().with_range(k.to_vec())),
                ));
            }
            // The next key after `k`.
            from = [k, b"\0"].concat();
        }
        ops.push(TxnOp::delete(
            from,
            Some(DeleteOptions::new().with_range(prefix_end(&self.prefix))),
        ));
        ops
    }

    /// The ranks whose `alive` key is among `kvs`.
    pub(crate) fn alive_in<B: FromIterator<usize>>(&self, kvs: &[KeyValue]) -> B {
        kvs.iter()
            .filter_map(|kv| match self.parse_live(kv.key()) {
                Some(LiveKey::Alive(r)) => Some(r),
                _ => None,
            })
            .collect()
    }

    pub(crate) fn parse_live(&self, key: &[u8]) -> Option<LiveKey> {
        let rest = std::str::from_utf8(key).ok()?.strip_prefix(&self.live())?;
        if let Some(r) = rest.strip_prefix("alive/") {
            return r.parse().ok().map(LiveKey::Alive);
        }
        rest.strip_prefix("left/")?.parse().ok().map(LiveKey::Left)
    }
}

/// The first key after every key that starts with `prefix` (its last byte incremented; the
/// prefixes here end with `/`).
pub(crate) fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Only 0xff bytes: every key from the prefix on (`\0` is etcd's "to the end").
    vec![0]
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn prefix_ends() {
        assert_eq!(prefix_end("/xthunk/j/"), b"/xthunk/j0".to_vec());
        assert_eq!(prefix_end("a\u{7f}"), b"a\x80".to_vec());
        assert_eq!(prefix_end(""), vec![0]);
        let keys = Keys {
            prefix: "/xthunk/j/".into(),
        };
        // Three ranges around two kept keys (given in any order), one around none.
        assert_eq!(
            keys.delete_all_but(&[keys.claim(), keys.cause("t")]).len(),
            3
        );
        assert_eq!(keys.delete_all_but(&[]).len(), 1);
    }
}
