//! A throwaway single-member etcd on loopback, for tests: free ports, a temporary data
//! directory, killed (and its directory removed) on drop. On Linux it is also killed when the
//! thread that started it ends, so a test process that dies leaves no etcd behind.
//!
//! The binary is `$XTHUNK_ETCD_BIN`, else `etcd` on `PATH` (Debian: `apt-get install
//! etcd-server`). [`EtcdServer::start_or_skip`] lets a test skip, with a printed reason, where
//! etcd is not installed, unless `XTHUNK_REQUIRE_ETCD=1`. [`EtcdServer::start_tls`] serves
//! `https://` (a client certificate required when a client CA is given).

use crate::EtcdSecurity;
use std::fs::{self, File};
use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Why a test etcd could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("etcd is not installed ({tried}); install Debian's etcd-server or set XTHUNK_ETCD_BIN")]
    NotInstalled { tried: String },
    #[error("etcd test server: {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("etcd did not become ready within {waited:?}; its log ends with:\n{log}")]
    NotReady { waited: Duration, log: String },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ServerError {
    let what = what.into();
    move |source| ServerError::Io { what, source }
}

/// A running etcd. See the [module documentation](self).
#[derive(Debug)]
pub struct EtcdServer {
    child: Option<Child>,
    dir: PathBuf,
    client_port: u16,
    /// What a client needs to reach it (its readiness probe's).
    client: EtcdSecurity,
}

/// TLS of a test server: its certificate and key (PEM), and the CA client certificates must
/// be signed by (etcd's `--client-cert-auth`), if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
}

/// The etcd binary: `$XTHUNK_ETCD_BIN`, else `etcd` found on `PATH`.
pub fn etcd_binary() -> Result<PathBuf, ServerError> {
    if let Some(p) = std::env::var_os("XTHUNK_ETCD_BIN") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(ServerError::NotInstalled {
                tried: format!("XTHUNK_ETCD_BIN={}", p.display()),
            })
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("etcd"))
        .find(|p| p.is_file())
        .ok_or_else(|| ServerError::NotInstalled {
            tried: "no `etcd` on PATH".into(),
        })
}

fn free_port() -> Result<u16, ServerError> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(io("bind a free port"))?;
    Ok(l.local_addr().map_err(io("bind a free port"))?.port())
}

