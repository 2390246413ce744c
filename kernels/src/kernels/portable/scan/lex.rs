//! The lexer of the portable-source scan: comments, string and character literals,
//! preprocessor lines (with `\` continuations), identifiers, numbers and punctuation; it never
//! fails (unknown bytes are punctuation), is linear in the source and allocates one token per
//! lexeme.

/// One lexeme of the source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Token<'a> {
    pub(super) kind: Kind,
    pub(super) text: &'a str,
    /// Byte offset in the source.
    pub(super) at: usize,
    /// 1-based line.
    pub(super) line: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Ident,
    Number,
    Str,
    Punct,
    /// A whole preprocessor directive (continuations included).
    Directive,
}

pub(super) fn lex(src: &str) -> Vec<Token<'_>> {
    let b = src.as_bytes();
    let mut out = vec![];
    let (mut i, mut line) = (0usize, 1usize);
    // Only whitespace since the start of the line: a `#` here starts a directive.
    let mut line_start = true;
    while i < b.len() {
        let c = b[i];
        if c == b'\n' {
            line += 1;
            i += 1;
            line_start = true;
            continue;
        }
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        let start_line = line;
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if c == b'/' && b.get(i + 1) == Some(&b'*') {
            i += 2;
            while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                if b[i] == b'\n' {
                    line += 1;
                }
                i += 1;
            }
            if i >= b.len() {
                // Unterminated: a `/*` token marks it (no other token is `/*`).
                out.push(Token {
                    kind: Kind::Punct,
                    text: src.get(start..(start + 2).min(b.len())).unwrap_or(""),
                    at: start,
                    line: start_line,
                });
            }
            i = (i + 2).min(b.len());
            continue;
        }
        let was_line_start = line_start;
        line_start = false;
        let kind = if c == b'#' && was_line_start {
            while i < b.len() && b[i] != b'\n' {
                if b[i] == b'\\' && b.get(i + 1) == Some(&b'\n') {
                    line += 1;
                    i += 1;
                }
                i += 1;
            }
            Kind::Directive
        } else if c == b'"' || c == b'\'' {
            i += 1;
            while i < b.len() && b[i] != c && b[i] != b'\n' {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i = (i + 1).min(b.len());
            Kind::Str
        } else if c == b'_' || c.is_ascii_alphabetic() {
            while i < b.len() && (b[i] == b'_' || b[i].is_ascii_alphanumeric()) {
                i += 1;
            }
            Kind::Ident
        } else if c.is_ascii_digit() {
            while i < b.len() && (b[i] == b'_' || b[i] == b'.' || b[i].is_ascii_alphanumeric()) {
                i += 1;
            }
            Kind::Number
        } else {
            // One character (a multi-byte UTF-8 character as a whole).
            i += src[i..].chars().next().map_or(1, char::len_utf8);
            Kind::Punct
        };
        let end = i.min(b.len());
        out.push(Token {
            kind,
            text: src.get(start..end).unwrap_or(""),
            at: start,
            line: start_line,
        });
    }
    out
}
