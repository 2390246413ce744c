//! Waiting for a key: a read, then a watch from the revision after it, until the key is put,
//! the deadline passes or a rank fails.

use crate::session::next_response;
use crate::session::{Ctx, changed};
use etcd_client::{EventType, WatchOptions};
use std::time::Duration;
use tokio::time::{Instant, sleep, sleep_until};
use xthunk_core::distributed::{DistributedError, DistributedResult};

impl Ctx {
    pub(crate) async fn get_wait(
        &self,
        key: &str,
        user_key: &str,
        wait: Duration,
    ) -> DistributedResult<Vec<u8>> {
        let deadline = Instant::now() + wait;
        let mut tick = self.failure_tick.subscribe();
        loop {
            self.check()?;
            let mut client = self.client.clone();
            let resp = self.req("get", client.get(key, None)).await?;
            if let Some(kv) = resp.kvs().first() {
                return Ok(kv.value().to_vec());
            }
            let rev = resp.header().map_or(0, |h| h.revision());
            let opts = WatchOptions::new().with_start_revision(rev + 1);
            let mut stream = self.req("watch", client.watch(key, Some(opts))).await?;
            let err = loop {
                tokio::select! {
                    msg = next_response(&mut stream) => match msg {
                        Ok(resp) => {
                            for ev in resp.events() {
                                if let (EventType::Put, Some(kv)) = (ev.event_type(), ev.kv()) {
                                    return Ok(kv.value().to_vec());
                                }
                            }
                        }
                        Err(e) => break e,
                    },
                    () = sleep_until(deadline) => {
                        return Err(DistributedError::GetTimeout {
                            job: self.job.clone(),
                            key: user_key.to_string(),
                            timeout: wait,
                        });
                    }
                    () = changed(&mut tick) => self.check()?,
                }
            };
            tracing::debug!(key, error = %err, "etcd watch failed; retrying");
            if Instant::now() >= deadline {
                return Err(self.store_err("watch", err));
            }
            sleep(Duration::from_millis(100)).await;
        }
    }
}
