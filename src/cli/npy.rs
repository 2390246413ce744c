//! `.npy` files for `xthunk run`: reading parameters (checked against the signature) and
//! writing outputs (headers through `npyz`). The data is raw little-endian bytes, as the
//! runtime stores tensors.
//!
//! Reading is bounded and linear: the header is at most [`MAX_HEADER_LEN`] bytes and is
//! parsed here, strictly and in one pass ([`parse_header`]), as the dictionary numpy writes
//! (`{'descr': '<f4', 'fortran_order': False, 'shape': (64, 512), }`: those three keys, each
//! once, string, boolean and tuple of integers) — never by a general Python-literal parser,
//! whose time grows exponentially with nested brackets. The data's length is checked against
//! the file's before its buffer is taken, through the bounded host buffers of `tensor`.
//!
//! | xthunk | numpy dtype |
//! |---|---|
//! | pred | `\|b1` |
//! | i8, u8 | `\|i1`, `\|u1` |
//! | i16, u16 | `<i2`, `<u2` |
//! | i32, u32 | `<i4`, `<u4` |
//! | i64, u64 | `<i8`, `<u8` |
//! | f16, f32, f64 | `<f2`, `<f4`, `<f8` |
//! | bf16 | no numpy dtype: the raw bits, `<u2` (or a 2-byte void `V2`) on input, `<u2` on output |
//!
//! bf16 and u16 share `<u2`: a file never says which it is. Input is read for a parameter whose
//! element type the program's signature declares, so the signature tells them apart (a `<u2`
//! file is accepted for either); an output's element type is the program's, listed by
//! `xthunk inspect`.
//!
//! Big-endian arrays (`>f4`, ...) are accepted and byte-swapped. Fortran-order arrays are
//! accepted only when their memory layout equals C order (at most one dimension above 1).

use super::error::{CliError, CliResult};
use super::tensor;
use npyz::{Endianness, TypeChar, TypeStr, WriteOptions, WriterBuilder};
use std::io::Read;
use std::path::{Path, PathBuf};
use xthunk::ir::{DType, TensorSpec};

/// The numpy type string written for an xthunk element type.
pub fn type_str(dtype: DType) -> &'static str {
    match dtype {
        DType::Pred => "|b1",
        DType::I8 => "|i1",
        DType::U8 => "|u1",
        DType::I32 => "<i4",
        DType::I64 => "<i8",
        DType::F16 => "<f2",
        DType::BF16 => "<u2",
        DType::F32 => "<f4",
        DType::F64 => "<f8",
        DType::I16 => "<i2",
        DType::U16 => "<u2",
        DType::U32 => "<u4",
        DType::U64 => "<u8",
        DType::C64 => "<c8",
        DType::C128 => "<c16",
        // Raw bits as uint8, which numpy itself loads (`.view(ml_dtypes.float8_e4m3fn)`).
        DType::F8E4M3FN | DType::F8E5M2 => "|u1",
    }
}

/// True when a numpy element type (type character and size) holds `dtype`.
fn accepts(dtype: DType, ty: &TypeStr) -> bool {
    let size = ty.size_field();
    match (dtype, ty.type_char()) {
        (DType::Pred, TypeChar::Bool) => size == 1,
        (DType::I8, TypeChar::Int) => size == 1,
        (DType::U8, TypeChar::Uint) => size == 1,
        (DType::I16, TypeChar::Int) => size == 2,
        (DType::U16, TypeChar::Uint) => size == 2,
        (DType::I32, TypeChar::Int) => size == 4,
        (DType::U32, TypeChar::Uint) => size == 4,
        (DType::I64, TypeChar::Int) => size == 8,
        (DType::U64, TypeChar::Uint) => size == 8,
        (DType::F16, TypeChar::Float) => size == 2,
        (DType::F32, TypeChar::Float) => size == 4,
        (DType::F64, TypeChar::Float) => size == 8,
        // bfloat16 has no numpy dtype: raw bits as uint16 or a 2-byte void.
        (DType::BF16, TypeChar::Uint | TypeChar::RawData) => size == 2,
        (DType::C64, TypeChar::Complex) => size == 8,
        (DType::C128, TypeChar::Complex) => size == 16,
        // The 8-bit floats: raw bits as uint8, or a 1-byte void (what ml_dtypes' np.save
        // writes for float8_e4m3fn; its '<f1' for float8_e5m2 is mapped to this in
        // `read_input`, since no numpy reader parses it).
        (DType::F8E4M3FN | DType::F8E5M2, TypeChar::Uint | TypeChar::RawData) => size == 1,
        _ => false,
    }
}

