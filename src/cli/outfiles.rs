//! Output files of `xthunk run --output-dir`: `NAME.npy` per output, written only after the
//! whole run succeeded. Every file is first written completely to a temporary file in the
//! same directory and synced; only when all of them are written are they renamed into place,
//! so a failure never leaves a partial `.npy` (and leaves no temporary file behind).

use super::error::{CliError, CliResult};
use super::npy;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use xthunk::ir::{DType, TensorSpec};
use xthunk_core::files::{MODE_PUBLIC, StagedFile};

/// The file name of an output: its name with anything but `[A-Za-z0-9_.-]` replaced by `_`
/// (and no leading dot), plus `.npy`.
pub fn file_name(output: &str) -> String {
    let mut s: String = output
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.starts_with('.') {
        s.insert(0, '_');
    }
    s.push_str(".npy");
    s
}

struct Target {
    path: PathBuf,
    dtype: DType,
    dims: Vec<u64>,
}

/// Where each output goes; made before the run so name clashes fail early.
pub struct Plan {
    dir: PathBuf,
    targets: Vec<Target>,
}

/// `--output-dir DIR` names something other than a directory (a usage error, exit 2); a
/// missing one is created only when the outputs are written.
pub fn check_dir(dir: &Path) -> CliResult<()> {
    if dir.exists() && !dir.is_dir() {
        return Err(CliError::CommandLine(format!(
            "--output-dir {}: not a directory",
            dir.display()
        )));
    }
    Ok(())
}

impl Plan {
    pub fn new(dir: &Path, outputs: &[TensorSpec]) -> CliResult<Plan> {
        check_dir(dir)?;
        let mut seen: BTreeMap<String, &str> = BTreeMap::new();
        let mut targets = vec![];
        for o in outputs {
            let name = file_name(&o.name);
            if let Some(other) = seen.insert(name.clone(), &o.name) {
                return Err(CliError::Usage(format!(
                    "outputs `{other}` and `{}` would both be written to {name}",
                    o.name
                )));
            }
            targets.push(Target {
                path: dir.join(name),
                dtype: o.dtype,
                dims: o.dims.clone(),
            });
        }
        Ok(Plan {
            dir: dir.to_path_buf(),
            targets,
        })
    }

    /// Writes every output (`results` in signature order); returns the paths written.
    pub fn write(self, results: &[Vec<u8>]) -> CliResult<Vec<PathBuf>> {
        fs::create_dir_all(&self.dir).map_err(|e| CliError::io(&self.dir, e))?;
        // Every file staged first (an error drops the staged ones, which removes them), then
        // all renamed into place.
        let mut staged = vec![];
        for (t, data) in self.targets.iter().zip(results) {
            let content =
                npy::encode(t.dtype, &t.dims, data).map_err(|e| CliError::io(&t.path, e))?;
            let mut f =
                StagedFile::create(&t.path, MODE_PUBLIC).map_err(|e| CliError::io(&t.path, e))?;
            f.write_all(&content)
                .and_then(|()| f.sync())
                .map_err(|e| CliError::io(&t.path, e))?;
            staged.push(f);
        }
        let mut written = vec![];
        for f in staged {
            let path = f.path().to_path_buf();
            f.commit().map_err(|e| CliError::io(&path, e))?;
            written.push(path);
        }
        Ok(written)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn names_are_safe() {
        assert_eq!(file_name("probs"), "probs.npy");
        assert_eq!(file_name("../etc/x"), "_.._etc_x.npy");
        assert_eq!(file_name(".hidden"), "_.hidden.npy");
        assert_eq!(file_name(""), "_.npy");
        assert_eq!(file_name("a b/c"), "a_b_c.npy");
    }

    #[test]
    fn clashing_names_fail_before_running() {
        let spec = |n: &str| TensorSpec {
            name: n.into(),
            dtype: DType::F32,
            dims: vec![1],
            allocation: 0,
        };
        let dir = std::env::temp_dir().join("xthunk-outfiles-unit-none");
        let e = Plan::new(&dir, &[spec("a/b"), spec("a_b")]).err().unwrap();
        assert!(e.to_string().contains("a_b.npy"), "{e}");
        assert!(!dir.exists());
    }
}
