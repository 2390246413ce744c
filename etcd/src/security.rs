//! Reaching a secured etcd: TLS (`https://` endpoints, the CA that signed etcd's certificate,
//! optionally a client certificate) and user/password authentication, configured from the
//! environment ([`EtcdSecurity::from_env`]) or given explicitly ([`crate::EtcdConfig`]).
//!
//! | Variable | Meaning |
//! |---|---|
//! | `XTHUNK_ETCD_CACERT` | PEM file of the CA that signed etcd's server certificate: TLS on, every endpoint `https://` |
//! | `XTHUNK_ETCD_CERT`, `XTHUNK_ETCD_KEY` | PEM files of a client certificate and its key (etcd's `--client-cert-auth`); both or neither, with `XTHUNK_ETCD_CACERT` |
//! | `XTHUNK_ETCD_USER`, `XTHUNK_ETCD_PASSWORD` | etcd user and password (etcd's `auth enable`); both or neither |
//!
//! The password is read from the environment only (no command-line flag, where every user of
//! the host could read it in the process list), and no `Debug` output shows it. An empty
//! variable counts as unset.

use etcd_client::{Certificate, ConnectOptions, Identity, TlsOptions};
use std::ffi::OsString;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use xthunk_core::distributed::{DistributedError, DistributedResult};

/// The CA certificate (PEM) etcd's server certificate must be signed by: TLS.
pub const XTHUNK_ETCD_CACERT: &str = "XTHUNK_ETCD_CACERT";
/// A client certificate (PEM) to present to etcd (with [`XTHUNK_ETCD_KEY`]).
pub const XTHUNK_ETCD_CERT: &str = "XTHUNK_ETCD_CERT";
/// The private key (PEM) of [`XTHUNK_ETCD_CERT`].
pub const XTHUNK_ETCD_KEY: &str = "XTHUNK_ETCD_KEY";
/// The etcd user to authenticate as (with [`XTHUNK_ETCD_PASSWORD`]).
pub const XTHUNK_ETCD_USER: &str = "XTHUNK_ETCD_USER";
/// The password of [`XTHUNK_ETCD_USER`]: from the environment only.
pub const XTHUNK_ETCD_PASSWORD: &str = "XTHUNK_ETCD_PASSWORD";

/// The largest certificate or key file read (a PEM chain is a few KiB).
const MAX_PEM: u64 = 1 << 20;

/// TLS to etcd: the CA to verify its certificate, and the client certificate to present, if
/// any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdTls {
    /// PEM file of the CA (or CAs) etcd's server certificate must be signed by.
    pub ca: PathBuf,
    /// PEM files of a client certificate and of its private key.
    pub identity: Option<(PathBuf, PathBuf)>,
}

/// An etcd user and its password (never shown by `Debug`).
#[derive(Clone, PartialEq, Eq)]
pub struct EtcdUser {
    name: String,
    password: String,
}

impl EtcdUser {
    pub fn new(name: impl Into<String>, password: impl Into<String>) -> Self {
        EtcdUser {
            name: name.into(),
            password: password.into(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Debug for EtcdUser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdUser")
            .field("name", &self.name)
            .field("password", &"<hidden>")
            .finish()
    }
}

/// How to reach etcd securely: TLS, authentication, both or neither (plain `http://`, no
/// authentication: anyone who can reach etcd can then read and write every job's keys).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EtcdSecurity {
    pub tls: Option<EtcdTls>,
    pub user: Option<EtcdUser>,
}

fn config_error(message: String) -> DistributedError {
    DistributedError::Config(message)
}

impl EtcdSecurity {
    /// Plain `http://`, no authentication.
    pub fn none() -> Self {
        EtcdSecurity::default()
    }

    pub fn with_tls(mut self, tls: EtcdTls) -> Self {
        self.tls = Some(tls);
        self
    }

    pub fn with_user(mut self, user: EtcdUser) -> Self {
        self.user = Some(user);
        self
    }

    /// The options the `XTHUNK_ETCD_*` variables give (see the [module documentation](self));
    /// an inconsistent set is a [`DistributedError::Config`] naming the variables.
    pub fn from_env() -> DistributedResult<Self> {
        Self::from_vars(|k| std::env::var_os(k))
    }

