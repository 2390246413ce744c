//! The etcd client side: the private runtime, the refusal to block inside an async runtime,
//! connecting to the endpoints (with the [`EtcdSecurity`] options), and a throwaway client for
//! one-off requests.

use crate::config::store_error;
use crate::security::EtcdSecurity;
use etcd_client::{Client, ConnectOptions};
use std::fmt;
use std::future::Future;
use std::time::Duration;
use tokio::runtime::Runtime;
use tokio::time::timeout;
use xthunk_core::distributed::DistributedResult;

/// Refuses a blocking call from inside an async runtime (it would stall that runtime).
pub(crate) fn not_in_async(job: &str) -> DistributedResult<()> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(store_error(
            job,
            "blocking call",
            "the etcd coordinator blocks: call it from a plain thread (e.g. \
             tokio::task::spawn_blocking), not from inside an async runtime",
        ));
    }
    Ok(())
}

/// The private runtime the blocking calls and the background tasks run on.
pub(crate) fn runtime(job: &str) -> DistributedResult<Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("xthunk-etcd")
        .enable_all()
        .build()
        .map_err(|e| store_error(job, "start the etcd client runtime", e))
}

/// A client of `endpoints` (with `security`'s TLS and credentials) that has answered a status
/// request.
pub(crate) async fn connect_client(
    endpoints: &[String],
    security: &EtcdSecurity,
    request_timeout: Duration,
) -> Result<Client, String> {
    let opts = security.apply(
        ConnectOptions::new()
            .with_connect_timeout(request_timeout)
            .with_require_leader(true),
    )?;
    let urls = security.urls(endpoints)?;
    let hinted = |e: String| match security.connection_hint(&e) {
        Some(hint) => format!("{e} ({hint})"),
        None => e,
    };
    let mut client = match timeout(request_timeout, Client::connect(&urls, Some(opts))).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return Err(hinted(e.to_string())),
        Err(_) => return Err(format!("no connection within {request_timeout:?}")),
    };
    // The connection is lazy: make sure somebody answers.
    within(request_timeout, client.status())
        .await
        .map_err(hinted)?;
    Ok(client)
}

/// Whether `e` says that etcd cannot be reached (a transport failure, an unavailable or
/// silent server), as opposed to a request etcd refused.
pub(crate) fn unreachable(e: &etcd_client::Error) -> bool {
    use tonic::Code;
    match e {
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        etcd_client::Error::GRpcStatus(s) => matches!(
            s.code(),
            Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown
        ),
        _ => false,
    }
}

/// `etcd://HOST:PORT[,…]`: the coordinator `endpoints` name, as messages show it.
pub(crate) fn coordinator_url(endpoints: &[String]) -> String {
    xthunk_core::distributed::CoordinatorSpec::Etcd {
        endpoints: endpoints.to_vec(),
    }
    .to_string()
}

/// `fut`, bounded by `limit`: its error, or "no answer within `limit`", as text.
pub(crate) async fn within<T, E: fmt::Display>(
    limit: Duration,
    fut: impl Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match timeout(limit, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {limit:?}")),
    }
}

/// Runs `f` on a throwaway runtime with a client of `endpoints` (the admin helpers).
pub(crate) fn with_client<T>(
    endpoints: &[String],
    security: &EtcdSecurity,
    what: &str,
    job_id: &str,
    f: impl AsyncFnOnce(&mut Client) -> Result<T, etcd_client::Error>,
) -> DistributedResult<T> {
    not_in_async(job_id)?;
    let rt = runtime(job_id)?;
    let err = |message: String| store_error(job_id, what, message);
    let limit = Duration::from_secs(10);
    let r = rt.block_on(async {
        let mut client = connect_client(endpoints, security, limit)
            .await
            .map_err(err)?;
        within(limit, f(&mut client)).await.map_err(err)
    });
    rt.shutdown_background();
    r
}
