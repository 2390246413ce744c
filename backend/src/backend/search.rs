//! Path logic the backends' run-time library searches share: `:`-separated override
//! variables, Python package folders (where pip's wheels put vendor libraries), candidate
//! lists, trying candidates in order, and how the places tried read in an error.
//!
//! Nothing here opens a library: [`super::dylib`] does (`dlopen`, binding a symbol table,
//! version checks), handing [`open_first`] the candidates built here.

use std::fmt;
use std::path::{Path, PathBuf};

/// The value of the environment variable `name` as a path, when it is set and not empty.
pub fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// The user's cache folder: `$XDG_CACHE_HOME`, else `$HOME/.cache`; `var` gives a variable's
/// value when it is set and not empty ([`env_path`] for the environment).
pub fn user_cache_dir(var: impl Fn(&str) -> Option<PathBuf>) -> Option<PathBuf> {
    var("XDG_CACHE_HOME").or_else(|| var("HOME").map(|h| h.join(".cache")))
}

/// A `:`-separated list of folders (empty entries skipped).
pub fn split_paths(v: &str) -> Vec<PathBuf> {
    v.split(':')
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .collect()
}

/// Drops every path seen before, keeping the first occurrence (and the order).
pub fn dedup_paths(v: &mut Vec<PathBuf>) {
    let mut seen = std::collections::HashSet::new();
    v.retain(|p| seen.insert(p.clone()));
}

/// Subfolders of `base` whose names start with `prefix` (sorted, so the newest Python comes
/// last); none when `base` cannot be read.
pub fn subdirs_starting(base: &Path, prefix: &str) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(base) else {
        return vec![];
    };
    let mut v: Vec<PathBuf> = rd
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .map(|e| e.path())
        .collect();
    v.sort();
    v
}

/// `<prefix>/lib/python3*/{site,dist}-packages` that exist.
pub fn site_packages_under(prefix: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    for py in subdirs_starting(&prefix.join("lib"), "python3") {
        for leaf in ["site-packages", "dist-packages"] {
            let d = py.join(leaf);
            if d.is_dir() {
                out.push(d);
            }
        }
    }
    out
}

/// The package folders of the Python installations on this machine, in search order: those
/// of `$VIRTUAL_ENV`, `$CONDA_PREFIX`, `~/.local`, (when `pyenv`) every
/// `~/.pyenv/versions/3*`, `/usr/local` and `/usr`. `var` gives a variable's value when it is
/// set and not empty.
pub fn installed_site_packages(var: impl Fn(&str) -> Option<PathBuf>, pyenv: bool) -> Vec<PathBuf> {
    let mut out = vec![];
    for v in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(p) = var(v) {
            out.extend(site_packages_under(&p));
        }
    }
    if let Some(home) = var("HOME") {
        out.extend(site_packages_under(&home.join(".local")));
        if pyenv {
            for v in subdirs_starting(&home.join(".pyenv").join("versions"), "3") {
                out.extend(site_packages_under(&v));
            }
        }
    }
    out.extend(site_packages_under(Path::new("/usr/local")));
    out.extend(site_packages_under(Path::new("/usr")));
    out
}

/// Every candidate in search order: each of `names` in each of `dirs`, then (when
/// `by_name`) the bare names, for the dynamic loader's own search. Repeats are dropped.
pub fn candidates(dirs: &[PathBuf], names: &[&str], by_name: bool) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = dirs
        .iter()
        .flat_map(|d| names.iter().map(move |n| d.join(n)))
        .collect();
    if by_name {
        out.extend(names.iter().map(PathBuf::from));
    }
    dedup_paths(&mut out);
    out
}

/// True for a bare file name (no folder): one left to the dynamic loader's search.
pub fn is_bare_name(candidate: &Path) -> bool {
    candidate.parent().is_none_or(|p| p.as_os_str().is_empty())
}

