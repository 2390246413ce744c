//! Finding and opening NVIDIA libraries at run time, with a record of every place tried.
//!
//! Search order for the toolkit libraries (NVRTC, cuBLAS):
//!
//! 1. every folder of `XTHUNK_CUDA_PATH` (`:`-separated);
//! 2. `$CUDA_HOME/lib64` (then `$CUDA_PATH/lib64`), and `/usr/local/cuda/lib64`;
//! 3. the library folders of pip's `nvidia-*` wheels (`nvidia/cuda_nvrtc/lib`,
//!    `nvidia/cublas/lib`, and CUDA 13's `nvidia/cu13/lib`) under every Python package folder
//!    found: each entry of `XTHUNK_PIP_PREFIX` (`:`-separated; a `pip install --target` folder,
//!    a venv or a prefix), `$XDG_CACHE_HOME/xthunk/pip` and `~/.cache/xthunk/pip` (where the
//!    test setup installs the wheels), `$VIRTUAL_ENV`, `$CONDA_PREFIX`,
//!    `~/.local/lib/python3*/site-packages`, `/usr/local/lib/python3*/{dist,site}-packages`,
//!    `/usr/lib/python3*/{dist,site}-packages` and pyenv's versions;
//! 4. the sonames through the dynamic loader's own search (`LD_LIBRARY_PATH`, the ld cache).
//!
//! The driver (`libcuda.so.1`) comes with the kernel driver, not the toolkit: it is searched in
//! `XTHUNK_CUDA_PATH`, then by name with the names cudarc itself uses. When the override finds
//! it, the library is opened by full path and kept open, so that cudarc's later `dlopen` of
//! `libcuda.so.1` by name resolves to that already-loaded object.

use std::path::PathBuf;
pub use xthunk_core::backend::search::{Attempt, describe_attempts};
use xthunk_core::backend::search::{
    dedup_paths, error_chain, installed_site_packages, site_packages_under, split_paths,
};

/// A `dlopen` failure as a short outcome: `not found` when the file does not exist,
/// otherwise the loader's message (e.g. a wrong architecture or a missing dependency).
pub fn dlopen_outcome(e: &libloading::Error) -> String {
    let msg = error_chain(e);
    if msg.contains("No such file or directory") {
        "not found".into()
    } else {
        msg
    }
}

/// Where to look for NVIDIA libraries. [`SearchConfig::from_env`] reads the environment once;
/// tests build one explicitly.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SearchConfig {
    /// `XTHUNK_CUDA_PATH`: folders searched first, for every library (driver included).
    pub cuda_path: Vec<PathBuf>,
    /// Toolkit library folders: `$CUDA_HOME/lib64`, `/usr/local/cuda/lib64`.
    pub toolkit_dirs: Vec<PathBuf>,
    /// Python package folders (`site-packages` or `pip install --target` folders) whose
    /// `nvidia/*/lib` folders hold wheel libraries.
    pub python_dirs: Vec<PathBuf>,
    /// Whether to finish with the dynamic loader's search by soname.
    pub system_search: bool,
}

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// The user's cache folder: `$XDG_CACHE_HOME`, else `~/.cache`.
pub fn user_cache_dir() -> Option<PathBuf> {
    env_path("XDG_CACHE_HOME").or_else(|| env_path("HOME").map(|h| h.join(".cache")))
}

impl SearchConfig {
    /// The search described in the [module documentation](self), from the environment.
    pub fn from_env() -> Self {
        let cuda_path = std::env::var("XTHUNK_CUDA_PATH")
            .map(|v| split_paths(&v))
            .unwrap_or_default();
        let mut toolkit_dirs = vec![];
        for var in ["CUDA_HOME", "CUDA_PATH"] {
            if let Some(h) = env_path(var) {
                toolkit_dirs.push(h.join("lib64"));
            }
        }
        toolkit_dirs.push(PathBuf::from("/usr/local/cuda/lib64"));

        let mut python_dirs = vec![];
        if let Ok(v) = std::env::var("XTHUNK_PIP_PREFIX") {
            for p in split_paths(&v) {
                python_dirs.extend(site_packages_under(&p));
                python_dirs.push(p);
            }
        }
        if let Some(c) = user_cache_dir() {
            python_dirs.push(c.join("xthunk").join("pip"));
        }
        if let Some(home) = env_path("HOME") {
            python_dirs.push(home.join(".cache").join("xthunk").join("pip"));
        }
        python_dirs.extend(installed_site_packages(env_path, true));
        dedup_paths(&mut python_dirs);

        SearchConfig {
            cuda_path,
            toolkit_dirs,
            python_dirs,
            system_search: true,
        }
    }

    /// A search of exactly these folders and nothing else (no system search): for tests.
    pub fn only(dirs: Vec<PathBuf>) -> Self {
        SearchConfig {
            cuda_path: dirs,
            toolkit_dirs: vec![],
            python_dirs: vec![],
            system_search: false,
        }
    }

    /// The search for a toolkit library: folders from the override, the toolkit and the
    /// wheels (`wheel_subdirs` under each Python folder), then `names` by soname.
    pub fn library(
        &self,
        what: &'static str,
        names: &[&str],
        wheel_subdirs: &[&str],
    ) -> LibrarySearch {
        let mut dirs = self.cuda_path.clone();
        dirs.extend(self.toolkit_dirs.iter().cloned());
        for py in &self.python_dirs {
            for sub in wheel_subdirs {
                dirs.push(py.join(sub));
            }
        }
        LibrarySearch {
            what,
            dirs,
            names: names.iter().map(|s| s.to_string()).collect(),
            by_name: self.system_search,
        }
    }
}

