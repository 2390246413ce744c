//! The reader's cursor over the text: position (line:column), whitespace and comments, the
//! lexical pieces of MLIR (identifiers, `%`/`@`/`^`/`#` names, strings, numbers), the nesting
//! limit, and errors that name the position and the operation being read.

use crate::ast::Pos;
use crate::error::{ParseError, one_line};

/// How deep regions, attributes, types and locations may nest (the reader runs on a stack
/// of its own, `stack::STACK`, which this depth fits many times over).
pub const MAX_DEPTH: usize = 1024;
/// The largest input read (bytes).
pub const MAX_INPUT: usize = 1 << 30;

/// A number as written.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Number {
    Int {
        negative: bool,
        magnitude: u128,
        hex: bool,
    },
    Float(f64),
}

#[derive(Clone)]
pub struct Cursor<'a> {
    src: &'a str,
    i: usize,
    line: u32,
    col: u32,
    depth: usize,
    /// The operation being read (for errors).
    pub op: String,
}

fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_'
}

pub fn is_ident_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c == b'.'
}

fn is_suffix_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'$' | b'.' | b'-')
}

impl<'a> Cursor<'a> {
    pub fn new(src: &'a str) -> Self {
        Cursor {
            src,
            i: 0,
            line: 1,
            col: 1,
            depth: 0,
            op: "module".into(),
        }
    }

    pub fn pos(&self) -> Pos {
        Pos {
            line: self.line,
            col: self.col,
        }
    }

    pub fn offset(&self) -> usize {
        self.i
    }

