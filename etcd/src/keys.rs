//! The key layout of one job (see the crate documentation).

use etcd_client::{GetOptions, KeyValue};
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
    pub(crate) fn world(&self) -> String {
        format!("{}meta/world", self.prefix)
    }
    pub(crate) fn barrier(&self, internal: bool, name: &str, round: u64) -> String {
        let ns = if internal { "sys" } else { "barrier" };
        format!("{}{ns}/{}/{round}/", self.prefix, escape_segment(name))
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
