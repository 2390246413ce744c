//! [`CliqueCache`]: the communicator cache every [`CliqueProvider`](super::CliqueProvider)
//! keeps — one entry per clique key, in key order, failed entries evicted together.

use super::CliqueKey;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::fmt;

/// A provider's cliques: one entry `E` per key (its communicators, its rendezvous, …).
pub struct CliqueCache<E> {
    entries: Mutex<BTreeMap<CliqueKey, E>>,
}

impl<E> Default for CliqueCache<E> {
    fn default() -> Self {
        CliqueCache {
            entries: Mutex::new(BTreeMap::new()),
        }
    }
}

impl<E> fmt::Debug for CliqueCache<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.keys()).finish()
    }
}

impl<E> CliqueCache<E> {
    pub fn new() -> Self {
        Self::default()
    }

    /// The keys of the cliques cached, in key order.
    pub fn keys(&self) -> Vec<CliqueKey> {
        self.entries.lock().keys().cloned().collect()
    }

    /// Runs `f` on the entries, under the cache's lock (do not block in it).
    pub fn with<R>(&self, f: impl FnOnce(&mut BTreeMap<CliqueKey, E>) -> R) -> R {
        f(&mut self.entries.lock())
    }

    /// Removes every entry for which `failure` says why it failed; returns them, in key order,
    /// with that reason.
    pub fn evict_failed(
        &self,
        failure: impl Fn(&E) -> Option<String>,
    ) -> Vec<(CliqueKey, E, String)> {
        let mut map = self.entries.lock();
        let dead: Vec<(CliqueKey, String)> = map
            .iter()
            .filter_map(|(k, e)| failure(e).map(|why| (k.clone(), why)))
            .collect();
        dead.into_iter()
            .filter_map(|(k, why)| map.remove(&k).map(|e| (k, e, why)))
            .collect()
    }
}
