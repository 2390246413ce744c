//! Program files: the format follows the extension.

use crate::text::{line_col, try_to_text};
use crate::{ProtoError, decode, encode, parse_text};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use xthunk_core::ir::Executable;

/// The encoding of a program file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// Protobuf text format: `.txtpb`, `.textproto`, `.pbtxt`.
    Text,
    /// Protobuf binary wire format: `.pb`, `.binpb`.
    Binary,
}

impl Format {
    /// The format for a file name, by its extension (case-insensitive).
    pub fn from_path(path: &Path) -> Result<Format, ProtoError> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("txtpb" | "textproto" | "pbtxt") => Ok(Format::Text),
            Some("pb" | "binpb") => Ok(Format::Binary),
            _ => Err(ProtoError::UnknownFormat {
                path: path.to_path_buf(),
            }),
        }
    }
}

/// Reads, converts and validates a program file; the format follows the extension (see
/// [`Format::from_path`]).
pub fn load_file(path: impl AsRef<Path>) -> Result<Executable, ProtoError> {
    let path = path.as_ref();
    let format = Format::from_path(path)?;
    let bytes = fs::read(path).map_err(|source| ProtoError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    match format {
        Format::Binary => decode(&bytes),
        Format::Text => {
            let text = std::str::from_utf8(&bytes).map_err(|e| {
                let (line, col) = line_col(&bytes, e.valid_up_to());
                ProtoError::TextParse {
                    line,
                    col,
                    message: "the file is not valid UTF-8".into(),
                }
            })?;
            parse_text(text)
        }
    }
}

/// Writes a program file; the format follows the extension (see [`Format::from_path`]). Does
/// not validate the program.
///
/// The content is written to a temporary file in the same directory, flushed, then renamed
/// over `path`: on any error `path` is left as it was (absent or with its old content) and the
/// temporary file is removed.
pub fn save_file(path: impl AsRef<Path>, exe: &Executable) -> Result<(), ProtoError> {
    let path = path.as_ref();
    let content = match Format::from_path(path)? {
        Format::Binary => encode(exe),
        Format::Text => try_to_text(exe)?.into_bytes(),
    };
    let tmp = temp_path(path);
    let io = |source| ProtoError::Io {
        path: path.to_path_buf(),
        source,
    };
    let result = write_new(&tmp, &content).and_then(|()| fs::rename(&tmp, path));
    if let Err(e) = result {
        // Best effort: the temporary file may not exist (e.g. the directory is missing).
        let _ = fs::remove_file(&tmp);
        return Err(io(e));
    }
    Ok(())
}

fn write_new(tmp: &Path, content: &[u8]) -> std::io::Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(tmp)?;
    f.write_all(content)?;
    f.sync_all()
}

/// `.<name>.<pid>.<n>.tmp` next to `path`, unique within this process.
fn temp_path(path: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "program".into());
    let tmp_name = format!(".{name}.{}.{n}.tmp", std::process::id());
    match path.parent() {
        Some(dir) => dir.join(tmp_name),
        None => PathBuf::from(tmp_name),
    }
}