    pub fn slice(&self, from: usize, to: usize) -> &'a str {
        self.src.get(from..to).unwrap_or("")
    }

    pub fn err<T>(&self, message: impl Into<String>) -> Result<T, ParseError> {
        Err(self.error_at(self.pos(), message))
    }

    pub fn error_at(&self, pos: Pos, message: impl Into<String>) -> ParseError {
        ParseError::Syntax {
            pos,
            op: one_line(&self.op),
            message: one_line(&message.into()),
        }
    }

    /// What is next, for error messages: a short excerpt or "end of input".
    pub fn found(&self) -> String {
        let rest = self.src.get(self.i..).unwrap_or("");
        let word: String = rest
            .chars()
            .take_while(|c| !c.is_whitespace())
            .take(16)
            .collect();
        if rest.is_empty() {
            "end of input".into()
        } else if word.is_empty() {
            "a line break".into()
        } else {
            format!("`{word}`")
        }
    }

    pub fn expected<T>(&self, what: &str) -> Result<T, ParseError> {
        self.err(format!("expected {what}, found {}", self.found()))
    }

    /// One level deeper; `leave` when done.
    pub fn enter(&mut self) -> Result<(), ParseError> {
        if self.depth >= MAX_DEPTH {
            return Err(ParseError::TooDeep {
                pos: self.pos(),
                op: one_line(&self.op),
                limit: MAX_DEPTH,
            });
        }
        self.depth += 1;
        Ok(())
    }

    pub fn leave(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }

    fn raw(&self) -> Option<u8> {
        self.src.as_bytes().get(self.i).copied()
    }

    fn raw_at(&self, k: usize) -> Option<u8> {
        self.src.as_bytes().get(self.i + k).copied()
    }

    fn bump(&mut self) {
        if let Some(c) = self.raw() {
            self.i += 1;
            if c == b'\n' {
                self.line = self.line.saturating_add(1);
                self.col = 1;
            } else if c & 0xC0 != 0x80 {
                self.col = self.col.saturating_add(1);
            }
        }
    }

    /// Skips whitespace and `//` comments.
    pub fn ws(&mut self) {
        while let Some(c) = self.raw() {
            if c.is_ascii_whitespace() {
                self.bump();
            } else if c == b'/' && self.raw_at(1) == Some(b'/') {
                while self.raw().is_some_and(|c| c != b'\n') {
                    self.bump();
                }
            } else {
                break;
            }
        }
    }

    pub fn at_end(&mut self) -> bool {
        self.ws();
        self.raw().is_none()
    }

    /// The next byte after whitespace.
    pub fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.raw()
    }

    /// The byte `k` places after the next (after whitespace).
    pub fn peek_at(&mut self, k: usize) -> Option<u8> {
        self.ws();
        self.raw_at(k)
    }

    /// Whether the text continues with `s` (after whitespace).
    pub fn looking_at(&mut self, s: &str) -> bool {
        self.ws();
        self.src
            .get(self.i..)
            .is_some_and(|rest| rest.starts_with(s))
    }

    /// Whether the next word is `word` (not a prefix of a longer identifier).
    pub fn looking_at_word(&mut self, word: &str) -> bool {
        self.looking_at(word) && !self.raw_at(word.len()).is_some_and(is_ident_char)
    }

    pub fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.bump();
            true
        } else {
            false
        }
    }

    /// Consumes punctuation `s` if next.
    pub fn eat_str(&mut self, s: &str) -> bool {
        if self.looking_at(s) {
            for _ in 0..s.len() {
                self.bump();
            }
            true
        } else {
            false
        }
    }

    /// Consumes the keyword `word` if next.
    pub fn eat_word(&mut self, word: &str) -> bool {
        if self.looking_at_word(word) {
            self.eat_str(word)
        } else {
            false
        }
    }

    pub fn expect(&mut self, c: u8) -> Result<(), ParseError> {
        if self.eat(c) {
            Ok(())
        } else {
            self.expected(&format!("`{}`", c as char))
        }
    }

    pub fn expect_str(&mut self, s: &str) -> Result<(), ParseError> {
        if self.eat_str(s) {
            Ok(())
        } else {
            self.expected(&format!("`{s}`"))
        }
    }

    pub fn expect_word(&mut self, s: &str) -> Result<(), ParseError> {
        if self.eat_word(s) {
            Ok(())
        } else {
            self.expected(&format!("`{s}`"))
        }
    }

    /// A bare identifier (`[A-Za-z_][A-Za-z0-9_$.]*`), if next.
    pub fn ident(&mut self) -> Option<&'a str> {
        if !self.peek().is_some_and(is_ident_start) {
            return None;
        }
        let start = self.i;
        while self.raw().is_some_and(is_ident_char) {
            self.bump();
        }
        Some(self.slice(start, self.i))
    }

    pub fn expect_ident(&mut self, what: &str) -> Result<&'a str, ParseError> {
        match self.ident() {
            Some(s) => Ok(s),
            None => self.expected(what),
        }
    }

    /// Identifier characters right here (no whitespace skipped): used inside `4x3xf32`.
    pub fn ident_chars_here(&mut self) -> &'a str {
        let start = self.i;
        while self
            .raw()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_')
        {
            self.bump();
        }
        self.slice(start, self.i)
    }

    /// The name after a sigil (`%`, `^`, `#`, `@`, `!`): a suffix id or a quoted string.
    pub fn sigil_name(&mut self, sigil: u8) -> Result<Option<String>, ParseError> {
        if self.peek() != Some(sigil) {
            return Ok(None);
        }
        self.bump();
        if self.raw() == Some(b'"') {
            return self.string().map(Some);
        }
        let start = self.i;
        while self.raw().is_some_and(is_suffix_char) {
            self.bump();
        }
        if start == self.i {
            return self.expected(&format!("a name after `{}`", sigil as char));
        }
        Ok(Some(self.slice(start, self.i).to_string()))
    }

    /// A quoted string with MLIR's escapes (`\"`, `\\`, `\n`, `\t`, `\XX`); the result is
    /// the bytes read lossily as UTF-8.
    pub fn string(&mut self) -> Result<String, ParseError> {
        let pos = self.pos();
        if !self.eat(b'"') {
            return self.expected("a string");
        }
        let mut out = Vec::new();
        loop {
            match self.raw() {
                None | Some(b'\n') => return Err(self.error_at(pos, "unterminated string")),
                Some(b'"') => {
                    self.bump();
                    break;
                }
                Some(b'\\') => {
                    self.bump();
                    match self.raw() {
                        Some(b'"') => out.push(b'"'),
                        Some(b'\\') => out.push(b'\\'),
                        Some(b'n') => out.push(b'\n'),
                        Some(b't') => out.push(b'\t'),
                        Some(h) if h.is_ascii_hexdigit() => {
                            let l = self.raw_at(1).filter(u8::is_ascii_hexdigit);
                            let Some(l) = l else {
                                return self.err("bad escape in string");
                            };
                            out.push(hex_val(h) << 4 | hex_val(l));
                            self.bump();
                        }
                        _ => return self.err("bad escape in string"),
                    }
                    self.bump();
                }
                Some(_) => {
                    // A run of plain bytes at once (hex blobs are long).
                    let rest = self.src.as_bytes().get(self.i..).unwrap_or(&[]);
                    let n = rest
                        .iter()
                        .position(|b| matches!(b, b'"' | b'\\' | b'\n'))
                        .unwrap_or(rest.len());
                    let run = &rest[..n];
                    out.extend_from_slice(run);
                    let chars = run.iter().filter(|b| *b & 0xC0 != 0x80).count();
                    self.col = self
                        .col
                        .saturating_add(u32::try_from(chars).unwrap_or(u32::MAX));
                    self.i += n;
                }
            }
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// A number: `-`? digits, `0x` hex, or a float (`1.5`, `1e3`, `-2.5e-01`; `inf`, `nan`).
    pub fn number(&mut self) -> Result<Number, ParseError> {
        self.ws();
        let start = self.i;
        let negative = self.raw() == Some(b'-');
        if negative {
            self.bump();
        }
        if self.raw() == Some(b'0') && matches!(self.raw_at(1), Some(b'x') | Some(b'X')) {
            self.bump();
            self.bump();
            let hs = self.i;
            while self.raw().is_some_and(|c| c.is_ascii_hexdigit()) {
                self.bump();
            }
            let digits = self.slice(hs, self.i);
            if digits.is_empty() || digits.len() > 32 {
                return self.err("bad hexadecimal number");
            }
            let magnitude =
                u128::from_str_radix(digits, 16).or_else(|_| self.err("bad hexadecimal number"))?;
            return Ok(Number::Int {
                negative,
                magnitude,
                hex: true,
            });
        }
        if !self.raw().is_some_and(|c| c.is_ascii_digit()) {
            return self.expected("a number");
        }
        let mut float = false;
        while self.raw().is_some_and(|c| c.is_ascii_digit()) {
            self.bump();
        }
        if self.raw() == Some(b'.') {
            float = true;
            self.bump();
            while self.raw().is_some_and(|c| c.is_ascii_digit()) {
                self.bump();
            }
        }
        if matches!(self.raw(), Some(b'e') | Some(b'E'))
            && (self.raw_at(1).is_some_and(|c| c.is_ascii_digit())
                || (matches!(self.raw_at(1), Some(b'+') | Some(b'-'))
                    && self.raw_at(2).is_some_and(|c| c.is_ascii_digit())))
        {
            float = true;
            self.bump();
            self.bump();
            while self.raw().is_some_and(|c| c.is_ascii_digit()) {
                self.bump();
            }
        }
        let text = self.slice(start, self.i);
        if float {
            match text.parse::<f64>() {
                Ok(v) => Ok(Number::Float(v)),
                Err(_) => self.err(format!("bad number `{text}`")),
            }
        } else {
            let digits = text.trim_start_matches('-');
            match digits.parse::<u128>() {
                Ok(magnitude) => Ok(Number::Int {
                    negative,
                    magnitude,
                    hex: false,
                }),
                Err(_) => self.err(format!("integer `{text}` out of range")),
            }
        }
    }

    /// Whether a number starts here.
    pub fn at_number(&mut self) -> bool {
        match self.peek() {
            Some(c) if c.is_ascii_digit() => true,
            Some(b'-') => self.raw_at(1).is_some_and(|c| c.is_ascii_digit()),
            _ => false,
        }
    }

    /// A non-negative integer that fits `u64`.
    pub fn unsigned(&mut self) -> Result<u64, ParseError> {
        let pos = self.pos();
        match self.number()? {
            Number::Int {
                negative: false,
                magnitude,
                ..
            } => u64::try_from(magnitude).map_err(|_| self.error_at(pos, "integer out of range")),
            _ => Err(self.error_at(pos, "expected a non-negative integer")),
        }
    }

    /// A signed integer that fits `i64`.
    pub fn signed(&mut self) -> Result<i64, ParseError> {
        let pos = self.pos();
        match self.number()? {
            Number::Int {
                negative,
                magnitude,
                hex: false,
            } => {
                let v = i128::try_from(magnitude)
                    .map_err(|_| self.error_at(pos, "integer out of range"))?;
                let v = if negative { -v } else { v };
                i64::try_from(v).map_err(|_| self.error_at(pos, "integer out of range"))
            }
            _ => Err(self.error_at(pos, "expected an integer")),
        }
    }

    /// Skips a balanced `<...>`, `(...)`, `[...]` or `{...}` group (strings respected) and
    /// returns its text, brackets included. The cursor must be at the opening bracket.
    pub fn balanced(&mut self) -> Result<&'a str, ParseError> {
        self.ws();
        let start = self.i;
        let pos = self.pos();
        let mut stack: Vec<u8> = Vec::new();
        loop {
            let Some(c) = self.raw() else {
                return Err(self.error_at(pos, "unbalanced brackets: the group is not closed"));
            };
            match c {
                b'"' => {
                    self.string()?;
                    continue;
                }
                b'<' | b'(' | b'[' | b'{' => {
                    if stack.len() >= MAX_DEPTH {
                        return Err(ParseError::TooDeep {
                            pos: self.pos(),
                            op: one_line(&self.op),
                            limit: MAX_DEPTH,
                        });
                    }
                    stack.push(c);
                }
                b'>' if self.i > 0 && self.src.as_bytes().get(self.i - 1) == Some(&b'-') => {}
                b'>' | b')' | b']' | b'}' => {
                    let open = match c {
                        b'>' => b'<',
                        b')' => b'(',
                        b']' => b'[',
                        _ => b'{',
                    };
                    if stack.pop() != Some(open) {
                        return self
                            .err(format!("unbalanced brackets: unexpected `{}`", c as char));
                    }
                }
                _ => {}
            }
            self.bump();
            if stack.is_empty() {
                break;
            }
        }
        Ok(self.slice(start, self.i))
    }
}

