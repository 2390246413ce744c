//! The one atomic file writer: content goes to a temporary file in the destination's folder,
//! is flushed to disk, then renamed over the destination. On any error the destination is
//! left as it was (absent or with its old content) and the temporary file is removed. Used by
//! the program writer, the CLI's output files, benchmark reports and the kernel disk cache.

use std::fs::Permissions;
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Files readable by everyone the umask allows (as `File::create` makes them).
pub const MODE_PUBLIC: u32 = 0o666;
/// Files only their owner may read or write (caches).
pub const MODE_PRIVATE: u32 = 0o600;

/// A file being written: invisible under its final name until [`StagedFile::commit`]; dropped
/// uncommitted, it is removed.
pub struct StagedFile {
    tmp: tempfile::NamedTempFile,
    path: PathBuf,
}

impl StagedFile {
    /// Starts writing `path` with permission bits `mode` (before the umask).
    pub fn create(path: &Path, mode: u32) -> io::Result<Self> {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "file".into());
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".tmp")
            .permissions(Permissions::from_mode(mode))
            .tempfile_in(dir)?;
        Ok(StagedFile {
            tmp,
            path: path.to_path_buf(),
        })
    }

    /// The final path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.tmp.as_file_mut().write_all(bytes)
    }

    /// Flushes the content written so far to disk (so that several files can all be made
    /// durable before any of them is renamed into place).
    pub fn sync(&self) -> io::Result<()> {
        self.tmp.as_file().sync_all()
    }

    /// Flushes the content to disk and renames it over the final path.
    pub fn commit(self) -> io::Result<()> {
        self.tmp.as_file().sync_all()?;
        self.tmp.persist(&self.path).map_err(|e| e.error)?;
        // The rename itself is durable only once the folder is synced (best effort: some
        // file systems refuse to sync a directory).
        let dir = match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

/// Writes `content` to `path` atomically with permission bits `mode` (before the umask).
pub fn write_atomic(path: &Path, content: &[u8], mode: u32) -> io::Result<()> {
    let mut f = StagedFile::create(path, mode)?;
    f.write_all(content)?;
    f.commit()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn leftovers(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect()
    }

    #[test]
    fn replaces_content_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.bin");
        write_atomic(&p, b"first", MODE_PUBLIC).unwrap();
        write_atomic(&p, b"second", MODE_PUBLIC).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"second");
        assert!(leftovers(dir.path()).is_empty());
    }

    #[test]
    fn uncommitted_file_is_removed_and_the_old_content_stays() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("keep.txt");
        write_atomic(&p, b"old", MODE_PUBLIC).unwrap();
        {
            let mut f = StagedFile::create(&p, MODE_PUBLIC).unwrap();
            f.write_all(b"new but abandoned").unwrap();
            assert_eq!(leftovers(dir.path()).len(), 1);
        }
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        assert!(leftovers(dir.path()).is_empty());
    }

    #[test]
    fn private_mode_is_owner_only() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("secret");
        write_atomic(&p, b"x", MODE_PRIVATE).unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn missing_folder_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("no/such/dir/f");
        assert!(write_atomic(&p, b"x", MODE_PUBLIC).is_err());
    }
}
