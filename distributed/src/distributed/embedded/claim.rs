//! One job id, one run per machine for the embedded coordinator: [`MachineJobClaim`]. Each
//! embedded launch serves its own coordinator, so two launches of one job id never merge, but
//! their ranks would still meet in `/dev/shm` (segment names hold the job id). The launcher
//! therefore claims the id on this machine first, by binding a Unix socket in Linux's abstract
//! namespace named after it: the bind is atomic, fails while another process holds the name,
//! and the kernel releases the name when the holder exits however it exits (nothing is left
//! in any file system).

use crate::distributed::{DistributedError, DistributedResult, validate_job_id};

/// The abstract socket name of the claim of `job_id`.
pub fn claim_name(job_id: &str) -> String {
    format!("xthunk.job-claim/{job_id}")
}

/// This machine's claim of a job id, held until dropped (or the process ends).
#[derive(Debug)]
pub struct MachineJobClaim {
    #[cfg(target_os = "linux")]
    _socket: std::os::unix::net::UnixListener,
}

impl MachineJobClaim {
    /// Claims `job_id` on this machine; refused (a [`DistributedError::Config`] naming the
    /// job id) while another process holds it. Elsewhere than Linux there is no abstract
    /// namespace, and the claim is a no-op.
    pub fn acquire(job_id: &str) -> DistributedResult<Self> {
        validate_job_id(job_id)?;
        #[cfg(target_os = "linux")]
        {
            use std::os::linux::net::SocketAddrExt;
            use std::os::unix::net::{SocketAddr, UnixListener};
            let name = claim_name(job_id);
            let addr = SocketAddr::from_abstract_name(name.as_bytes()).map_err(|e| {
                DistributedError::Config(format!("job id `{job_id}`: claim name: {e}"))
            })?;
            match UnixListener::bind_addr(&addr) {
                Ok(socket) => Ok(MachineJobClaim { _socket: socket }),
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                    Err(DistributedError::Config(format!(
                        "job id `{job_id}` is taken: another launch on this machine runs it; a \
                         job id names one run, so this launch is refused and starts no rank \
                         (give another --job-id, or wait until that job ends)"
                    )))
                }
                Err(e) => Err(DistributedError::Config(format!(
                    "job id `{job_id}`: cannot claim it on this machine (abstract socket \
                     @{name}): {e}"
                ))),
            }
        }
        #[cfg(not(target_os = "linux"))]
        Ok(MachineJobClaim {})
    }
}

#[cfg(all(test, target_os = "linux"))]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn a_job_id_is_claimed_once_until_released() {
        let job = format!("claim-test-{}", std::process::id());
        let first = MachineJobClaim::acquire(&job).unwrap();
        let second = MachineJobClaim::acquire(&job).unwrap_err().to_string();
        assert!(
            second.contains(&format!("job id `{job}` is taken")),
            "{second}"
        );
        let other = MachineJobClaim::acquire(&format!("{job}-other")).unwrap();
        drop(first);
        drop(MachineJobClaim::acquire(&job).unwrap());
        drop(other);
    }
}
