//! The text format (`.txtpb`), through prost-reflect.

use crate::{EXECUTABLE_MESSAGE, ProtoError, executable_descriptor, from_proto, pb, to_proto};
use miette::Diagnostic;
use prost_reflect::DynamicMessage;
use prost_reflect::text_format::FormatOptions;
use xthunk_core::ir::{Executable, Thunk, ThunkPath};

/// Deepest message nesting accepted in a text program. The text parser is recursive, so this
/// bounds its stack use; the binary decoder has the same limit (100 nested messages).
const MAX_TEXT_DEPTH: usize = 100;

/// prost-reflect's text parser and formatter use a lot of stack per nesting level (about
/// 20 KiB in debug builds). Programs nested more deeply than this are parsed and formatted on
/// a helper thread with [`BIG_STACK`] bytes of stack, so that any caller thread (2 MiB for
/// spawned threads by default) is safe.
const INLINE_DEPTH: usize = 16;
const BIG_STACK: usize = 64 << 20;

/// Header written at the top of every text program: tools use it to find the schema.
fn header() -> String {
    format!("# proto-file: xthunk.proto\n# proto-message: {EXECUTABLE_MESSAGE}\n\n")
}

/// Parses a text (`.txtpb`) program, converts and validates it.
pub fn parse_text(input: &str) -> Result<Executable, ProtoError> {
    from_proto(&parse_text_message(input)?)
}

/// [`parse_text`] as a [`Program`](xthunk_core::Program), what the executor loads
/// (verified once, here).
pub fn parse_program(input: &str) -> Result<xthunk_core::Program, ProtoError> {
    crate::program_from_proto(&parse_text_message(input)?)
}

/// The message of a text (`.txtpb`) program.
pub(crate) fn parse_text_message(input: &str) -> Result<pb::Executable, ProtoError> {
    if input
        .lines()
        .map(str::trim)
        .all(|l| l.is_empty() || l.starts_with('#'))
    {
        return Err(ProtoError::Empty {
            what: "text with no fields",
        });
    }
    let depth = check_depth(input)?;
    let msg = if depth <= INLINE_DEPTH {
        parse_message(input)?
    } else {
        on_big_stack(|| parse_message(input)).map_err(|e| ProtoError::TextParse {
            line: 1,
            col: 1,
            message: format!("cannot start a parser thread for this deeply nested program: {e}"),
        })??
    };
    Ok(msg)
}

fn parse_message(input: &str) -> Result<pb::Executable, ProtoError> {
    let msg = DynamicMessage::parse_text_format(executable_descriptor(), input).map_err(|e| {
        let offset = e
            .labels()
            .and_then(|mut labels| labels.next())
            .map_or(input.len(), |l| l.offset());
        let (line, col) = line_col(input.as_bytes(), offset);
        ProtoError::TextParse {
            line,
            col,
            message: e.to_string(),
        }
    })?;
    msg.transcode_to()
        .map_err(|source| ProtoError::Decode { source })
}

/// Runs `f` on a helper thread with a [`BIG_STACK`] stack; a panic in `f` is resumed here.
fn on_big_stack<T: Send>(f: impl FnOnce() -> T + Send) -> std::io::Result<T> {
    std::thread::scope(|scope| {
        let handle = std::thread::Builder::new()
            .name("xthunk-proto-text".into())
            .stack_size(BIG_STACK)
            .spawn_scoped(scope, f)?;
        match handle.join() {
            Ok(v) => Ok(v),
            Err(payload) => std::panic::resume_unwind(payload),
        }
    })
}

/// Formats a program in the text format: a `# proto-message: xthunk.v1.Executable` header,
/// then one field per line. Does not validate.
///
/// A program nested more deeply than the decoders accept (about 50 levels of sequences) cannot
/// be formatted; the result is then only the header and a comment saying so (and
/// [`crate::save_file`] reports the error).
pub fn to_text(exe: &Executable) -> String {
    match try_to_text(exe) {
        Ok(text) => text,
        Err(e) => format!("{}# cannot format this program: {e}\n", header()),
    }
}

