//! Barriers: each rank puts its key under the round's prefix and watches it until every rank
//! of the world is present, the deadline passes (naming the missing and the dead) or a rank
//! fails.

use crate::keys::listing;
use crate::session::next_response;
use crate::session::{Ctx, changed};
use etcd_client::{EventType, PutOptions, WatchOptions};
use std::collections::BTreeSet;
use std::time::Duration;
use tokio::time::{Instant, sleep, sleep_until};
use xthunk_core::distributed::{DistributedError, DistributedResult};

impl Ctx {
    pub(crate) async fn barrier(
        &self,
        internal: bool,
        name: &str,
        round: u64,
        wait: Duration,
    ) -> DistributedResult<()> {
        let deadline = Instant::now() + wait;
        let mut tick = self.failure_tick.subscribe();
        self.check()?;
        let prefix = self.keys.barrier(internal, name, round);
        let parse = |key: &[u8]| -> Option<usize> {
            let r: usize = std::str::from_utf8(key)
                .ok()?
                .strip_prefix(&prefix)?
                .parse()
                .ok()?;
            (r < self.world).then_some(r)
        };
        let mut client = self.client.clone();
        let put = self
            .req(
                "barrier arrive",
                client.put(
                    format!("{prefix}{}", self.rank),
                    "",
                    Some(PutOptions::new().with_lease(self.lease)),
                ),
            )
            .await?;
        // Read at the revision of our own arrival: a rank that saw the barrier complete and
        // left since (its keys revoked) still counts.
        let mut rev = put.header().map_or(0, |h| h.revision());
        let opts = listing();
        let resp = match client
            .get(prefix.clone(), Some(opts.clone().with_revision(rev)))
            .await
        {
            Ok(r) => r,
            // Compacted meanwhile: the current state is the next best thing.
            Err(_) => {
                let r = self
                    .req("barrier read", client.get(prefix.clone(), Some(opts)))
                    .await?;
                rev = r.header().map_or(rev, |h| h.revision());
                r
            }
        };
        let mut present: BTreeSet<usize> =
            resp.kvs().iter().filter_map(|kv| parse(kv.key())).collect();
        loop {
            if present.len() >= self.world {
                return Ok(());
            }
            let opts = WatchOptions::new()
                .with_prefix()
                .with_start_revision(rev + 1);
            let mut stream = self
                .req("barrier watch", client.watch(prefix.clone(), Some(opts)))
                .await?;
            let err = loop {
                tokio::select! {
                    msg = next_response(&mut stream) => match msg {
                        Ok(resp) => {
                            for ev in resp.events() {
                                let Some(kv) = ev.kv() else { continue };
                                rev = rev.max(kv.mod_revision());
                                let Some(r) = parse(kv.key()) else { continue };
                                match ev.event_type() {
                                    EventType::Put => present.insert(r),
                                    EventType::Delete => present.remove(&r),
                                };
                                if present.len() >= self.world {
                                    return Ok(());
                                }
                            }
                        }
                        Err(e) => break e,
                    },
                    () = sleep_until(deadline) => {
                        let missing: Vec<usize> =
                            (0..self.world).filter(|r| !present.contains(r)).collect();
                        let alive = self.alive_ranks().await.unwrap_or_default();
                        let dead = missing.iter().copied().filter(|r| !alive.contains(r)).collect();
                        return Err(DistributedError::BarrierTimeout {
                            job: self.job.clone(),
                            name: name.to_string(),
                            timeout: wait,
                            missing,
                            dead,
                        });
                    }
                    () = changed(&mut tick) => self.check()?,
                }
            };
            tracing::debug!(barrier = name, error = %err, "etcd watch failed; retrying");
            if Instant::now() >= deadline {
                return Err(self.store_err("barrier watch", err));
            }
            sleep(Duration::from_millis(100)).await;
        }
    }
}
