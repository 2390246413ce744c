//! Where a process's rank, world size, coordinator and job id come from.
//!
//! Each field is taken from the first source that has it:
//!
//! 1. explicit [`Overrides`] (command-line flags);
//! 2. the `XTHUNK_*` variables: [`XTHUNK_RANK`], [`XTHUNK_WORLD_SIZE`], [`XTHUNK_COORDINATOR`],
//!    [`XTHUNK_JOB_ID`], [`XTHUNK_LOCAL_RANK`] (what `xthunk launch` sets);
//! 3. the cluster environment, detected in this order (as JAX's cluster detection does):
//!    - **Slurm**, when `SLURM_JOB_ID` and `SLURM_PROCID` are set (a task started by `srun`;
//!      a bare `salloc` shell has no `SLURM_PROCID`): rank `SLURM_PROCID`, world `SLURM_NTASKS`,
//!      local rank `SLURM_LOCALID`, job id `slurm-<SLURM_JOB_ID>.<SLURM_STEP_ID>` (two steps of
//!      one allocation are two jobs), coordinator `etcd://<head node>:2379`, the head node being
//!      the first host of `SLURM_STEP_NODELIST` (else `SLURM_JOB_NODELIST`, `SLURM_NODELIST`)
//!      in Slurm's compressed host-list syntax (`node[001-004,9],login1` -> `node001`);
//!    - **Open MPI**, when `OMPI_COMM_WORLD_RANK` and `OMPI_COMM_WORLD_SIZE` are set: those,
//!      local rank `OMPI_COMM_WORLD_LOCAL_RANK`; with `OMPI_MCA_orte_hnp_uri` (mpirun of Open
//!      MPI up to 4, e.g. `1531576320.0;tcp://10.96.0.1,10.148.0.1:34911`) the job id is
//!      `ompi-<its job number>` and the coordinator `etcd://<launcher address>:2379`; else the
//!      job id comes from `PMIX_NAMESPACE` (Open MPI 5) and the coordinator must be given;
//!    - **Kubernetes indexed jobs**, when `JOB_COMPLETION_INDEX` is set: it is the rank; the
//!      world size must be given (`XTHUNK_WORLD_SIZE`, the job's `parallelism`: unlike JAX we do
//!      not query the API server); the job id is the job name, from the pod's hostname
//!      `<job-name>-<index>`; the coordinator (an etcd service) must be given;
//! 4. otherwise a single process: rank 0 of 1, the local coordinator, job id `single`.
//!
//! `XTHUNK_RANK` comes with `XTHUNK_WORLD_SIZE` (a rank without its world is an error), and a
//! job of more than one rank needs a job id and, unless derived above, a coordinator. The
//! environment is passed in as a map, so that detection is a pure function (and tested so).

use super::{DistributedError, DistributedResult, validate_job_id, validate_rank};
use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

pub const XTHUNK_RANK: &str = "XTHUNK_RANK";
pub const XTHUNK_WORLD_SIZE: &str = "XTHUNK_WORLD_SIZE";
pub const XTHUNK_COORDINATOR: &str = "XTHUNK_COORDINATOR";
pub const XTHUNK_JOB_ID: &str = "XTHUNK_JOB_ID";
pub const XTHUNK_LOCAL_RANK: &str = "XTHUNK_LOCAL_RANK";

/// etcd's registered client port: the port of a coordinator derived from a cluster's head node.
pub const ETCD_DEFAULT_PORT: u16 = 2379;

const SLURM_JOB_ID: &str = "SLURM_JOB_ID";
const SLURM_STEP_ID: &str = "SLURM_STEP_ID";
const SLURM_PROCID: &str = "SLURM_PROCID";
const SLURM_NTASKS: &str = "SLURM_NTASKS";
const SLURM_LOCALID: &str = "SLURM_LOCALID";
const SLURM_NODELISTS: [&str; 3] = [
    "SLURM_STEP_NODELIST",
    "SLURM_JOB_NODELIST",
    "SLURM_NODELIST",
];
const OMPI_RANK: &str = "OMPI_COMM_WORLD_RANK";
const OMPI_SIZE: &str = "OMPI_COMM_WORLD_SIZE";
const OMPI_LOCAL_RANK: &str = "OMPI_COMM_WORLD_LOCAL_RANK";
const OMPI_HNP_URI: &str = "OMPI_MCA_orte_hnp_uri";
const PMIX_NAMESPACE: &str = "PMIX_NAMESPACE";
const K8S_INDEX: &str = "JOB_COMPLETION_INDEX";
const HOSTNAME: &str = "HOSTNAME";