    /// [`EtcdSecurity::from_env`] for these variable values.
    pub fn from_vars(var: impl Fn(&str) -> Option<OsString>) -> DistributedResult<Self> {
        let get = |k: &str| var(k).filter(|v| !v.is_empty());
        let text = |k: &str| {
            get(k)
                .map(|v| {
                    v.into_string()
                        .map_err(|_| config_error(format!("{k} is not valid UTF-8")))
                })
                .transpose()
        };
        let ca = get(XTHUNK_ETCD_CACERT).map(PathBuf::from);
        let cert = get(XTHUNK_ETCD_CERT).map(PathBuf::from);
        let key = get(XTHUNK_ETCD_KEY).map(PathBuf::from);
        let identity = match (cert, key) {
            (Some(c), Some(k)) => Some((c, k)),
            (None, None) => None,
            _ => {
                return Err(config_error(format!(
                    "{XTHUNK_ETCD_CERT} and {XTHUNK_ETCD_KEY} go together (a client \
                     certificate and its key): set both or neither"
                )));
            }
        };
        let tls = match (ca, identity) {
            (Some(ca), identity) => Some(EtcdTls { ca, identity }),
            (None, None) => None,
            (None, Some(_)) => {
                return Err(config_error(format!(
                    "a client certificate ({XTHUNK_ETCD_CERT}) needs TLS: set \
                     {XTHUNK_ETCD_CACERT} to the CA that signed etcd's certificate"
                )));
            }
        };
        let user = match (text(XTHUNK_ETCD_USER)?, text(XTHUNK_ETCD_PASSWORD)?) {
            (Some(name), Some(password)) => Some(EtcdUser::new(name, password)),
            (None, None) => None,
            (Some(_), None) => {
                return Err(config_error(format!(
                    "{XTHUNK_ETCD_USER} is set but {XTHUNK_ETCD_PASSWORD} is not: the \
                     password comes from the environment only"
                )));
            }
            (None, Some(_)) => {
                return Err(config_error(format!(
                    "{XTHUNK_ETCD_PASSWORD} is set but {XTHUNK_ETCD_USER} is not"
                )));
            }
        };
        Ok(EtcdSecurity { tls, user })
    }

    /// The endpoints as URLs: `https://` with TLS, else `http://`, where no scheme is given;
    /// a scheme that does not match (`http://` with TLS, `https://` without) is an error.
    pub(crate) fn urls(&self, endpoints: &[String]) -> Result<Vec<String>, String> {
        let tls = self.tls.is_some();
        endpoints
            .iter()
            .map(|e| match e.split_once("://") {
                None if tls => Ok(format!("https://{e}")),
                None => Ok(format!("http://{e}")),
                Some(("https", _)) if tls => Ok(e.clone()),
                Some(("http", _)) if !tls => Ok(e.clone()),
                Some(("https", _)) => Err(format!(
                    "endpoint {e} is https:// but no CA is given: set {XTHUNK_ETCD_CACERT} to the \
                     CA that signed etcd's certificate"
                )),
                Some(("http", _)) => Err(format!(
                    "endpoint {e} is plain http:// but TLS is configured ({XTHUNK_ETCD_CACERT}): \
                     give it as https:// or without a scheme"
                )),
                Some((scheme, _)) => Err(format!(
                    "endpoint {e}: unknown scheme {scheme}:// (http or https)"
                )),
            })
            .collect()
    }

    /// `opts` with these credentials: the certificate files are read here (an unreadable one
    /// is an error naming it).
    pub(crate) fn apply(&self, mut opts: ConnectOptions) -> Result<ConnectOptions, String> {
        if let Some(tls) = &self.tls {
            let mut t =
                TlsOptions::new().ca_certificate(Certificate::from_pem(read_pem(&tls.ca, "CA")?));
            if let Some((cert, key)) = &tls.identity {
                t = t.identity(Identity::from_pem(
                    read_pem(cert, "client certificate")?,
                    read_pem(key, "client key")?,
                ));
            }
            opts = opts.with_tls(t);
        }
        if let Some(user) = &self.user {
            if self.tls.is_none() {
                warn_plain_password(&user.name);
            }
            opts = opts.with_user(user.name.clone(), user.password.clone());
        }
        Ok(opts)
    }
}

impl EtcdSecurity {
    /// A hint for a connection etcd closed (`message`, which says so in one of several
    /// ways): what these options may lack.
    pub(crate) fn connection_hint(&self, message: &str) -> Option<String> {
        let m = message.to_ascii_lowercase();
        if ![
            "connection closed",
            "broken pipe",
            "connection reset",
            "connectionreset",
            "fatal alert",
        ]
        .iter()
        .any(|w| m.contains(w))
        {
            return None;
        }
        Some(match &self.tls {
            None => format!(
                "etcd closed the connection: if it serves https, set {XTHUNK_ETCD_CACERT} (and \
                 {XTHUNK_ETCD_CERT}/{XTHUNK_ETCD_KEY} if it asks for a client certificate)"
            ),
            Some(t) if t.identity.is_none() => format!(
                "etcd closed the TLS connection: it may require a client certificate \
                 ({XTHUNK_ETCD_CERT}, {XTHUNK_ETCD_KEY})"
            ),
            Some(_) => "etcd closed the TLS connection: it may not trust the client \
                        certificate (signed by a CA it does not know, or expired)"
                .to_string(),
        })
    }
}

/// Warns, once per process, that a password goes to etcd over plain http.
fn warn_plain_password(user: &str) {
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        tracing::warn!(
            user,
            "the etcd password goes over plain http: anyone on the network path can read it \
             (set {XTHUNK_ETCD_CACERT} for TLS)"
        );
    });
}

