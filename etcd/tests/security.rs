//! The etcd coordinator against a secured etcd on loopback: user/password authentication
//! (etcd's `auth enable`) and TLS (`https://`, a client certificate required), with
//! certificates made by the `openssl` command for each test. Each test is skipped, with a
//! printed reason, where the `etcd` binary (or, for TLS, `openssl`) is absent, unless
//! `XTHUNK_REQUIRE_ETCD=1`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};
use xthunk_core::distributed::{Coordinator, DistributedError};
use xthunk_etcd::server::{EtcdServer, ServerTls};
use xthunk_etcd::{
    EtcdConfig, EtcdCoordinator, EtcdSecurity, EtcdTls, EtcdUser, JobClaim, job_keys_with,
};

const T: Duration = Duration::from_secs(10);

fn required() -> bool {
    std::env::var("XTHUNK_REQUIRE_ETCD").as_deref() == Ok("1")
}

/// A job id no other test (or earlier run) uses.
fn job_id(name: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn config(etcd: &EtcdServer, security: &EtcdSecurity, job: &str, rank: usize) -> EtcdConfig {
    EtcdConfig::new(vec![etcd.endpoint()], job, rank, 2)
        .with_ttl(Duration::from_secs(2))
        .with_request_timeout(Duration::from_secs(5))
        .with_security(security.clone())
}

/// A job of two ranks with `security`: set/get across ranks, a barrier, a clean shutdown,
/// and no key left.
fn a_job_runs(etcd: &EtcdServer, security: &EtcdSecurity, name: &str) {
    let job = job_id(name);
    let job = job.as_str();
    let ranks: Vec<EtcdCoordinator> = thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|r| s.spawn(move || EtcdCoordinator::connect(config(etcd, security, job, r))))
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap().expect("connect"))
            .collect()
    });
    ranks[0].set("hello", b"from rank 0").unwrap();
    assert_eq!(ranks[1].get("hello", T).unwrap(), b"from rank 0");
    thread::scope(|s| {
        for c in &ranks {
            s.spawn(move || c.barrier("b", T).unwrap());
        }
    });
    thread::scope(|s| {
        for c in &ranks {
            s.spawn(move || c.shutdown(T).unwrap());
        }
    });
    assert_eq!(
        job_keys_with(&[etcd.endpoint()], security, job).unwrap(),
        Vec::<String>::new()
    );
}

/// Connecting one rank with `security` fails; its message.
fn refused(etcd: &EtcdServer, security: &EtcdSecurity, name: &str) -> String {
    let started = Instant::now();
    let e = EtcdCoordinator::connect(config(etcd, security, &job_id(name), 0)).unwrap_err();
    assert!(matches!(e, DistributedError::Store { .. }), "{e:?}");
    eprintln!("{name}: refused: {e}");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    e.to_string()
}

/// Enables authentication on the etcd at `endpoint` (plain, or TLS verified with `ca`): user
/// `root` (password `rootpw`), and user `xthunk` (password `right`) with read and write access
/// to `/xthunk/` only.
fn enable_auth(endpoint: &str, ca: Option<&Path>) {
    use etcd_client::{Certificate, Client, ConnectOptions, Permission, TlsOptions};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (url, opts) = match ca {
        None => (format!("http://{endpoint}"), None),
        Some(ca) => (
            format!("https://{endpoint}"),
            Some(ConnectOptions::new().with_tls(
                TlsOptions::new().ca_certificate(Certificate::from_pem(std::fs::read(ca).unwrap())),
            )),
        ),
    };
    rt.block_on(async {
        let mut c = Client::connect([url], opts).await.unwrap();
        c.user_add("root", "rootpw", None).await.unwrap();
        c.user_grant_role("root", "root").await.unwrap();
        c.role_add("xthunk-rw").await.unwrap();
        c.role_grant_permission(
            "xthunk-rw",
            Permission::read_write("/xthunk/").with_prefix(),
        )
        .await
        .unwrap();
        c.user_add("xthunk", "right", None).await.unwrap();
        c.user_grant_role("xthunk", "xthunk-rw").await.unwrap();
        c.auth_enable().await.unwrap();
    });
}

fn with_user(name: &str, password: &str) -> EtcdSecurity {
    EtcdSecurity::none().with_user(EtcdUser::new(name, password))
}