/// An error with every source after it (`dlopen failed: <the loader's reason>`).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        msg = format!("{msg}: {s}");
        src = s.source();
    }
    msg
}

/// Why a candidate did not open: the error chain, after `dynamic loader: ` for a bare name.
pub fn open_failure(e: &dyn std::error::Error, bare: bool) -> String {
    let why = error_chain(e);
    if bare {
        format!("dynamic loader: {why}")
    } else {
        why
    }
}

/// `lacks required symbol a` / `lacks required symbols a, b`: why a library was refused.
pub fn lacks_symbols(missing: &[&str]) -> String {
    format!(
        "lacks required symbol{} {}",
        if missing.len() == 1 { "" } else { "s" },
        missing.join(", ")
    )
}

/// One place a library was looked for, and what happened there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// A path, a folder, or a bare name given to the dynamic loader.
    pub place: String,
    pub outcome: String,
}

impl Attempt {
    pub fn new(place: impl Into<String>, outcome: impl Into<String>) -> Self {
        Attempt {
            place: place.into(),
            outcome: outcome.into(),
        }
    }
}

impl fmt::Display for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.place, self.outcome)
    }
}

/// Every place tried, as one line; consecutive places with the same outcome are grouped
/// (`libcuda.so, libcuda.so.1 (not found); x.so (lacks …)`), a place repeated in a group
/// named once.
pub fn describe_attempts(attempts: &[Attempt]) -> String {
    let mut groups: Vec<(Vec<&str>, &str)> = vec![];
    for a in attempts {
        match groups.last_mut() {
            Some((places, outcome)) if *outcome == a.outcome => {
                if !places.contains(&a.place.as_str()) {
                    places.push(&a.place);
                }
            }
            _ => groups.push((vec![&a.place], &a.outcome)),
        }
    }
    groups
        .iter()
        .map(|(places, outcome)| format!("{} ({outcome})", places.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Tries `candidates` in order and returns the first that `open` accepts, with its path;
/// otherwise every attempt. A candidate in a folder that does not exist is not handed to
/// `open` (its outcome is `no such file`); a bare name is (`open`'s second argument says
/// which it is), for the dynamic loader to find.
pub fn open_first<T>(
    candidates: &[PathBuf],
    mut open: impl FnMut(&Path, bool) -> Result<T, String>,
) -> Result<(T, PathBuf), Vec<Attempt>> {
    let mut tried = Vec::new();
    for c in candidates {
        let bare = is_bare_name(c);
        if !bare && !c.exists() {
            tried.push(Attempt::new(c.display().to_string(), "no such file"));
            continue;
        }
        match open(c, bare) {
            Ok(t) => return Ok((t, c.clone())),
            Err(why) => tried.push(Attempt::new(c.display().to_string(), why)),
        }
    }
    Err(tried)
}

/// The file a loaded code address belongs to, from `/proc/self/maps` (for a library found by
/// bare name: where the dynamic loader found it).
pub fn file_containing(addr: usize) -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    for line in maps.lines() {
        let mut parts = line.split_whitespace();
        let (lo, hi) = parts.next()?.split_once('-')?;
        let (lo, hi) = (
            usize::from_str_radix(lo, 16).ok()?,
            usize::from_str_radix(hi, 16).ok()?,
        );
        if (lo..hi).contains(&addr) {
            let path = parts.nth(4)?;
            return path.starts_with('/').then(|| PathBuf::from(path));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn override_lists_split_on_colons() {
        assert_eq!(
            split_paths("/a::/b:"),
            vec![PathBuf::from("/a"), PathBuf::from("/b")]
        );
        assert!(split_paths("").is_empty());
        let mut v = split_paths("/a:/b:/a:/c:/b");
        dedup_paths(&mut v);
        assert_eq!(v, split_paths("/a:/b:/c"));
    }

    #[test]
    fn the_user_cache_folder_prefers_xdg() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| PathBuf::from(v))
            }
        };
        assert_eq!(
            user_cache_dir(vars(&[("XDG_CACHE_HOME", "/x"), ("HOME", "/h")])),
            Some(PathBuf::from("/x"))
        );
        assert_eq!(
            user_cache_dir(vars(&[("HOME", "/h")])),
            Some(PathBuf::from("/h/.cache"))
        );
        assert_eq!(user_cache_dir(vars(&[])), None);
        assert_eq!(env_path("XTHUNK_SURELY_UNSET_VARIABLE_FOR_TESTS"), None);
    }

    #[test]
    fn candidates_are_names_in_folders_then_bare_names() {
        let dirs = split_paths("/a:/b:/a");
        assert_eq!(
            candidates(&dirs, &["x.so", "x.so.6"], true),
            [
                "/a/x.so",
                "/a/x.so.6",
                "/b/x.so",
                "/b/x.so.6",
                "x.so",
                "x.so.6"
            ]
            .iter()
            .map(PathBuf::from)
            .collect::<Vec<_>>()
        );
        assert_eq!(
            candidates(&dirs, &["y.so"], false),
            vec![PathBuf::from("/a/y.so"), PathBuf::from("/b/y.so")]
        );
        assert!(is_bare_name(Path::new("x.so")));
        assert!(!is_bare_name(Path::new("/a/x.so")));
    }

    #[test]
    fn attempts_are_grouped_but_all_listed() {
        let s = describe_attempts(&[
            Attempt::new("/a/x", "no such file"),
            Attempt::new("/b/x", "no such file"),
            Attempt::new("/b/x", "no such file"),
            Attempt::new("x", "dynamic loader: not found"),
        ]);
        assert_eq!(
            s,
            "/a/x, /b/x (no such file); x (dynamic loader: not found)"
        );
        assert_eq!(Attempt::new("p", "why").to_string(), "p (why)");
        assert_eq!(lacks_symbols(&["a"]), "lacks required symbol a");
        assert_eq!(lacks_symbols(&["a", "b"]), "lacks required symbols a, b");
    }

    #[test]
    fn open_first_skips_missing_files_and_records_refusals() {
        let dir = std::env::temp_dir().join(format!("xthunk-search-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let present = dir.join("lib.so");
        let _ = std::fs::write(&present, b"");
        let cands = vec![
            dir.join("missing.so"),
            present.clone(),
            PathBuf::from("bare.so"),
        ];
        let mut seen = vec![];
        let r = open_first(&cands, |p, bare| {
            seen.push((p.to_path_buf(), bare));
            if bare { Ok(7) } else { Err("refused".into()) }
        });
        assert_eq!(r.ok(), Some((7, PathBuf::from("bare.so"))));
        assert_eq!(
            seen,
            vec![(present.clone(), false), (PathBuf::from("bare.so"), true)]
        );
        let r = open_first::<()>(&cands[..2], |_, _| Err("refused".into()));
        assert_eq!(
            r.err(),
            Some(vec![
                Attempt::new(cands[0].display().to_string(), "no such file"),
                Attempt::new(present.display().to_string(), "refused"),
            ])
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn error_chains_name_every_source() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl fmt::Display for Outer {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("dlopen failed")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let e = Outer(std::io::Error::other("x.so: cannot open"));
        assert_eq!(error_chain(&e), "dlopen failed: x.so: cannot open");
        assert_eq!(
            open_failure(&e, true),
            "dynamic loader: dlopen failed: x.so: cannot open"
        );
        assert_eq!(open_failure(&e, false), error_chain(&e));
    }

    #[test]
    fn code_addresses_map_to_their_file() {
        // This test's own code lies in the test executable, named by absolute path.
        let f = file_containing(split_paths as fn(&str) -> Vec<PathBuf> as usize);
        assert!(f.is_some_and(|p| p.is_absolute()));
        assert_eq!(file_containing(0), None);
    }
}