/// A PEM file of at most [`MAX_PEM`] bytes.
fn read_pem(path: &Path, what: &str) -> Result<Vec<u8>, String> {
    let fail =
        |e: &dyn fmt::Display| format!("cannot read the etcd {what} {}: {e}", path.display());
    let f = std::fs::File::open(path).map_err(|e| fail(&e))?;
    let mut bytes = Vec::new();
    f.take(MAX_PEM + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(&e))?;
    if bytes.len() as u64 > MAX_PEM {
        return Err(fail(&format!("larger than {MAX_PEM} bytes")));
    }
    Ok(bytes)
}

/// A hint for an error etcd gave: what to set when it asks for authentication.
pub(crate) fn auth_hint(message: &str) -> Option<&'static str> {
    if message.contains("authentication failed") {
        Some("etcd refused the user or password: check XTHUNK_ETCD_USER and XTHUNK_ETCD_PASSWORD")
    } else if message.contains("user name is empty")
        || message.contains("invalid auth token")
        || message.contains("permission denied")
    {
        Some(
            "etcd requires authentication, or this user may not use the job's keys: set \
             XTHUNK_ETCD_USER and XTHUNK_ETCD_PASSWORD (a user with read and write access to \
             the prefix /xthunk/)",
        )
    } else {
        None
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn vars(pairs: &[(&str, &str)]) -> DistributedResult<EtcdSecurity> {
        let m: HashMap<String, OsString> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        EtcdSecurity::from_vars(|k| m.get(k).cloned())
    }

    #[test]
    fn the_options_come_from_the_environment() {
        assert_eq!(vars(&[]).unwrap(), EtcdSecurity::none());
        // Empty counts as unset.
        assert_eq!(
            vars(&[(XTHUNK_ETCD_CACERT, ""), (XTHUNK_ETCD_USER, "")]).unwrap(),
            EtcdSecurity::none()
        );
        let s = vars(&[(XTHUNK_ETCD_CACERT, "/ca.pem")]).unwrap();
        assert_eq!(
            s.tls,
            Some(EtcdTls {
                ca: "/ca.pem".into(),
                identity: None
            })
        );
        assert_eq!(s.user, None);
        let s = vars(&[
            (XTHUNK_ETCD_CACERT, "/ca.pem"),
            (XTHUNK_ETCD_CERT, "/c.pem"),
            (XTHUNK_ETCD_KEY, "/k.pem"),
            (XTHUNK_ETCD_USER, "alice"),
            (XTHUNK_ETCD_PASSWORD, "s3cret"),
        ])
        .unwrap();
        assert_eq!(
            s.tls.as_ref().unwrap().identity,
            Some(("/c.pem".into(), "/k.pem".into()))
        );
        assert_eq!(s.user, Some(EtcdUser::new("alice", "s3cret")));
        // The password never shows.
        let shown = format!("{s:?}");
        assert!(
            shown.contains("alice") && !shown.contains("s3cret"),
            "{shown}"
        );
        let s = vars(&[(XTHUNK_ETCD_USER, "bob"), (XTHUNK_ETCD_PASSWORD, "pw")]).unwrap();
        assert_eq!((s.tls, s.user.unwrap().name()), (None, "bob"));
    }

    #[test]
    fn inconsistent_options_are_refused_naming_the_variables() {
        let cases: [(&[(&str, &str)], &str); 5] = [
            (
                &[(XTHUNK_ETCD_CACERT, "/ca"), (XTHUNK_ETCD_CERT, "/c")],
                "XTHUNK_ETCD_CERT and XTHUNK_ETCD_KEY go together",
            ),
            (
                &[(XTHUNK_ETCD_KEY, "/k")],
                "XTHUNK_ETCD_CERT and XTHUNK_ETCD_KEY go together",
            ),
            (
                &[(XTHUNK_ETCD_CERT, "/c"), (XTHUNK_ETCD_KEY, "/k")],
                "needs TLS: set XTHUNK_ETCD_CACERT",
            ),
            (
                &[(XTHUNK_ETCD_USER, "alice")],
                "XTHUNK_ETCD_USER is set but XTHUNK_ETCD_PASSWORD is not",
            ),
            (
                &[(XTHUNK_ETCD_PASSWORD, "pw")],
                "XTHUNK_ETCD_PASSWORD is set but XTHUNK_ETCD_USER is not",
            ),
        ];
        for (pairs, want) in cases {
            let e = vars(pairs).unwrap_err();
            assert!(matches!(e, DistributedError::Config(_)), "{e:?}");
            assert!(e.to_string().contains(want), "{want}: {e}");
        }
    }

    #[test]
    fn endpoints_get_the_scheme_of_the_options() {
        let eps = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let plain = EtcdSecurity::none();
        let tls = EtcdSecurity::none().with_tls(EtcdTls {
            ca: "/ca".into(),
            identity: None,
        });
        assert_eq!(
            plain.urls(&eps(&["a:1", "http://b:2"])).unwrap(),
            eps(&["http://a:1", "http://b:2"])
        );
        assert_eq!(
            tls.urls(&eps(&["a:1", "https://b:2", "[::1]:3"])).unwrap(),
            eps(&["https://a:1", "https://b:2", "https://[::1]:3"])
        );
        let e = plain.urls(&eps(&["a:1", "https://b:2"])).unwrap_err();
        assert!(e.contains("https:// but no CA is given"), "{e}");
        let e = tls.urls(&eps(&["http://b:2"])).unwrap_err();
        assert!(e.contains("plain http:// but TLS is configured"), "{e}");
        let e = plain.urls(&eps(&["unix://b"])).unwrap_err();
        assert!(e.contains("unknown scheme unix://"), "{e}");
        // The user alone changes no scheme.
        let user = EtcdSecurity::none().with_user(EtcdUser::new("u", "p"));
        assert_eq!(user.urls(&eps(&["a:1"])).unwrap(), eps(&["http://a:1"]));
    }

    #[test]
    fn unreadable_certificate_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing-ca.pem");
        let s = EtcdSecurity::none().with_tls(EtcdTls {
            ca: missing.clone(),
            identity: None,
        });
        let e = s.apply(ConnectOptions::new()).unwrap_err();
        assert!(
            e.contains(&format!("cannot read the etcd CA {}", missing.display())),
            "{e}"
        );
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, b"-----BEGIN CERTIFICATE-----\n").unwrap();
        let s = EtcdSecurity::none().with_tls(EtcdTls {
            ca,
            identity: Some((dir.path().join("c.pem"), dir.path().join("k.pem"))),
        });
        let e = s.apply(ConnectOptions::new()).unwrap_err();
        assert!(e.contains("cannot read the etcd client certificate"), "{e}");
        // A huge file is not read into memory.
        let big = dir.path().join("big.pem");
        let f = std::fs::File::create(&big).unwrap();
        f.set_len(MAX_PEM + 10).unwrap();
        let s = EtcdSecurity::none().with_tls(EtcdTls {
            ca: big,
            identity: None,
        });
        let e = s.apply(ConnectOptions::new()).unwrap_err();
        assert!(e.contains("larger than"), "{e}");
    }

    #[test]
    fn auth_errors_get_a_hint() {
        assert!(
            auth_hint("etcdserver: authentication failed, invalid user ID or password")
                .unwrap()
                .contains("XTHUNK_ETCD_PASSWORD")
        );
        assert!(
            auth_hint("etcdserver: user name is empty")
                .unwrap()
                .contains("requires authentication")
        );
        assert_eq!(auth_hint("etcdserver: request timed out"), None);
    }
}