fn shape_str(dims: &[u64]) -> String {
    let d: Vec<String> = dims.iter().map(u64::to_string).collect();
    format!("[{}]", d.join(","))
}

/// What a parameter needs, e.g. `f32[64,512] (numpy '<f4')`.
fn wanted(spec: &TensorSpec) -> String {
    let extra = match spec.dtype {
        DType::BF16 => ", raw bfloat16 bits",
        DType::F8E4M3FN => ", raw float8_e4m3fn bits",
        DType::F8E5M2 => ", raw float8_e5m2 bits",
        _ => "",
    };
    format!(
        "{}{} (numpy '{}'{extra})",
        spec.dtype,
        shape_str(&spec.dims),
        type_str(spec.dtype)
    )
}

/// The placeholder of a per-rank `--input` pattern (`x=shard{rank}.npy`).
pub const RANK_PLACEHOLDER: &str = "{rank}";

/// Reads the input of `rank` from `pattern`: the file itself, or, when the pattern holds
/// `{rank}`, the file it names for that rank (checked like any input; an error names the
/// rank and the pattern).
pub fn read_rank_input(spec: &TensorSpec, pattern: &Path, rank: usize) -> CliResult<Vec<u8>> {
    let text = pattern.to_string_lossy();
    if !text.contains(RANK_PLACEHOLDER) {
        return read_input(spec, pattern);
    }
    let path = PathBuf::from(text.replace(RANK_PLACEHOLDER, &rank.to_string()));
    read_input(spec, &path).map_err(|e| match e {
        CliError::Npy {
            name,
            path,
            message,
        } => CliError::Npy {
            message: format!(
                "{message} (the file of rank {rank}, from --input {name}={})",
                pattern.display()
            ),
            name,
            path,
        },
        other => other,
    })
}

/// The longest `.npy` header read, in bytes: numpy's own default (`max_header_size`).
pub const MAX_HEADER_LEN: usize = 10_000;

/// The magic string that starts every `.npy` file.
const MAGIC: &[u8] = b"\x93NUMPY";

/// What a `.npy` header says: the element type string, the order and the shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub descr: String,
    pub fortran_order: bool,
    pub shape: Vec<u64>,
}

/// Reads the preamble and the header of a `.npy` file: its header and the number of bytes
/// before the data. Reads at most `10 + MAX_HEADER_LEN` bytes.
fn read_header(file: &mut impl Read) -> Result<(Header, u64), String> {
    let mut preamble = [0u8; 8];
    file.read_exact(&mut preamble)
        .map_err(|e| format!("cannot read the preamble: {e}"))?;
    if &preamble[..6] != MAGIC {
        return Err("it does not start with the .npy magic string".into());
    }
    let len_bytes = match preamble[6] {
        1 => 2,
        2 | 3 => 4,
        v => {
            return Err(format!(
                "format version {v}.{} is not supported",
                preamble[7]
            ));
        }
    };
    let mut len = [0u8; 4];
    file.read_exact(&mut len[..len_bytes])
        .map_err(|e| format!("cannot read the header length: {e}"))?;
    let header_len = u32::from_le_bytes(len);
    let n = usize::try_from(header_len)
        .ok()
        .filter(|n| *n <= MAX_HEADER_LEN)
        .ok_or_else(|| {
            format!("the header is {header_len} bytes, more than the {MAX_HEADER_LEN} accepted")
        })?;
    let mut text = vec![0u8; n];
    file.read_exact(&mut text)
        .map_err(|e| format!("cannot read the {n}-byte header: {e}"))?;
    let header = parse_header(&text)?;
    let before_data = 8 + len_bytes as u64 + u64::from(header_len);
    Ok((header, before_data))
}