#[test]
fn with_authentication_enabled_only_the_right_password_gets_in() {
    let Some(etcd) = EtcdServer::start_or_skip("with_authentication_enabled").unwrap() else {
        return;
    };
    enable_auth(&etcd.endpoint(), None);

    let e = refused(&etcd, &with_user("xthunk", "wrong"), "auth-wrong");
    assert!(
        e.contains("authentication failed") && e.contains("check XTHUNK_ETCD_USER"),
        "{e}"
    );
    let e = refused(&etcd, &with_user("nobody", "right"), "auth-unknown");
    assert!(e.contains("authentication failed"), "{e}");
    let e = refused(&etcd, &EtcdSecurity::none(), "auth-none");
    assert!(
        e.contains("etcd requires authentication") && e.contains("XTHUNK_ETCD_PASSWORD"),
        "{e}"
    );

    // The right user, whose role covers /xthunk/ only, runs a whole job.
    let right = with_user("xthunk", "right");
    a_job_runs(&etcd, &right, "auth-right");
    let claim =
        JobClaim::acquire_with(&[etcd.endpoint()], &right, &job_id("auth-claim"), T).unwrap();
    assert!(claim.finish().unwrap());
    let e = JobClaim::acquire_with(
        &[etcd.endpoint()],
        &with_user("xthunk", "wrong"),
        &job_id("auth-claim"),
        T,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("authentication failed"), "{e}");
    assert!(job_keys_with(&[etcd.endpoint()], &EtcdSecurity::none(), "any").is_err());
}

/// A CA, and the certificates and keys it signed, made with `openssl` in a temporary folder.
struct Pki {
    _dir: tempfile::TempDir,
    ca: PathBuf,
    server: (PathBuf, PathBuf),
    client: (PathBuf, PathBuf),
}

const OPENSSL_CONFIG: &str = "\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = xthunk-test
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth,clientAuth
subjectAltName = IP:127.0.0.1,DNS:localhost
[client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = clientAuth
";

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Pki {
    /// `None` (after printing why `test` is skipped) where `openssl` is absent.
    fn make_or_skip(test: &str) -> Option<Pki> {
        if Command::new("openssl").arg("version").output().is_err() {
            assert!(!required(), "{test}: the `openssl` command is needed");
            eprintln!("SKIPPED {test}: no `openssl` command to make certificates");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("openssl.cnf"), OPENSSL_CONFIG).unwrap();
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        let mut ca = vec![
            "req",
            "-x509",
            "-config",
            "openssl.cnf",
            "-extensions",
            "ca",
        ];
        ca.extend(ec);
        ca.extend([
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=xthunk-test-ca",
        ]);
        openssl(d, &ca);
        for (who, cn, serial) in [("server", "localhost", "2"), ("client", "xthunk", "3")] {
            let (key, csr, pem) = (
                format!("{who}.key"),
                format!("{who}.csr"),
                format!("{who}.pem"),
            );
            let subj = format!("/CN={cn}");
            let mut req = vec!["req", "-new", "-config", "openssl.cnf"];
            req.extend(ec);
            req.extend(["-keyout", &key, "-out", &csr, "-subj", &subj]);
            openssl(d, &req);
            openssl(
                d,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &csr,
                    "-CA",
                    "ca.pem",
                    "-CAkey",
                    "ca.key",
                    "-set_serial",
                    serial,
                    "-out",
                    &pem,
                    "-days",
                    "2",
                    "-extfile",
                    "openssl.cnf",
                    "-extensions",
                    who,
                ],
            );
        }
        let p = |n: &str| d.join(n);
        Some(Pki {
            ca: p("ca.pem"),
            server: (p("server.pem"), p("server.key")),
            client: (p("client.pem"), p("client.key")),
            _dir: dir,
        })
    }
}

