//! Program files: the format follows the extension.

use crate::text::{line_col, parse_text_message, try_to_text};
use crate::{ProtoError, decode_message, encode, from_proto, pb, program_from_proto};
use std::fs;
use std::path::Path;
use xthunk_core::Program;
use xthunk_core::files::{MODE_PUBLIC, write_atomic};
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
    from_proto(&read_message(path.as_ref())?)
}

/// [`load_file`] as a [`Program`], what the executor loads (verified once, here).
pub fn load_program(path: impl AsRef<Path>) -> Result<Program, ProtoError> {
    program_from_proto(&read_message(path.as_ref())?)
}

/// The message of a program file.
fn read_message(path: &Path) -> Result<pb::Executable, ProtoError> {
    let format = Format::from_path(path)?;
    let bytes = fs::read(path).map_err(|source| ProtoError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    match format {
        Format::Binary => decode_message(&bytes),
        Format::Text => {
            let text = std::str::from_utf8(&bytes).map_err(|e| {
                let (line, col) = line_col(&bytes, e.valid_up_to());
                ProtoError::TextParse {
                    line,
                    col,
                    message: "the file is not valid UTF-8".into(),
                }
            })?;
            parse_text_message(text)
        }
    }
}

/// Writes a program file; the format follows the extension (see [`Format::from_path`]). Does
/// not validate the program.
///
/// Written atomically ([`xthunk_core::files::write_atomic`]): on any error `path` is left as it
/// was (absent or with its old content) and no temporary file remains.
pub fn save_file(path: impl AsRef<Path>, exe: &Executable) -> Result<(), ProtoError> {
    let path = path.as_ref();
    let content = match Format::from_path(path)? {
        Format::Binary => encode(exe),
        Format::Text => try_to_text(exe)?.into_bytes(),
    };
    write_atomic(path, &content, MODE_PUBLIC).map_err(|source| ProtoError::Io {
        path: path.to_path_buf(),
        source,
    })
}