/// A cursor over header text, for [`parse_header`].
struct Cursor<'a> {
    text: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn skip_space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    /// Consumes `c` (after any space) if it is next.
    fn eat(&mut self, c: u8) -> bool {
        self.skip_space();
        if self.peek() == Some(c) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn fail(&self, what: &str) -> String {
        match self.peek() {
            Some(c) if c.is_ascii_graphic() => {
                format!("header: {what} at byte {}, found `{}`", self.at, c as char)
            }
            Some(c) => format!("header: {what} at byte {}, found byte {c:#04x}", self.at),
            None => format!("header: {what}, found the end of the header"),
        }
    }

    fn expect(&mut self, c: u8) -> Result<(), String> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(self.fail(&format!("expected `{}`", c as char)))
        }
    }

    /// A quoted string without escapes (`'<f4'` or `"shape"`).
    fn string(&mut self, what: &str) -> Result<&'a str, String> {
        let text: &'a [u8] = self.text;
        self.skip_space();
        let Some(quote @ (b'\'' | b'"')) = self.peek() else {
            return Err(self.fail(&format!("expected {what} in quotes")));
        };
        let start = self.at + 1;
        let len = self.text[start..]
            .iter()
            .position(|&c| c == quote || c == b'\\' || c == b'\n')
            .filter(|&i| self.text[start + i] == quote)
            .ok_or_else(|| self.fail(&format!("{what}: unterminated or escaped string")))?;
        self.at = start + len + 1;
        std::str::from_utf8(&text[start..start + len])
            .map_err(|_| format!("header: {what} is not text"))
    }

    /// `True` or `False`.
    fn boolean(&mut self) -> Result<bool, String> {
        self.skip_space();
        for (word, value) in [(&b"True"[..], true), (&b"False"[..], false)] {
            if self.text[self.at..].starts_with(word) {
                self.at += word.len();
                return Ok(value);
            }
        }
        Err(self.fail("expected True or False for 'fortran_order'"))
    }

    /// A tuple of non-negative integers: `()`, `(5,)`, `(64, 512)` (a Python 2 `L` suffix is
    /// allowed).
    fn shape(&mut self) -> Result<Vec<u64>, String> {
        self.expect(b'(')?;
        let mut dims = vec![];
        let mut comma = true;
        loop {
            if self.eat(b')') {
                break;
            }
            if !comma {
                return Err(self.fail("expected `,` or `)` in 'shape'"));
            }
            let start = self.at;
            while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                self.at += 1;
            }
            let digits = std::str::from_utf8(&self.text[start..self.at]).unwrap_or_default();
            if digits.is_empty() {
                return Err(self.fail("expected a dimension in 'shape'"));
            }
            let d = digits
                .parse::<u64>()
                .map_err(|_| format!("header: dimension {digits} of 'shape' is too large"))?;
            if matches!(self.peek(), Some(b'L' | b'l')) {
                self.at += 1;
            }
            dims.push(d);
            comma = self.eat(b',');
        }
        if dims.len() == 1 && !comma {
            return Err(
                "header: 'shape' is not a tuple (a single dimension is written (n,))".into(),
            );
        }
        Ok(dims)
    }
}