fn log_tail(path: &Path) -> String {
    let mut s = String::new();
    if let Ok(mut f) = File::open(path) {
        let _ = f.read_to_string(&mut s);
    }
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

impl EtcdServer {
    /// Starts etcd and waits until it answers (up to 20 s). Retries on other ports if the
    /// chosen ones were taken meanwhile.
    pub fn start() -> Result<EtcdServer, ServerError> {
        Self::start_with(None, EtcdSecurity::none())
    }

    /// [`EtcdServer::start`] serving `https://` with `tls`; `client` is what a client needs
    /// to reach it (the CA, a client certificate if `tls` asks for one), for its readiness
    /// probe and [`EtcdServer::client_security`].
    pub fn start_tls(tls: ServerTls, client: EtcdSecurity) -> Result<EtcdServer, ServerError> {
        Self::start_with(Some(tls), client)
    }

    fn start_with(tls: Option<ServerTls>, client: EtcdSecurity) -> Result<EtcdServer, ServerError> {
        let bin = etcd_binary()?;
        let mut last = None;
        for _ in 0..3 {
            match Self::start_once(&bin, tls.as_ref(), &client) {
                Ok(s) => return Ok(s),
                Err(e @ ServerError::NotReady { .. }) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or(ServerError::NotReady {
            waited: Duration::ZERO,
            log: String::new(),
        }))
    }

    /// [`EtcdServer::start`] for a test: `Ok(None)` (after printing why `test` is skipped)
    /// when etcd is not installed and `XTHUNK_REQUIRE_ETCD` is not `1`.
    pub fn start_or_skip(test: &str) -> Result<Option<EtcdServer>, ServerError> {
        match Self::start() {
            Ok(s) => Ok(Some(s)),
            Err(e @ ServerError::NotInstalled { .. })
                if std::env::var("XTHUNK_REQUIRE_ETCD").as_deref() != Ok("1") =>
            {
                eprintln!("SKIPPED {test}: {e} (XTHUNK_REQUIRE_ETCD=1 makes this an error)");
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    fn start_once(
        bin: &Path,
        tls: Option<&ServerTls>,
        security: &EtcdSecurity,
    ) -> Result<EtcdServer, ServerError> {
        let client_port = free_port()?;
        let peer_port = free_port()?;
        static COUNT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "xthunk-etcd-{}-{}-{client_port}",
            std::process::id(),
            COUNT.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir_all(&dir).map_err(io(format!("create {}", dir.display())))?;
        let log_path = dir.join("etcd.log");
        let log = File::create(&log_path).map_err(io(format!("create {}", log_path.display())))?;
        let log2 = log.try_clone().map_err(io("clone the log file"))?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let client = format!("{scheme}://127.0.0.1:{client_port}");
        let peer = format!("http://127.0.0.1:{peer_port}");
        let mut cmd = Command::new(bin);
        if let Some(t) = tls {
            cmd.arg(format!("--cert-file={}", t.cert.display()))
                .arg(format!("--key-file={}", t.key.display()));
            if let Some(ca) = &t.client_ca {
                cmd.arg("--client-cert-auth")
                    .arg(format!("--trusted-ca-file={}", ca.display()));
            }
        }
        cmd.arg("--name=xthunk-test")
            .arg(format!("--data-dir={}", dir.join("data").display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=xthunk-test={peer}"))
            .arg("--initial-cluster-state=new")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        kill_with_parent_thread(&mut cmd);
        let child = cmd
            .spawn()
            .map_err(io(format!("spawn {}", bin.display())))?;
        let mut server = EtcdServer {
            child: Some(child),
            dir,
            client_port,
            client: security.clone(),
        };
        let waited = Duration::from_secs(20);
        let start = Instant::now();
        let addr = SocketAddr::from(([127, 0, 0, 1], client_port));
        while start.elapsed() < waited {
            if let Some(child) = server.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(ServerError::NotReady {
                    waited: start.elapsed(),
                    log: format!("(etcd exited: {status})\n{}", log_tail(&log_path)),
                });
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
                && server.answers()
            {
                return Ok(server);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(ServerError::NotReady {
            waited,
            log: log_tail(&log_path),
        })
    }

    /// True when etcd answers a request (it has a leader).
    fn answers(&self) -> bool {
        crate::job_keys_with(&[self.endpoint()], &self.client, "xthunk-readiness-probe").is_ok()
    }

    /// What a client needs to reach this server: nothing for a plain one; for one of
    /// [`EtcdServer::start_tls`], the TLS options it was given.
    pub fn client_security(&self) -> &EtcdSecurity {
        &self.client
    }

    /// `127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    /// `etcd://127.0.0.1:PORT`, as `--coordinator` and `XTHUNK_COORDINATOR` take it.
    pub fn url(&self) -> String {
        format!("etcd://{}", self.endpoint())
    }

    /// The etcd process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills etcd, waits for it, and removes its directory.
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

/// On Linux, the child gets SIGKILL when the thread that spawned it ends (`PR_SET_PDEATHSIG`),
/// so that no etcd outlives a test that died.
#[cfg(target_os = "linux")]
fn kill_with_parent_thread(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id();
    // SAFETY: the closure runs in the child between fork and exec; it only makes two
    // async-signal-safe system calls (prctl, getppid) and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            // The parent died before prctl: nobody will stop this child.
            if libc::getppid() as u32 != parent {
                return Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn kill_with_parent_thread(_cmd: &mut Command) {}