/// Which coordinator a job meets in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoordinatorSpec {
    /// In-process (`local`): the ranks are threads of one process.
    Local,
    /// An etcd v3 cluster (`etcd://HOST:PORT[,HOST:PORT...]`); `endpoints` are `HOST:PORT`.
    Etcd { endpoints: Vec<String> },
    /// The embedded coordinator that `xthunk launch` serves on a Unix socket
    /// (`unix:///ABSOLUTE/PATH`), see [`embedded`](super::embedded).
    Unix { path: std::path::PathBuf },
}

impl fmt::Display for CoordinatorSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CoordinatorSpec::Local => f.write_str("local"),
            CoordinatorSpec::Etcd { endpoints } => write!(f, "etcd://{}", endpoints.join(",")),
            CoordinatorSpec::Unix { path } => write!(f, "unix://{}", path.display()),
        }
    }
}

impl FromStr for CoordinatorSpec {
    type Err = DistributedError;

    /// `local`, `etcd://HOST[:PORT][,HOST[:PORT]...]` (port 2379 by default; an IPv6 host
    /// in brackets, `etcd://[::1]:2379`), or `unix:///ABSOLUTE/PATH` (an embedded
    /// coordinator's socket).
    fn from_str(s: &str) -> DistributedResult<Self> {
        let bad = |why: &str| {
            DistributedError::Config(format!(
                "invalid coordinator `{s}`: {why} (expected `local`, `etcd://HOST:PORT[,HOST:PORT...]` \
                 or `unix:///PATH`)"
            ))
        };
        let s = s.trim();
        if s == "local" {
            return Ok(CoordinatorSpec::Local);
        }
        if let Some(path) = s.strip_prefix("unix://") {
            let path = std::path::PathBuf::from(path);
            if !path.is_absolute() || path.file_name().is_none() {
                return Err(bad("a socket needs an absolute path"));
            }
            return Ok(CoordinatorSpec::Unix { path });
        }
        let Some(rest) = s.strip_prefix("etcd://") else {
            return Err(bad("unknown scheme"));
        };
        let mut endpoints = Vec::new();
        for ep in rest.split(',') {
            let ep = ep.trim().trim_end_matches('/');
            let (host, port) = split_host_port(ep).ok_or_else(|| bad("bad endpoint"))?;
            if host.is_empty()
                || host.contains('/')
                || host.contains('@')
                || host.chars().any(char::is_whitespace)
            {
                return Err(bad("bad host"));
            }
            let port = match port {
                Some(p) => p
                    .parse::<u16>()
                    .ok()
                    .filter(|&p| p != 0)
                    .ok_or_else(|| bad("bad port"))?,
                None => ETCD_DEFAULT_PORT,
            };
            endpoints.push(format!("{host}:{port}"));
        }
        Ok(CoordinatorSpec::Etcd { endpoints })
    }
}

/// `host:port`, `host`, `[v6]:port`, `[v6]` -> (host as written, brackets kept; port).
fn split_host_port(ep: &str) -> Option<(&str, Option<&str>)> {
    if ep.starts_with('[') {
        let close = ep.find(']')?;
        let host = &ep[..=close];
        match &ep[close + 1..] {
            "" => Some((host, None)),
            rest => Some((host, Some(rest.strip_prefix(':')?))),
        }
    } else {
        match ep.split_once(':') {
            Some((h, p)) if !p.contains(':') => Some((h, Some(p))),
            Some(_) => None,
            None => Some((ep, None)),
        }
    }
}

/// Where the rank and world size came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterKind {
    /// Flags or `XTHUNK_RANK`/`XTHUNK_WORLD_SIZE`.
    Explicit,
    Slurm,
    OpenMpi,
    Kubernetes,
    /// Nothing: a single process.
    Single,
}

impl ClusterKind {
    pub const fn name(self) -> &'static str {
        match self {
            ClusterKind::Explicit => "explicit",
            ClusterKind::Slurm => "slurm",
            ClusterKind::OpenMpi => "open-mpi",
            ClusterKind::Kubernetes => "kubernetes",
            ClusterKind::Single => "single",
        }
    }
}

