//! The liveness watch on `live/`: a rank whose `alive` key goes without a `left` key before it
//! is reported failed.

use crate::keys::LiveKey;
use crate::keys::listing;
use crate::session::Ctx;
use etcd_client::{EventType, WatchOptions};
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::{Instant, sleep};

impl Ctx {
    /// Watches `live/` from `start` (the revision after this rank registered), knowing the
    /// ranks in `alive` were alive then; reports every rank whose `alive` key goes without a
    /// `left` key before it.
    pub(crate) async fn watch_liveness(self: Arc<Self>, mut start: i64, mut alive: HashSet<usize>) {
        let mut left: HashSet<usize> = HashSet::new();
        let mut trouble_since: Option<Instant> = None;
        let mut resync = false;
        loop {
            let mut client = self.client.clone();
            let err = 'stream: {
                if resync {
                    // Events were lost (compaction): compare the known live ranks with now.
                    match client.get(self.keys.live(), Some(listing())).await {
                        Ok(resp) => {
                            let mut now_alive = HashSet::new();
                            for kv in resp.kvs() {
                                match self.keys.parse_live(kv.key()) {
                                    Some(LiveKey::Alive(r)) => {
                                        now_alive.insert(r);
                                    }
                                    Some(LiveKey::Left(r)) => {
                                        left.insert(r);
                                    }
                                    None => {}
                                }
                            }
                            for r in alive.difference(&now_alive) {
                                self.on_alive_deleted(*r, &left);
                            }
                            alive = now_alive;
                            start = resp.header().map_or(start, |h| h.revision() + 1);
                            resync = false;
                        }
                        Err(e) => break 'stream e.to_string(),
                    }
                }
                let opts = WatchOptions::new().with_prefix().with_start_revision(start);
                let mut stream = match client.watch(self.keys.live(), Some(opts)).await {
                    Ok(s) => s,
                    Err(e) => break 'stream e.to_string(),
                };
                loop {
                    match stream.message().await {
                        Ok(Some(resp)) => {
                            trouble_since = None;
                            if resp.canceled() {
                                resync = resp.compact_revision() > 0;
                                break 'stream format!("watch canceled: {}", resp.cancel_reason());
                            }
                            for ev in resp.events() {
                                let Some(kv) = ev.kv() else { continue };
                                start = start.max(kv.mod_revision() + 1);
                                match (ev.event_type(), self.keys.parse_live(kv.key())) {
                                    (EventType::Put, Some(LiveKey::Alive(r))) => {
                                        alive.insert(r);
                                    }
                                    (EventType::Put, Some(LiveKey::Left(r))) => {
                                        left.insert(r);
                                    }
                                    (EventType::Delete, Some(LiveKey::Alive(r))) => {
                                        alive.remove(&r);
                                        self.on_alive_deleted(r, &left);
                                    }
                                    _ => {}
                                }
                            }
                        }
                        Ok(None) => break 'stream "the watch stream ended".to_string(),
                        Err(e) => break 'stream e.to_string(),
                    }
                }
            };
            let since = *trouble_since.get_or_insert_with(Instant::now);
            if since.elapsed() > self.ttl {
                self.lost(format!(
                    "rank {} lost its liveness watch for {:?}, its TTL ({err}): it cannot tell \
                     whether the other ranks are alive",
                    self.rank, self.ttl
                ));
                return;
            }
            tracing::warn!(rank = self.rank, error = %err, "etcd liveness watch failed; retrying");
            sleep(Duration::from_millis(200)).await;
        }
    }

    pub(crate) fn on_alive_deleted(&self, r: usize, left: &HashSet<usize>) {
        if r == self.rank {
            if !self.leaving.load(Ordering::SeqCst) {
                self.fail(
                    r,
                    format!(
                        "its own liveness key was deleted: its lease (TTL {:?}) expired or was \
                         revoked; the other ranks consider it dead",
                        self.ttl
                    ),
                );
            }
        } else if !left.contains(&r) && r < self.world {
            self.fail(
                r,
                format!(
                    "its liveness lease expired or was revoked without a clean shutdown (the \
                     process died, hung, or lost etcd for longer than the TTL of {:?})",
                    self.ttl
                ),
            );
        }
    }
}