/// Parses a `.npy` header in one pass: the dictionary literal numpy writes, with the keys
/// `descr` (a type string: structured dtypes are refused), `fortran_order` and `shape`, each
/// exactly once, then only space. Anything else is an error; no input takes more than time
/// linear in its length.
pub fn parse_header(text: &[u8]) -> Result<Header, String> {
    let mut c = Cursor { text, at: 0 };
    let (mut descr, mut fortran_order, mut shape) = (None, None, None);
    c.expect(b'{')?;
    loop {
        if c.eat(b'}') {
            break;
        }
        let key = c.string("a key")?;
        c.expect(b':')?;
        match key {
            "descr" if descr.is_none() => {
                c.skip_space();
                if c.peek() == Some(b'[') {
                    return Err("structured dtypes (a list of fields) are not supported".into());
                }
                let d = c.string("'descr'")?;
                if d.len() > 32 || !d.is_ascii() {
                    return Err(format!("header: 'descr' {d:?} is not a numpy type string"));
                }
                descr = Some(d.to_string());
            }
            "fortran_order" if fortran_order.is_none() => fortran_order = Some(c.boolean()?),
            "shape" if shape.is_none() => shape = Some(c.shape()?),
            "descr" | "fortran_order" | "shape" => {
                return Err(format!("header: key '{key}' is given twice"));
            }
            other => {
                return Err(format!(
                    "header: unexpected key {other:?} (a .npy header has 'descr', \
                     'fortran_order' and 'shape')"
                ));
            }
        }
        if !c.eat(b',') {
            c.expect(b'}')?;
            break;
        }
    }
    c.skip_space();
    if c.at != text.len() {
        return Err(c.fail("expected the end of the header after the dictionary"));
    }
    let missing = |k: &str| format!("header: the dictionary has no '{k}'");
    Ok(Header {
        descr: descr.ok_or_else(|| missing("descr"))?,
        fortran_order: fortran_order.ok_or_else(|| missing("fortran_order"))?,
        shape: shape.ok_or_else(|| missing("shape"))?,
    })
}

/// Reads `path` as the value of parameter `spec`: checks dtype and shape and returns the
/// little-endian bytes.
pub fn read_input(spec: &TensorSpec, path: &Path) -> CliResult<Vec<u8>> {
    let fail = |message: String| CliError::Npy {
        name: spec.name.clone(),
        path: path.to_path_buf(),
        message,
    };
    let mut file =
        std::fs::File::open(path).map_err(|e| fail(format!("cannot read the file: {e}")))?;
    let file_len = file
        .metadata()
        .map_err(|e| fail(format!("cannot read the file: {e}")))?
        .len();
    let (header, before_data) = read_header(&mut std::io::BufReader::new(&mut file).take(
        // The preamble, the longest length field and the longest header.
        12 + MAX_HEADER_LEN as u64,
    ))
    .map_err(|e| fail(format!("not a valid .npy file: {e}")))?;
    // ml_dtypes writes float8_e5m2 as '<f1', a float size that numpy's own readers refuse:
    // for an 8-bit float parameter it means the same as a 1-byte void.
    let descr = match header.descr.as_str() {
        "<f1" | "|f1" | "=f1" | ">f1" if spec.dtype.is_f8() => "|V1",
        d => d,
    };
    let ty: TypeStr = descr.parse().map_err(|e| {
        fail(format!(
            "not a valid .npy file: 'descr' {:?}: {e}",
            header.descr
        ))
    })?;
    if !accepts(spec.dtype, &ty) {
        return Err(fail(format!(
            "dtype '{ty}' does not match the parameter, which is {}",
            wanted(spec)
        )));
    }
    if header.shape != spec.dims {
        return Err(fail(format!(
            "shape {} does not match the parameter, which is {}",
            shape_str(&header.shape),
            wanted(spec)
        )));
    }
    if header.fortran_order && header.shape.iter().filter(|d| **d > 1).count() > 1 {
        return Err(fail(
            "Fortran-order arrays are not supported; save np.ascontiguousarray(a)".into(),
        ));
    }
    let expected = spec
        .byte_size()
        .ok_or_else(|| fail("the parameter's byte size overflows".into()))?;
    let data_len = file_len.saturating_sub(before_data);
    if data_len != expected {
        let what = if data_len < expected {
            "truncated"
        } else {
            "has trailing bytes"
        };
        return Err(fail(format!(
            "the file is {what}: the data holds {data_len} bytes, {expected} are needed"
        )));
    }
    // The data, into a bounded buffer: exactly `expected` bytes from where the header ends.
    let mut out = tensor::reserve(expected).map_err(|source| CliError::HostMemory {
        what: format!(
            "input `{}` from {} ({expected} bytes)",
            spec.name,
            path.display()
        ),
        source,
    })?;
    use std::io::{Seek, SeekFrom};
    file.seek(SeekFrom::Start(before_data))
        .and_then(|_| file.take(expected).read_to_end(&mut out))
        .map_err(|e| fail(format!("cannot read the data: {e}")))?;
    if out.len() as u64 != expected {
        return Err(fail(format!(
            "the file is truncated: the data holds {} bytes, {expected} are needed (it \
             changed while being read)",
            out.len()
        )));
    }
    // A big-endian complex swaps each part, not the pair.
    let width = spec.dtype.complex_part().unwrap_or(spec.dtype).size();
    if ty.endianness() == Endianness::Big && width > 1 {
        for chunk in out.chunks_exact_mut(width) {
            chunk.reverse();
        }
    }
    if spec.dtype == DType::Pred
        && let Some(i) = out.iter().position(|b| *b > 1)
    {
        return Err(fail(format!(
            "element {i} of the bool array is {} (must be 0 or 1)",
            out[i]
        )));
    }
    Ok(out)
}