impl fmt::Display for ClusterKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Values given on the command line; each wins over every environment variable.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    pub rank: Option<usize>,
    pub world_size: Option<usize>,
    pub coordinator: Option<CoordinatorSpec>,
    pub job_id: Option<String>,
}

/// This process's place in its job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistributedConfig {
    pub rank: usize,
    pub world_size: usize,
    /// The rank among the processes of this host, when known (to pick a device).
    pub local_rank: Option<usize>,
    pub coordinator: CoordinatorSpec,
    pub job_id: String,
    /// Where rank and world size came from.
    pub source: ClusterKind,
}

impl DistributedConfig {
    /// A single process: rank 0 of 1, the local coordinator.
    pub fn single() -> Self {
        DistributedConfig {
            rank: 0,
            world_size: 1,
            local_rank: Some(0),
            coordinator: CoordinatorSpec::Local,
            job_id: "single".into(),
            source: ClusterKind::Single,
        }
    }

    /// Detection from this process's environment (variables that are not UTF-8 are ignored).
    pub fn from_process_env(overrides: &Overrides) -> DistributedResult<Self> {
        let env: HashMap<String, String> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        Self::detect(&env, overrides)
    }

    /// Detection from `env` (see the [module documentation](self)).
    pub fn detect(env: &HashMap<String, String>, overrides: &Overrides) -> DistributedResult<Self> {
        let var = |name: &str| env.get(name).map(|v| v.trim()).filter(|v| !v.is_empty());
        let num = |name: &str| -> DistributedResult<Option<usize>> {
            var(name)
                .map(|v| {
                    v.parse::<usize>().map_err(|_| {
                        DistributedError::Config(format!(
                            "{name}={v:?}: expected a non-negative integer"
                        ))
                    })
                })
                .transpose()
        };

        let rank_explicit = overrides
            .rank
            .map_or_else(|| num(XTHUNK_RANK), |r| Ok(Some(r)))?;
        let world_explicit = overrides
            .world_size
            .map_or_else(|| num(XTHUNK_WORLD_SIZE), |w| Ok(Some(w)))?;
        let cluster = detect_cluster(&var, &num)?;

        let (rank, world_size, source) = match (rank_explicit, world_explicit, &cluster) {
            (Some(r), Some(w), _) => (r, w, ClusterKind::Explicit),
            (Some(r), None, _) => {
                return Err(DistributedError::Config(format!(
                    "a rank ({r}) is given but no world size: set {XTHUNK_WORLD_SIZE} (or --world-size)"
                )));
            }
            (
                None,
                Some(w),
                Some(Cluster {
                    rank: Some(r),
                    kind,
                    ..
                }),
            ) => {
                // E.g. a Kubernetes index with the world size from XTHUNK_WORLD_SIZE.
                (*r, w, *kind)
            }
            (None, Some(w), _) => {
                return Err(DistributedError::Config(format!(
                    "a world size ({w}) is given but no rank: set {XTHUNK_RANK} (or --rank)"
                )));
            }
            (None, None, Some(c)) => match (c.rank, c.world_size) {
                (Some(r), Some(w)) => (r, w, c.kind),
                _ => return Err(DistributedError::Config(c.missing_world.clone())),
            },
            (None, None, None) => (0, 1, ClusterKind::Single),
        };
        validate_rank(rank, world_size)?;

        let local_rank = match num(XTHUNK_LOCAL_RANK)? {
            Some(l) => Some(l),
            None => match source {
                ClusterKind::Single => Some(0),
                ClusterKind::Explicit => None,
                _ => cluster.as_ref().and_then(|c| c.local_rank),
            },
        };

        let coordinator = match &overrides.coordinator {
            Some(c) => c.clone(),
            None => match var(XTHUNK_COORDINATOR) {
                Some(v) => v.parse()?,
                None => match cluster.as_ref().and_then(|c| c.coordinator.clone()) {
                    Some(c) if world_size > 1 => c,
                    _ if world_size == 1 => CoordinatorSpec::Local,
                    _ => {
                        return Err(DistributedError::Config(format!(
                            "a job of {world_size} processes ({source}) needs a coordinator: set \
                             {XTHUNK_COORDINATOR}=etcd://HOST:PORT (or --coordinator)"
                        )));
                    }
                },
            },
        };

        let job_id = match &overrides.job_id {
            Some(j) => j.clone(),
            None => match var(XTHUNK_JOB_ID) {
                Some(j) => j.to_string(),
                None => match cluster.as_ref().and_then(|c| c.job_id.clone()) {
                    Some(j) => j,
                    None if world_size == 1 => "single".to_string(),
                    None => {
                        return Err(DistributedError::Config(format!(
                            "a job of {world_size} processes ({source}) needs a job id, the \
                             same for all its ranks and unique among the jobs sharing its \
                             coordinator: set {XTHUNK_JOB_ID} (or --job-id)"
                        )));
                    }
                },
            },
        };
        validate_job_id(&job_id)?;

        Ok(DistributedConfig {
            rank,
            world_size,
            local_rank,
            coordinator,
            job_id,
            source,
        })
    }
}

