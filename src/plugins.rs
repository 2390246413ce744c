//! Custom-call plugins of a process: the shared libraries named by `--plugin PATH`
//! (repeatable) and by the `XTHUNK_PLUGINS` variable (paths separated by `:`), loaded once
//! each into the process's custom-call registry (`xthunk_core::custom_call`).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use xthunk_core::custom_call::{CustomCallError, Plugin, load_plugin, registry};

/// The variable naming plugins to load, `:`-separated.
pub const PLUGINS_VAR: &str = "XTHUNK_PLUGINS";

/// The plugins `XTHUNK_PLUGINS` names (empty entries skipped).
pub fn from_env() -> Vec<PathBuf> {
    std::env::var_os(PLUGINS_VAR)
        .map(|v| {
            std::env::split_paths(&v)
                .filter(|p| !p.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// Loads the plugins of `XTHUNK_PLUGINS`, then `paths`, each file once per process (a file
/// named again, by either, is not loaded twice). The first failure is the error, naming the
/// file; plugins loaded before it stay registered.
pub fn load_plugins(paths: &[PathBuf]) -> Result<Vec<Plugin>, CustomCallError> {
    static LOADED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    let mut out = vec![];
    for p in from_env().iter().chain(paths) {
        let key = canonical(p);
        let mut loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
        if loaded.contains(&key) {
            continue;
        }
        let plugin = load_plugin(p, registry())?;
        tracing::info!(plugin = %p.display(), targets = ?plugin.targets, "loaded custom-call plugin");
        loaded.push(key);
        out.push(plugin);
    }
    Ok(out)
}

fn canonical(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}