/// How to find one library.
#[derive(Clone, Debug)]
pub struct LibrarySearch {
    /// What it is, for messages (`NVRTC`).
    pub what: &'static str,
    pub dirs: Vec<PathBuf>,
    /// File names, best first (`libnvrtc.so.13`, `libnvrtc.so.12`, …).
    pub names: Vec<String>,
    /// Whether to try the names through the dynamic loader's search last.
    pub by_name: bool,
}

/// A library that was opened, and where.
#[derive(Debug)]
pub struct Opened {
    pub lib: libloading::Library,
    /// The full path, or the name the dynamic loader resolved.
    pub path: String,
}

/// The library could not be found or opened: every place tried.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{what} not found; tried: {}", describe_attempts(.attempts))]
pub struct NotFound {
    pub what: &'static str,
    pub attempts: Vec<Attempt>,
}

/// Opens a shared library by path or name.
fn dlopen(place: &str) -> Result<libloading::Library, String> {
    // SAFETY: loading a library runs its initializers. The libraries opened here are NVIDIA's
    // (or the project's driver emulator), whose initializers have no preconditions.
    unsafe { libloading::Library::new(place) }.map_err(|e| dlopen_outcome(&e))
}

impl LibrarySearch {
    /// Opens candidates in order and returns the first that `accept` takes (`accept` checks
    /// symbols or the version; a refusal is recorded with its reason and the search goes
    /// on).
    pub fn open(
        &self,
        mut accept: impl FnMut(&libloading::Library, &str) -> Result<(), String>,
    ) -> Result<(Opened, Vec<Attempt>), NotFound> {
        let mut attempts = vec![];
        let mut try_place = |place: String, attempts: &mut Vec<Attempt>| match dlopen(&place) {
            Ok(lib) => match accept(&lib, &place) {
                Ok(()) => Some(Opened { lib, path: place }),
                Err(why) => {
                    attempts.push(Attempt {
                        place,
                        outcome: format!("refused: {why}"),
                    });
                    None
                }
            },
            Err(e) => {
                attempts.push(Attempt { place, outcome: e });
                None
            }
        };
        for dir in &self.dirs {
            if !dir.is_dir() {
                attempts.push(Attempt {
                    place: dir.display().to_string(),
                    outcome: "no such folder".into(),
                });
                continue;
            }
            let mut any = false;
            for name in &self.names {
                let p = dir.join(name);
                if p.exists() {
                    any = true;
                    if let Some(o) = try_place(p.display().to_string(), &mut attempts) {
                        return Ok((o, attempts));
                    }
                }
            }
            if !any {
                attempts.push(Attempt {
                    place: dir.display().to_string(),
                    outcome: format!("none of {}", self.names.join(", ")),
                });
            }
        }
        if self.by_name {
            for name in &self.names {
                if let Some(o) = try_place(name.clone(), &mut attempts) {
                    return Ok((o, attempts));
                }
            }
        }
        Err(NotFound {
            what: self.what,
            attempts,
        })
    }
}

/// Checks that `lib` exports every symbol in `names`; the error names the first missing.
pub fn check_symbols(lib: &libloading::Library, names: &[&str]) -> Result<(), String> {
    for n in names {
        // SAFETY: only the symbol's address is looked up (as an untyped pointer); nothing is
        // called or dereferenced.
        let found = unsafe { lib.get::<*const std::ffi::c_void>(n.as_bytes()) }.is_ok();
        if !found {
            return Err(format!("symbol `{n}` missing"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_override_lists_every_place() {
        let dir = std::env::temp_dir().join(format!("xthunk-loader-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let cfg = SearchConfig::only(vec![dir.clone(), dir.join("missing")]);
        let s = cfg.library("NVRTC", &["libnvrtc.so.12"], &["nvidia/cuda_nvrtc/lib"]);
        let err = s.open(|_, _| Ok(())).err().map(|e| e.to_string());
        let msg = err.unwrap_or_default();
        assert!(msg.starts_with("NVRTC not found; tried: "), "{msg}");
        assert!(msg.contains(&format!("{} (none of libnvrtc.so.12)", dir.display())));
        let grouped = describe_attempts(&[
            Attempt {
                place: "a".into(),
                outcome: "not found".into(),
            },
            Attempt {
                place: "b".into(),
                outcome: "not found".into(),
            },
            Attempt {
                place: "b".into(),
                outcome: "not found".into(),
            },
            Attempt {
                place: "c".into(),
                outcome: "refused: old".into(),
            },
        ]);
        assert_eq!(grouped, "a, b (not found); c (refused: old)");
        assert!(msg.contains("missing (no such folder)"), "{msg}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn env_config_has_the_standard_places() {
        let c = SearchConfig::from_env();
        assert!(
            c.toolkit_dirs
                .contains(&PathBuf::from("/usr/local/cuda/lib64"))
        );
        assert!(c.system_search);
        let s = c.library("NVRTC", &["libnvrtc.so.12"], &["nvidia/cuda_nvrtc/lib"]);
        assert!(
            s.dirs
                .iter()
                .any(|d| d.ends_with("xthunk/pip/nvidia/cuda_nvrtc/lib"))
                || user_cache_dir().is_none()
        );
    }
}