pub(crate) fn try_to_text(exe: &Executable) -> Result<String, ProtoError> {
    if message_depth(exe) <= INLINE_DEPTH {
        format_text(exe)
    } else {
        on_big_stack(|| format_text(exe)).map_err(|e| ProtoError::Invalid {
            path: ThunkPath::default(),
            field: "entry".into(),
            message: format!("cannot start a formatter thread for this deeply nested program: {e}"),
        })?
    }
}

/// Message nesting depth of the program's thunks (an entry thunk is at depth 1; each sequence
/// adds two levels: the sequence message and its thunks). Iterative, so any depth is safe.
fn message_depth(exe: &Executable) -> usize {
    let mut max = 0;
    let mut stack: Vec<(&Thunk, usize)> = exe.entry.iter().map(|t| (t, 1)).collect();
    while let Some((t, depth)) = stack.pop() {
        max = max.max(depth);
        for (_, list) in t.nested() {
            stack.extend(list.iter().map(|c| (c, depth + 2)));
        }
    }
    max
}

fn format_text(exe: &Executable) -> Result<String, ProtoError> {
    let mut msg = DynamicMessage::new(executable_descriptor());
    msg.transcode_from(&to_proto(exe))
        .map_err(|source| ProtoError::Decode { source })?;
    let body = msg.to_text_format_with_options(&FormatOptions::new().pretty(true));
    let mut text = header();
    text.push_str(&body);
    if !body.is_empty() {
        text.push('\n');
    }
    Ok(text)
}

/// 1-based line and column (in characters) of a byte offset.
pub(crate) fn line_col(input: &[u8], offset: usize) -> (usize, usize) {
    let prefix = input.get(..offset).unwrap_or(input);
    let line_start = prefix
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |p| p + 1);
    let line = 1 + prefix.iter().filter(|&&b| b == b'\n').count();
    let col = 1 + String::from_utf8_lossy(prefix.get(line_start..).unwrap_or_default())
        .chars()
        .count();
    (line, col)
}

/// Rejects text whose message nesting exceeds [`MAX_TEXT_DEPTH`] before the recursive parser
/// sees it. Understands strings (with escapes) and `#` comments; anything else that is
/// malformed is left to the parser.
/// Returns the deepest nesting seen.
fn check_depth(input: &str) -> Result<usize, ProtoError> {
    let bytes = input.as_bytes();
    let mut depth = 0usize;
    let mut max = 0usize;
    let mut it = bytes.iter().enumerate();
    while let Some((i, &b)) = it.next() {
        match b {
            b'#' => {
                for (_, &c) in it.by_ref() {
                    if c == b'\n' {
                        break;
                    }
                }
            }
            b'"' | b'\'' => {
                while let Some((_, &c)) = it.next() {
                    if c == b || c == b'\n' {
                        break;
                    }
                    if c == b'\\' {
                        it.next();
                    }
                }
            }
            b'{' | b'<' => {
                depth += 1;
                max = max.max(depth);
                if depth > MAX_TEXT_DEPTH {
                    let (line, col) = line_col(bytes, i);
                    return Err(ProtoError::TextParse {
                        line,
                        col,
                        message: format!("messages are nested more than {MAX_TEXT_DEPTH} deep"),
                    });
                }
            }
            b'}' | b'>' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_characters() {
        let s = "ab\ncdé f";
        assert_eq!(line_col(s.as_bytes(), 0), (1, 1));
        assert_eq!(line_col(s.as_bytes(), 3), (2, 1));
        assert_eq!(line_col(s.as_bytes(), s.find('f').unwrap_or(0)), (2, 5));
        assert_eq!(line_col(s.as_bytes(), 1000), (2, 6));
    }

    #[test]
    fn depth_ignores_strings_and_comments() {
        let s = format!("name: \"{}\" # {}\n", "{".repeat(500), "<".repeat(500));
        assert!(check_depth(&s).is_ok());
        let deep = "a {".repeat(MAX_TEXT_DEPTH + 1);
        assert!(matches!(
            check_depth(&deep),
            Err(ProtoError::TextParse { line: 1, .. })
        ));
    }
}