/// What a cluster environment says; `missing_world` explains an absent world size.
struct Cluster {
    kind: ClusterKind,
    rank: Option<usize>,
    world_size: Option<usize>,
    local_rank: Option<usize>,
    coordinator: Option<CoordinatorSpec>,
    job_id: Option<String>,
    missing_world: String,
}

fn detect_cluster<'a>(
    var: &dyn Fn(&str) -> Option<&'a str>,
    num: &dyn Fn(&str) -> DistributedResult<Option<usize>>,
) -> DistributedResult<Option<Cluster>> {
    let etcd_at = |host: &str| CoordinatorSpec::Etcd {
        endpoints: vec![format!("{host}:{ETCD_DEFAULT_PORT}")],
    };
    if let (Some(job), Some(_)) = (var(SLURM_JOB_ID), var(SLURM_PROCID)) {
        let head = SLURM_NODELISTS
            .iter()
            .find_map(|n| var(n))
            .map(first_host)
            .transpose()?;
        let job_id = match var(SLURM_STEP_ID) {
            Some(step) => format!("slurm-{job}.{step}"),
            None => format!("slurm-{job}"),
        };
        return Ok(Some(Cluster {
            kind: ClusterKind::Slurm,
            rank: num(SLURM_PROCID)?,
            world_size: num(SLURM_NTASKS)?,
            local_rank: num(SLURM_LOCALID)?,
            coordinator: head.as_deref().map(etcd_at),
            job_id: Some(sanitize_job_id(&job_id)),
            missing_world: format!("Slurm task without {SLURM_NTASKS}: set {XTHUNK_WORLD_SIZE}"),
        }));
    }
    if var(OMPI_RANK).is_some() && var(OMPI_SIZE).is_some() {
        let (job_id, coordinator) = match var(OMPI_HNP_URI) {
            Some(uri) => {
                let (job, host) = parse_orte_uri(uri)?;
                (Some(format!("ompi-{job}")), Some(etcd_at(&host)))
            }
            None => (
                var(PMIX_NAMESPACE).map(|ns| sanitize_job_id(&format!("ompi-{ns}"))),
                None,
            ),
        };
        return Ok(Some(Cluster {
            kind: ClusterKind::OpenMpi,
            rank: num(OMPI_RANK)?,
            world_size: num(OMPI_SIZE)?,
            local_rank: num(OMPI_LOCAL_RANK)?,
            coordinator,
            job_id,
            missing_world: String::new(),
        }));
    }
    if let Some(index) = num(K8S_INDEX)? {
        // An indexed job's pods are named `<job-name>-<index>` (their hostname).
        let job_id = var(HOSTNAME).and_then(|h| {
            h.strip_suffix(&format!("-{index}"))
                .filter(|name| !name.is_empty())
                .map(|name| sanitize_job_id(&format!("k8s-{name}")))
        });
        return Ok(Some(Cluster {
            kind: ClusterKind::Kubernetes,
            rank: Some(index),
            world_size: None,
            local_rank: Some(0),
            coordinator: None,
            job_id,
            missing_world: format!(
                "Kubernetes indexed job ({K8S_INDEX}={index}) without a world size: set \
                 {XTHUNK_WORLD_SIZE} to the job's parallelism"
            ),
        }));
    }
    Ok(None)
}

/// Characters outside `[A-Za-z0-9._-]` become `_`; at most 128 characters.
fn sanitize_job_id(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(128)
        .collect()
}