/// The complete `.npy` file of a tensor: an `npyz` header, then `data` (little-endian).
pub fn encode(dtype: DType, dims: &[u64], data: &[u8]) -> std::io::Result<Vec<u8>> {
    let ty: TypeStr = type_str(dtype)
        .parse()
        .map_err(|e| std::io::Error::other(format!("numpy type string: {e}")))?;
    let mut out = Vec::with_capacity(data.len() + 128);
    WriteOptions::new_header_only()
        .dtype(npyz::DType::Plain(ty))
        .shape(dims)
        .writer(&mut out)
        .write_header_only()?;
    out.extend_from_slice(data);
    Ok(out)
}

/// Reads back a file written by [`encode`] (for tests): header and data bytes.
#[cfg(test)]
pub fn decode(bytes: &[u8]) -> std::io::Result<(String, Vec<u64>, Vec<u8>)> {
    let mut reader = bytes;
    let header = npyz::NpyHeader::from_reader(&mut reader)?;
    let mut data = vec![];
    reader.read_to_end(&mut data)?;
    Ok((header.dtype().descr(), header.shape().to_vec(), data))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn spec(dtype: DType, dims: &[u64]) -> TensorSpec {
        TensorSpec {
            name: "x".into(),
            dtype,
            dims: dims.to_vec(),
            allocation: 0,
        }
    }

    fn write_tmp(name: &str, bytes: &[u8]) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("xthunk-npy-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    #[test]
    fn every_dtype_round_trips() {
        for dt in DType::ALL {
            let data: Vec<u8> = (0..6 * dt.size()).map(|i| (i % 2) as u8).collect();
            let file = encode(dt, &[2, 3], &data).unwrap();
            let (descr, shape, back) = decode(&file).unwrap();
            assert_eq!(descr, format!("'{}'", type_str(dt)));
            assert_eq!(shape, vec![2, 3]);
            assert_eq!(back, data);
            let p = write_tmp(&format!("rt_{dt}.npy"), &file);
            assert_eq!(read_input(&spec(dt, &[2, 3]), &p).unwrap(), data);
        }
    }

    #[test]
    fn wrong_dtype_shape_and_truncation_are_named() {
        let file = encode(DType::F64, &[4], &[0; 32]).unwrap();
        let p = write_tmp("f64.npy", &file);
        let e = read_input(&spec(DType::F32, &[4]), &p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("input `x`") && e.contains("'<f8'"), "{e}");
        let e = read_input(&spec(DType::F64, &[2, 2]), &p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("shape [4]"), "{e}");
        let p = write_tmp("short.npy", &file[..file.len() - 3]);
        let e = read_input(&spec(DType::F64, &[4]), &p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("truncated"), "{e}");
        let p = write_tmp("garbage.npy", b"not numpy");
        let e = read_input(&spec(DType::F64, &[4]), &p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a valid .npy"), "{e}");
    }

    /// A version-1 `.npy` file with this header text (padded as numpy pads it) and data.
    fn with_header(header: &str, data: &[u8]) -> Vec<u8> {
        let mut h = header.as_bytes().to_vec();
        while !(10 + h.len() + 1).is_multiple_of(64) {
            h.push(b' ');
        }
        h.push(b'\n');
        let mut out = MAGIC.to_vec();
        out.extend([1, 0]);
        out.extend(u16::try_from(h.len()).unwrap().to_le_bytes());
        out.extend(h);
        out.extend(data);
        out
    }

    #[test]
    fn headers_numpy_writes_are_read() {
        let h = |t: &str| parse_header(t.as_bytes());
        let want = Header {
            descr: "<f4".into(),
            fortran_order: false,
            shape: vec![64, 512],
        };
        for text in [
            "{'descr': '<f4', 'fortran_order': False, 'shape': (64, 512), }",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (64, 512)}",
            "{\"shape\":(64,512),\"descr\":\"<f4\",\"fortran_order\":False}   \n",
            "{ 'fortran_order' : False , 'shape' : ( 64L , 512L , ) , 'descr' : '<f4' , }",
        ] {
            assert_eq!(h(text), Ok(want.clone()), "{text}");
        }
        let one = h("{'descr': '|u1', 'fortran_order': True, 'shape': (5,), }").unwrap();
        assert_eq!((one.fortran_order, one.shape), (true, vec![5]));
        let scalar = h("{'descr': '<f8', 'fortran_order': False, 'shape': (), }").unwrap();
        assert!(scalar.shape.is_empty());
    }

    #[test]
    fn malformed_headers_are_named() {
        let e = |t: &str| parse_header(t.as_bytes()).unwrap_err();
        let base = "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }";
        assert!(parse_header(base.as_bytes()).is_ok());
        for (text, needle) in [
            (
                "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (4,)}",
                "twice",
            ),
            ("{'descr': '<f4', 'fortran_order': False}", "no 'shape'"),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'x': 1}",
                "unexpected key",
            ),
            (
                "{'descr': '<f4', 'fortran_order': 0, 'shape': (4,)}",
                "True or False",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (4)}",
                "not a tuple",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (-4,)}",
                "dimension",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (4 4,)}",
                "`,` or `)`",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}",
                "too large",
            ),
            (
                "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (4,)}",
                "structured",
            ),
            (
                "{'descr': '<f\\4', 'fortran_order': False, 'shape': (4,)}",
                "escaped",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (4,)} x",
                "end of the header",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (4,)",
                "expected `}`",
            ),
            ("", "expected `{`"),
        ] {
            let msg = e(text);
            assert!(msg.contains(needle), "{text}: {msg}");
        }
    }

    #[test]
    fn nested_brackets_fail_fast() {
        // py_literal (through npyz) took exponential time here: 14 levels took 11 s, 20 never
        // finished. The strict parser stops at the first bracket that is not a key.
        for depth in [10, 14, 20, 4000] {
            let header = format!("{{'descr': {}{}}}", "{".repeat(depth), "}".repeat(depth));
            let p = write_tmp(&format!("nested{depth}.npy"), &with_header(&header, &[]));
            let t = std::time::Instant::now();
            let e = read_input(&spec(DType::F32, &[4]), &p)
                .unwrap_err()
                .to_string();
            assert!(
                t.elapsed() < std::time::Duration::from_secs(1),
                "{depth}: {:?}",
                t.elapsed()
            );
            assert!(
                e.contains("not a valid .npy file") && e.contains("'descr'"),
                "{e}"
            );
        }
        // A header longer than numpy accepts is refused before it is read.
        let long = format!(
            "{{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }}{}",
            " ".repeat(MAX_HEADER_LEN)
        );
        let mut file = MAGIC.to_vec();
        file.extend([2, 0]);
        file.extend(u32::try_from(long.len()).unwrap().to_le_bytes());
        file.extend(long.as_bytes());
        let p = write_tmp("long_header.npy", &file);
        let e = read_input(&spec(DType::F32, &[4]), &p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("more than the 10000 accepted"), "{e}");
    }

    #[test]
    fn the_data_length_is_checked_before_its_buffer_is_taken() {
        // A shape of 2^48 f32 (2^50 bytes) over 16 bytes of data: truncated, nothing allocated.
        let dims = [1u64 << 48];
        let file = with_header(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (281474976710656,), }",
            &[0; 16],
        );
        let p = write_tmp("huge_shape.npy", &file);
        let e = read_input(&spec(DType::F32, &dims), &p)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("truncated") && e.contains("1125899906842624"),
            "{e}"
        );
        let file = with_header(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
            &[7; 12],
        );
        let p = write_tmp("trailing.npy", &file);
        let e = read_input(&spec(DType::F32, &[2]), &p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("trailing bytes"), "{e}");
        let file = with_header(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
            &[7; 8],
        );
        let p = write_tmp("exact.npy", &file);
        assert_eq!(read_input(&spec(DType::F32, &[2]), &p).unwrap(), vec![7; 8]);
    }

    #[test]
    fn big_endian_is_swapped_and_bf16_takes_u2() {
        let ty = ">i4";
        let mut file = encode(DType::I32, &[1], &[0, 0, 0, 7]).unwrap();
        // Patch the header's dtype to big-endian (same length).
        let pos = file.windows(3).position(|w| w == b"<i4").unwrap();
        file[pos..pos + 3].copy_from_slice(ty.as_bytes());
        let p = write_tmp("be.npy", &file);
        assert_eq!(
            read_input(&spec(DType::I32, &[1]), &p).unwrap(),
            vec![7, 0, 0, 0]
        );
        let file = encode(DType::BF16, &[2], &[1, 2, 3, 4]).unwrap();
        let p = write_tmp("bf16.npy", &file);
        assert!(read_input(&spec(DType::BF16, &[2]), &p).is_ok());
        let e = read_input(&spec(DType::F16, &[2]), &p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("'<u2'"), "{e}");
    }

    #[test]
    fn complex_swaps_each_part_and_f8_reads_what_ml_dtypes_writes() {
        // A big-endian complex64 (1 + 2i as two big-endian f32) reads as two little-endian f32.
        let mut be = Vec::new();
        be.extend_from_slice(&1.0f32.to_be_bytes());
        be.extend_from_slice(&2.0f32.to_be_bytes());
        let file = with_header(
            "{'descr': '>c8', 'fortran_order': False, 'shape': (1,), }",
            &be,
        );
        let p = write_tmp("c8be.npy", &file);
        let mut want = 1.0f32.to_le_bytes().to_vec();
        want.extend_from_slice(&2.0f32.to_le_bytes());
        assert_eq!(read_input(&spec(DType::C64, &[1]), &p).unwrap(), want);
        let mut be = Vec::new();
        be.extend_from_slice(&(-3.5f64).to_be_bytes());
        be.extend_from_slice(&0.25f64.to_be_bytes());
        let file = with_header(
            "{'descr': '>c16', 'fortran_order': False, 'shape': (1,), }",
            &be,
        );
        let p = write_tmp("c16be.npy", &file);
        let mut want = (-3.5f64).to_le_bytes().to_vec();
        want.extend_from_slice(&0.25f64.to_le_bytes());
        assert_eq!(read_input(&spec(DType::C128, &[1]), &p).unwrap(), want);
        // c8 is not c16, nor f8.
        let e = read_input(
            &spec(DType::C128, &[1]),
            &write_tmp("c8.npy", &encode(DType::C64, &[1], &[0; 8]).unwrap()),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("'<c8'") && e.contains("'<c16'"), "{e}");
        // ml_dtypes' np.save writes '<V1' for float8_e4m3fn and '<f1' for float8_e5m2.
        for (descr, dt) in [
            ("<V1", DType::F8E4M3FN),
            ("<f1", DType::F8E5M2),
            ("<V1", DType::F8E5M2),
            ("|u1", DType::F8E4M3FN),
        ] {
            let header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': (3,), }}");
            let p = write_tmp(
                &format!("f8_{dt}.npy"),
                &with_header(&header, &[0x7e, 0x80, 0x01]),
            );
            assert_eq!(
                read_input(&spec(dt, &[3]), &p).unwrap(),
                vec![0x7e, 0x80, 0x01],
                "{descr} {dt}"
            );
        }
        // '<f1' means nothing for other types, and 2-byte voids are no 8-bit float.
        let header = "{'descr': '<f1', 'fortran_order': False, 'shape': (3,), }";
        let p = write_tmp("f1_u8.npy", &with_header(header, &[1, 2, 3]));
        assert!(read_input(&spec(DType::U8, &[3]), &p).is_err());
        let header = "{'descr': '<V2', 'fortran_order': False, 'shape': (3,), }";
        let p = write_tmp("v2_f8.npy", &with_header(header, &[1; 6]));
        assert!(read_input(&spec(DType::F8E5M2, &[3]), &p).is_err());
    }

    #[test]
    fn new_integer_types_take_their_own_codes() {
        for (dt, code) in [
            (DType::I16, "<i2"),
            (DType::U16, "<u2"),
            (DType::U32, "<u4"),
            (DType::U64, "<u8"),
        ] {
            assert_eq!(type_str(dt), code);
            let data: Vec<u8> = (0..3 * dt.size() as u8).collect();
            let file = encode(dt, &[3], &data).unwrap();
            let p = write_tmp(&format!("own_{dt}.npy"), &file);
            assert_eq!(read_input(&spec(dt, &[3]), &p).unwrap(), data);
        }
        // Signedness and width are checked: a '<u4' file is no i32, an '<i2' file no u16,
        // an '<i8' file no u64.
        for (from, to) in [
            (DType::U32, DType::I32),
            (DType::I16, DType::U16),
            (DType::I64, DType::U64),
            (DType::U16, DType::U32),
        ] {
            let file = encode(from, &[2], &vec![0; 2 * from.size()]).unwrap();
            let p = write_tmp(&format!("mix_{from}_{to}.npy"), &file);
            let e = read_input(&spec(to, &[2]), &p).unwrap_err().to_string();
            assert!(e.contains(type_str(from)), "{from} as {to}: {e}");
        }
        // Big-endian u64 is byte-swapped.
        let mut file = encode(DType::U64, &[1], &[0, 0, 0, 0, 0, 0, 0, 9]).unwrap();
        let pos = file.windows(3).position(|w| w == b"<u8").unwrap();
        file[pos..pos + 3].copy_from_slice(b">u8");
        let p = write_tmp("be_u64.npy", &file);
        assert_eq!(
            read_input(&spec(DType::U64, &[1]), &p).unwrap(),
            vec![9, 0, 0, 0, 0, 0, 0, 0]
        );
    }

    #[test]
    fn u16_and_bf16_share_u2_and_the_signature_decides() {
        // Both are written as '<u2'; a '<u2' file is read for either, bytes unchanged.
        assert_eq!(type_str(DType::U16), type_str(DType::BF16));
        let data = vec![0x80, 0x3f, 0x00, 0xc0];
        for written in [DType::U16, DType::BF16] {
            let file = encode(written, &[2], &data).unwrap();
            let p = write_tmp(&format!("u2_{written}.npy"), &file);
            for read in [DType::U16, DType::BF16] {
                assert_eq!(read_input(&spec(read, &[2]), &p).unwrap(), data);
            }
            // A 2-byte integer of the other signedness is not taken.
            assert!(read_input(&spec(DType::I16, &[2]), &p).is_err());
        }
    }
}