#[test]
fn over_tls_with_a_client_certificate_a_job_runs_and_nothing_else_gets_in() {
    let test = "over_tls_with_a_client_certificate";
    let Some(pki) = Pki::make_or_skip(test) else {
        return;
    };
    let Some(other) = Pki::make_or_skip(test) else {
        return;
    };
    let tls = |ca: &Path, identity: Option<&(PathBuf, PathBuf)>| {
        EtcdSecurity::none().with_tls(EtcdTls {
            ca: ca.to_path_buf(),
            identity: identity.cloned(),
        })
    };
    let good = tls(&pki.ca, Some(&pki.client));
    let etcd = match EtcdServer::start_tls(
        ServerTls {
            cert: pki.server.0.clone(),
            key: pki.server.1.clone(),
            client_ca: Some(pki.ca.clone()),
        },
        good.clone(),
    ) {
        Ok(s) => s,
        Err(e @ xthunk_etcd::server::ServerError::NotInstalled { .. }) if !required() => {
            eprintln!("SKIPPED {test}: {e}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    assert_eq!(etcd.client_security(), &good);
    a_job_runs(&etcd, &good, "tls");
    let claim = JobClaim::acquire_with(&[etcd.endpoint()], &good, &job_id("tls-claim"), T).unwrap();
    assert!(claim.finish().unwrap());
    // An explicit https:// endpoint is the same.
    let https = vec![format!("https://{}", etcd.endpoint())];
    assert!(job_keys_with(&https, &good, "any").unwrap().is_empty());

    // Plain http to a TLS etcd, TLS without the client certificate, and TLS that trusts
    // another CA are all refused, promptly.
    for (what, security, why) in [
        (
            "plain",
            EtcdSecurity::none(),
            "if it serves https, set XTHUNK_ETCD_CACERT",
        ),
        (
            "no client certificate",
            tls(&pki.ca, None),
            "it may require a client certificate",
        ),
        (
            "another CA",
            tls(&other.ca, Some(&pki.client)),
            "invalid peer certificate",
        ),
        (
            "a client certificate of another CA",
            tls(&pki.ca, Some(&other.client)),
            "it may not trust the client certificate",
        ),
    ] {
        let e = refused(&etcd, &security, "tls-refused");
        assert!(e.contains("connect to") && e.contains(why), "{what}: {e}");
    }
    // An https:// endpoint without a CA is a configuration error before any connection.
    let e = job_keys_with(&https, &EtcdSecurity::none(), "any")
        .unwrap_err()
        .to_string();
    assert!(e.contains("https:// but no CA is given"), "{e}");
}

/// `$XTHUNK_BIN`, else the `xthunk` of this test's target directory and profile
/// (`target/debug/deps/security-…` -> `target/debug/xthunk`), if it is there.
fn binary() -> Option<PathBuf> {
    let bin = match std::env::var_os("XTHUNK_BIN") {
        Some(p) => PathBuf::from(p),
        None => {
            let exe = std::env::current_exe().unwrap();
            let profile_dir = exe.parent().and_then(Path::parent).unwrap();
            profile_dir.join(format!("xthunk{}", std::env::consts::EXE_SUFFIX))
        }
    };
    bin.is_file().then_some(bin)
}

#[test]
fn a_launch_reaches_a_secured_etcd_through_the_environment_alone() {
    let test = "a_launch_reaches_a_secured_etcd";
    let Some(bin) = binary() else {
        assert!(
            !required(),
            "{test}: no xthunk binary (cargo build --features etcd)"
        );
        eprintln!("SKIPPED {test}: no xthunk binary: build it with `cargo build --features etcd`");
        return;
    };
    let Some(pki) = Pki::make_or_skip(test) else {
        return;
    };
    // TLS without client certificates (with them, etcd would take the certificate's name as
    // the user), and authentication.
    let tls_only = EtcdSecurity::none().with_tls(EtcdTls {
        ca: pki.ca.clone(),
        identity: None,
    });
    let root = tls_only.clone().with_user(EtcdUser::new("root", "rootpw"));
    let tls = ServerTls {
        cert: pki.server.0.clone(),
        key: pki.server.1.clone(),
        client_ca: None,
    };
    let etcd = match EtcdServer::start_tls(tls, tls_only) {
        Ok(s) => s,
        Err(e @ xthunk_etcd::server::ServerError::NotInstalled { .. }) if !required() => {
            eprintln!("SKIPPED {test}: {e}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    enable_auth(&etcd.endpoint(), Some(&pki.ca));
    let program = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("examples/permute_ring.txtpb");
    let launch = |job: &str, env: &[(&str, &Path)], password: Option<&str>| {
        let mut cmd = Command::new(&bin);
        cmd.args(["launch", "-n", "4", "--coordinator"])
            .arg(etcd.url())
            .args(["--job-id", job, "--", "run", "--backend", "host"])
            .arg(&program)
            .env("XTHUNK_LEASE_TTL", "2")
            .env_remove("RUST_LOG");
        for k in [
            "XTHUNK_ETCD_CACERT",
            "XTHUNK_ETCD_CERT",
            "XTHUNK_ETCD_KEY",
            "XTHUNK_ETCD_USER",
            "XTHUNK_ETCD_PASSWORD",
        ] {
            cmd.env_remove(k);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        if let Some(p) = password {
            cmd.env("XTHUNK_ETCD_USER", "xthunk")
                .env("XTHUNK_ETCD_PASSWORD", p);
        }
        let o = cmd.output().unwrap();
        (
            o.status.code(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
        )
    };
    let ca = [("XTHUNK_ETCD_CACERT", pki.ca.as_path())];
    // Everything from the environment: the launcher's claim and every rank get in.
    let job = job_id("cli-secured");
    let (code, text) = launch(&job, &ca, Some("right"));
    assert_eq!(code, Some(0), "{text}");
    assert!(
        job_keys_with(&[etcd.endpoint()], &root, &job)
            .unwrap()
            .is_empty(),
        "{text}"
    );
    // The wrong password, no credentials, no CA: the launch is refused before any rank starts.
    for (what, env, password, want) in [
        (
            "wrong password",
            &ca[..],
            Some("wrong"),
            "authentication failed",
        ),
        ("no user", &ca[..], None, "etcd requires authentication"),
        (
            "no CA",
            &[][..],
            Some("right"),
            "if it serves https, set XTHUNK_ETCD_CACERT",
        ),
    ] {
        let (code, text) = launch(&job_id("cli-refused"), env, password);
        eprintln!("{what}: exit {code:?}: {text}");
        assert_eq!(code, Some(1), "{what}: {text}");
        assert!(text.contains(want), "{what}: {text}");
    }
}
