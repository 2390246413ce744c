//! The etcd client side: the private runtime, the refusal to block inside an async runtime,
//! connecting to the endpoints, and a throwaway client for one-off requests.

use crate::BACKEND;
use etcd_client::{Client, ConnectOptions};
use std::time::Duration;
use tokio::runtime::Runtime;
use tokio::time::timeout;
use xthunk_core::distributed::{DistributedError, DistributedResult};

pub(crate) fn not_in_async(job: &str) -> DistributedResult<()> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(DistributedError::Store {
            job: job.to_string(),
            backend: BACKEND,
            op: "blocking call".into(),
            message: "the etcd coordinator blocks: call it from a plain thread (e.g. \
                      tokio::task::spawn_blocking), not from inside an async runtime"
                .into(),
        });
    }
    Ok(())
}

pub(crate) fn runtime(job: &str) -> DistributedResult<Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("xthunk-etcd")
        .enable_all()
        .build()
        .map_err(|e| DistributedError::Store {
            job: job.to_string(),
            backend: BACKEND,
            op: "start the etcd client runtime".into(),
            message: e.to_string(),
        })
}

pub(crate) fn urls(endpoints: &[String]) -> Vec<String> {
    endpoints
        .iter()
        .map(|e| {
            if e.contains("://") {
                e.clone()
            } else {
                format!("http://{e}")
            }
        })
        .collect()
}

pub(crate) async fn connect_client(
    endpoints: &[String],
    request_timeout: Duration,
) -> Result<Client, String> {
    let opts = ConnectOptions::new()
        .with_connect_timeout(request_timeout)
        .with_require_leader(true);
    let urls = urls(endpoints);
    let mut client = match timeout(request_timeout, Client::connect(&urls, Some(opts))).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return Err(e.to_string()),
        Err(_) => return Err(format!("no connection within {request_timeout:?}")),
    };
    // The connection is lazy: make sure somebody answers.
    match timeout(request_timeout, client.status()).await {
        Ok(Ok(_)) => Ok(client),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {request_timeout:?}")),
    }
}

/// Runs `f` on a throwaway runtime with a client of `endpoints` (the admin helpers below).
pub(crate) fn with_client<T>(
    endpoints: &[String],
    what: &str,
    job_id: &str,
    f: impl AsyncFnOnce(&mut Client) -> Result<T, etcd_client::Error>,
) -> DistributedResult<T> {
    not_in_async(job_id)?;
    let rt = runtime(job_id)?;
    let err = |message: String| DistributedError::Store {
        job: job_id.to_string(),
        backend: BACKEND,
        op: what.to_string(),
        message,
    };
    let timeout_ = Duration::from_secs(10);
    let r = rt.block_on(async {
        let mut client = connect_client(endpoints, timeout_).await.map_err(&err)?;
        match timeout(timeout_, f(&mut client)).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(err(e.to_string())),
            Err(_) => Err(err(format!("no answer within {timeout_:?}"))),
        }
    });
    rt.shutdown_background();
    r
}
