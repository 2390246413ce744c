//! The heartbeat: the lease kept alive every TTL/3.

use crate::session::Ctx;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::{Instant, sleep, timeout};

impl Ctx {
    /// Renews the lease every TTL/3; reports a failure of this rank when it cannot for a TTL.
    pub(crate) async fn keep_alive(self: Arc<Self>) {
        let interval = (self.ttl / 3).max(Duration::from_millis(100));
        let mut last_ok = Instant::now();
        let mut last_err = String::from("no answer");
        loop {
            if last_ok.elapsed() > self.ttl {
                self.lost(format!(
                    "rank {} could not renew its lease for {:?}, its TTL ({last_err}); the job \
                     cannot go on without its coordinator",
                    self.rank, self.ttl
                ));
                return;
            }
            let mut client = self.client.clone();
            match timeout(interval, client.lease_keep_alive(self.lease)).await {
                Ok(Ok((mut keeper, mut stream))) => loop {
                    let round = async {
                        keeper.keep_alive().await?;
                        stream.message().await
                    };
                    match timeout(interval, round).await {
                        Ok(Ok(Some(resp))) if resp.ttl() <= 0 => {
                            self.fail(
                                self.rank,
                                "its lease expired before it could be renewed (heartbeats \
                                 did not reach etcd in time); the other ranks consider it dead"
                                    .into(),
                            );
                            return;
                        }
                        Ok(Ok(Some(_))) => last_ok = Instant::now(),
                        Ok(Ok(None)) => {
                            last_err = "the keep-alive stream ended".into();
                            break;
                        }
                        Ok(Err(e)) => {
                            last_err = e.to_string();
                            break;
                        }
                        Err(_) => {
                            last_err = format!("no keep-alive answer within {interval:?}");
                            break;
                        }
                    }
                    sleep(interval).await;
                },
                Ok(Err(e)) => last_err = e.to_string(),
                Err(_) => last_err = format!("no keep-alive stream within {interval:?}"),
            }
            tracing::warn!(rank = self.rank, error = %last_err, "etcd lease keep-alive failed; retrying");
            sleep(Duration::from_millis(200)).await;
        }
    }
}