pub fn hex_val(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        b'A'..=b'F' => c - b'A' + 10,
        _ => 0,
    }
}

/// Bytes of a hex string (`0x` already removed); `None` if odd or not hex.
pub fn hex_bytes(digits: &str) -> Option<Vec<u8>> {
    let b = digits.as_bytes();
    if !b.len().is_multiple_of(2) || !b.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    Some(
        b.chunks(2)
            .map(|p| hex_val(p[0]) << 4 | hex_val(p[1]))
            .collect(),
    )
}

impl<'a> Cursor<'a> {
    /// Decimal digits right here (no whitespace skipped).
    pub fn digits_here(&mut self) -> &'a str {
        let start = self.i;
        while self.raw().is_some_and(|c| c.is_ascii_digit()) {
            self.bump();
        }
        self.slice(start, self.i)
    }

    /// An `x` right here (the separator of `4x3xf32`).
    pub fn ident_x_here(&mut self) -> bool {
        if self.raw() == Some(b'x') {
            self.bump();
            true
        } else {
            false
        }
    }
}

impl<'a> Cursor<'a> {
    /// The byte right here (no whitespace skipped).
    pub fn here(&self) -> Option<u8> {
        self.raw()
    }

    /// Bytes right here while `pred` holds.
    pub fn take_while_here(&mut self, pred: impl Fn(u8) -> bool) -> &'a str {
        let start = self.i;
        while self.raw().is_some_and(&pred) {
            self.bump();
        }
        self.slice(start, self.i)
    }
}

impl Cursor<'_> {
    /// Items separated by commas up to `close` (consumed); the list may be empty.
    pub fn list_until<T>(
        &mut self,
        close: u8,
        mut item: impl FnMut(&mut Self) -> Result<T, ParseError>,
    ) -> Result<Vec<T>, ParseError> {
        let mut out = Vec::new();
        if self.eat(close) {
            return Ok(out);
        }
        loop {
            out.push(item(self)?);
            if !self.eat(b',') {
                break;
            }
        }
        self.expect(close)?;
        Ok(out)
    }

    /// `open` items separated by commas `close`; the list may be empty.
    pub fn bracketed<T>(
        &mut self,
        open: u8,
        close: u8,
        item: impl FnMut(&mut Self) -> Result<T, ParseError>,
    ) -> Result<Vec<T>, ParseError> {
        self.expect(open)?;
        self.list_until(close, item)
    }
}