/// The first host of a Slurm host list: `node001`, `node[001-015],host2` -> `node001`,
/// `rack[2-3]-n[07,09]` -> `rack2-n07`.
pub fn first_host(list: &str) -> DistributedResult<String> {
    let bad = || DistributedError::Config(format!("cannot parse the Slurm node list `{list}`"));
    let mut host = String::new();
    let mut chars = list.trim().chars();
    while let Some(c) = chars.next() {
        match c {
            ',' => break,
            '[' => {
                // The first value of the bracket: up to the first ',' or '-' (a range).
                let mut first = String::new();
                let mut closed = false;
                let mut in_first = true;
                for c in chars.by_ref() {
                    match c {
                        ']' => {
                            closed = true;
                            break;
                        }
                        ',' | '-' => in_first = false,
                        c if in_first => first.push(c),
                        _ => {}
                    }
                }
                if !closed || first.is_empty() {
                    return Err(bad());
                }
                host.push_str(&first);
            }
            ']' => return Err(bad()),
            c => host.push(c),
        }
    }
    if host.is_empty() {
        return Err(bad());
    }
    Ok(host)
}

/// `1531576320.0;tcp://10.96.0.1,10.148.0.1:34911` -> (`1531576320`, `10.96.0.1`);
/// `…;tcp6://[fe80::1,2620::2]:43370` -> (…, `[fe80::1]`).
fn parse_orte_uri(uri: &str) -> DistributedResult<(String, String)> {
    let bad = || {
        DistributedError::Config(format!(
            "cannot parse {OMPI_HNP_URI}=`{uri}`: set {XTHUNK_COORDINATOR} and {XTHUNK_JOB_ID}"
        ))
    };
    let job = uri
        .split('.')
        .next()
        .filter(|j| !j.is_empty() && j.chars().all(|c| c.is_ascii_digit()));
    let job = job.ok_or_else(bad)?.to_string();
    let host = if let Some(i) = uri.find("tcp://") {
        let rest = &uri[i + "tcp://".len()..];
        rest.split([',', ':']).next().unwrap_or("").to_string()
    } else if let Some(i) = uri.find("tcp6://[") {
        let rest = &uri[i + "tcp6://[".len()..];
        let addr = rest.split([',', ']']).next().unwrap_or("");
        if addr.is_empty() {
            String::new()
        } else {
            format!("[{addr}]")
        }
    } else {
        String::new()
    };
    if host.is_empty() {
        return Err(bad());
    }
    Ok((job, host))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn detect(pairs: &[(&str, &str)]) -> DistributedResult<DistributedConfig> {
        DistributedConfig::detect(&env(pairs), &Overrides::default())
    }

    fn etcd(ep: &str) -> CoordinatorSpec {
        CoordinatorSpec::Etcd {
            endpoints: vec![ep.to_string()],
        }
    }

    #[test]
    fn nothing_is_a_single_process() {
        assert_eq!(detect(&[]).unwrap(), DistributedConfig::single());
        // A bare `salloc` shell is not a task.
        assert_eq!(
            detect(&[("SLURM_JOB_ID", "7")]).unwrap().source,
            ClusterKind::Single
        );
    }

    #[test]
    fn explicit_variables() {
        let c = detect(&[
            ("XTHUNK_RANK", "2"),
            ("XTHUNK_WORLD_SIZE", "4"),
            ("XTHUNK_COORDINATOR", "etcd://127.0.0.1:2379"),
            ("XTHUNK_JOB_ID", "train-1"),
            ("XTHUNK_LOCAL_RANK", "2"),
        ])
        .unwrap();
        assert_eq!(
            c,
            DistributedConfig {
                rank: 2,
                world_size: 4,
                local_rank: Some(2),
                coordinator: etcd("127.0.0.1:2379"),
                job_id: "train-1".into(),
                source: ClusterKind::Explicit,
            }
        );
    }

    #[test]
    fn explicit_errors_are_clear() {
        let msg = |pairs: &[(&str, &str)]| detect(pairs).unwrap_err().to_string();
        assert!(msg(&[("XTHUNK_RANK", "1")]).contains("no world size"));
        assert!(msg(&[("XTHUNK_WORLD_SIZE", "2")]).contains("no rank"));
        assert!(
            msg(&[("XTHUNK_RANK", "x"), ("XTHUNK_WORLD_SIZE", "2")]).contains("XTHUNK_RANK=\"x\"")
        );
        assert!(msg(&[("XTHUNK_RANK", "2"), ("XTHUNK_WORLD_SIZE", "2")]).contains("out of range"));
        let m = msg(&[
            ("XTHUNK_RANK", "0"),
            ("XTHUNK_WORLD_SIZE", "2"),
            ("XTHUNK_JOB_ID", "j"),
        ]);
        assert!(m.contains("needs a coordinator"), "{m}");
        let m = msg(&[
            ("XTHUNK_RANK", "0"),
            ("XTHUNK_WORLD_SIZE", "2"),
            ("XTHUNK_COORDINATOR", "etcd://h:1"),
        ]);
        assert!(m.contains("needs a job id"), "{m}");
        let m = msg(&[
            ("XTHUNK_RANK", "0"),
            ("XTHUNK_WORLD_SIZE", "2"),
            ("XTHUNK_COORDINATOR", "etcd://h:1"),
            ("XTHUNK_JOB_ID", "a/b"),
        ]);
        assert!(m.contains("invalid job id"), "{m}");
        assert!(msg(&[("XTHUNK_COORDINATOR", "zk://h:1")]).contains("unknown scheme"));
    }

    #[test]
    fn flags_win_over_variables() {
        let o = Overrides {
            rank: Some(1),
            world_size: Some(3),
            coordinator: Some(CoordinatorSpec::Local),
            job_id: Some("flag".into()),
        };
        let c = DistributedConfig::detect(
            &env(&[
                ("XTHUNK_RANK", "0"),
                ("XTHUNK_WORLD_SIZE", "8"),
                ("XTHUNK_COORDINATOR", "etcd://h:1"),
                ("XTHUNK_JOB_ID", "var"),
                ("SLURM_JOB_ID", "5"),
                ("SLURM_PROCID", "4"),
                ("SLURM_NTASKS", "8"),
            ]),
            &o,
        )
        .unwrap();
        assert_eq!(
            (c.rank, c.world_size, c.source),
            (1, 3, ClusterKind::Explicit)
        );
        assert_eq!(
            (c.coordinator, c.job_id.as_str()),
            (CoordinatorSpec::Local, "flag")
        );
    }

    #[test]
    fn slurm() {
        let c = detect(&[
            ("SLURM_JOB_ID", "123456"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_PROCID", "5"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_STEP_NODELIST", "gpu[017-020,031],login1"),
            ("SLURM_JOB_NODELIST", "other"),
        ])
        .unwrap();
        assert_eq!(
            c,
            DistributedConfig {
                rank: 5,
                world_size: 8,
                local_rank: Some(1),
                coordinator: etcd("gpu017:2379"),
                job_id: "slurm-123456.0".into(),
                source: ClusterKind::Slurm,
            }
        );
        // Variables win field by field: the coordinator here.
        let c = detect(&[
            ("SLURM_JOB_ID", "9"),
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_JOB_NODELIST", "n1"),
            ("XTHUNK_COORDINATOR", "etcd://etcd.svc:2400"),
        ])
        .unwrap();
        assert_eq!(c.coordinator, etcd("etcd.svc:2400"));
        assert_eq!(c.job_id, "slurm-9");
        let e = detect(&[("SLURM_JOB_ID", "9"), ("SLURM_PROCID", "0")]).unwrap_err();
        assert!(e.to_string().contains("SLURM_NTASKS"), "{e}");
    }

    #[test]
    fn slurm_host_lists() {
        for (list, head) in [
            ("node001", "node001"),
            ("node001,host2", "node001"),
            ("node[001-0015],host2", "node001"),
            ("node[001,007-015],host2", "node001"),
            ("rack[2-3]-n[07,09]", "rack2-n07"),
            ("a-b.c[9]", "a-b.c9"),
        ] {
            assert_eq!(first_host(list).unwrap(), head, "{list}");
        }
        for bad in ["", "[", "node[", "node]1", "n[]"] {
            assert!(first_host(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn open_mpi() {
        let c = detect(&[
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            (
                "OMPI_MCA_orte_hnp_uri",
                "1531576320.0;tcp://10.96.0.1,10.148.0.1,10.108.0.1:34911",
            ),
        ])
        .unwrap();
        assert_eq!(
            c,
            DistributedConfig {
                rank: 3,
                world_size: 4,
                local_rank: Some(1),
                coordinator: etcd("10.96.0.1:2379"),
                job_id: "ompi-1531576320".into(),
                source: ClusterKind::OpenMpi,
            }
        );
        let c = detect(&[
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            (
                "OMPI_MCA_orte_hnp_uri",
                "1314521088.0;tcp6://[fe80::b9b:ac5d:9cf0:b858,2620:10d:c083:150e::3000:2]:43370",
            ),
        ])
        .unwrap();
        assert_eq!(c.coordinator, etcd("[fe80::b9b:ac5d:9cf0:b858]:2379"));
        // Open MPI 5 (PRRTE): no hnp uri; the namespace names the job, the coordinator is given.
        let c = detect(&[
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("PMIX_NAMESPACE", "prterun-host-1234@1"),
            ("XTHUNK_COORDINATOR", "etcd://10.0.0.1:2379"),
        ])
        .unwrap();
        assert_eq!(c.job_id, "ompi-prterun-host-1234_1");
        let e =
            detect(&[("OMPI_COMM_WORLD_RANK", "1"), ("OMPI_COMM_WORLD_SIZE", "2")]).unwrap_err();
        assert!(e.to_string().contains("needs a coordinator"), "{e}");
        let e = detect(&[
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_MCA_orte_hnp_uri", "garbage"),
        ])
        .unwrap_err();
        assert!(e.to_string().contains("cannot parse"), "{e}");
    }

    #[test]
    fn kubernetes_indexed_job() {
        let c = detect(&[
            ("JOB_COMPLETION_INDEX", "2"),
            ("HOSTNAME", "trainer-2"),
            ("XTHUNK_WORLD_SIZE", "4"),
            ("XTHUNK_COORDINATOR", "etcd://etcd-client.default.svc:2379"),
        ])
        .unwrap();
        assert_eq!(
            c,
            DistributedConfig {
                rank: 2,
                world_size: 4,
                local_rank: Some(0),
                coordinator: etcd("etcd-client.default.svc:2379"),
                job_id: "k8s-trainer".into(),
                source: ClusterKind::Kubernetes,
            }
        );
        let e = detect(&[("JOB_COMPLETION_INDEX", "2")]).unwrap_err();
        assert!(e.to_string().contains("set XTHUNK_WORLD_SIZE"), "{e}");
        let e = detect(&[("JOB_COMPLETION_INDEX", "0"), ("XTHUNK_WORLD_SIZE", "2")]).unwrap_err();
        assert!(e.to_string().contains("needs a coordinator"), "{e}");
        let e = detect(&[
            ("JOB_COMPLETION_INDEX", "0"),
            ("XTHUNK_WORLD_SIZE", "2"),
            ("HOSTNAME", "pod-xyz"),
            ("XTHUNK_COORDINATOR", "etcd://e:1"),
        ])
        .unwrap_err();
        assert!(e.to_string().contains("needs a job id"), "{e}");
    }

    #[test]
    fn coordinator_specs() {
        assert_eq!(
            "local".parse::<CoordinatorSpec>().unwrap(),
            CoordinatorSpec::Local
        );
        assert_eq!(
            "etcd://a:1,b,[::1]:3".parse::<CoordinatorSpec>().unwrap(),
            CoordinatorSpec::Etcd {
                endpoints: vec!["a:1".into(), "b:2379".into(), "[::1]:3".into()]
            }
        );
        assert_eq!(
            "etcd://a:1,b:2"
                .parse::<CoordinatorSpec>()
                .unwrap()
                .to_string(),
            "etcd://a:1,b:2"
        );
        let unix = "unix:///tmp/x/coordinator.sock";
        assert_eq!(
            unix.parse::<CoordinatorSpec>().unwrap(),
            CoordinatorSpec::Unix {
                path: "/tmp/x/coordinator.sock".into()
            }
        );
        assert_eq!(unix.parse::<CoordinatorSpec>().unwrap().to_string(), unix);
        for bad in [
            "",
            "etcd://",
            "etcd://a:0",
            "etcd://a:x",
            "etcd://::1",
            "http://a:1",
            "etcd://u@h:1",
            "unix://",
            "unix://relative/sock",
        ] {
            assert!(bad.parse::<CoordinatorSpec>().is_err(), "{bad}");
        }
    }
}
