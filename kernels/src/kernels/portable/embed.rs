//! The source an image carries: every portable unit compiled for a GPU ends with a copy of
//! itself as the device array [`EMBEDDED_SOURCE_SYMBOL`], so that an image says which source
//! it was compiled from (the driver emulator reads it and runs that source on the CPU).

use std::fmt::Write as _;

/// The device symbol under which every compiled image carries the portable unit it was
/// compiled from ([`embed_source`]).
pub const EMBEDDED_SOURCE_SYMBOL: &str = "xt_portable_source";

/// `unit` followed by a copy of itself as the device array [`EMBEDDED_SOURCE_SYMBOL`]
/// (NUL-terminated, in raw-string pieces of at most 4 KiB), so that an image says which source
/// it was compiled from: the driver emulator runs that source on the CPU. A unit that holds
/// the raw-string delimiter itself is returned as it is (its images carry no source).
pub fn embed_source(unit: &str) -> String {
    const OPEN: &str = "R\"xt_src(";
    const CLOSE: &str = ")xt_src\"";
    if unit.contains(CLOSE) {
        return unit.to_string();
    }
    let mut s = String::with_capacity(unit.len() * 2 + 256);
    s.push_str(unit);
    s.push_str(
        "\n// The unit above, carried by its images (read by the xthunk driver emulator).\n",
    );
    let _ = write!(
        s,
        "extern \"C\" __device__ const char {EMBEDDED_SOURCE_SYMBOL}[] ="
    );
    let mut rest = unit;
    while !rest.is_empty() {
        let mut cut = rest.len().min(4096);
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        let (piece, tail) = rest.split_at(cut);
        s.push('\n');
        s.push_str(OPEN);
        s.push_str(piece);
        s.push_str(CLOSE);
        rest = tail;
    }
    if unit.is_empty() {
        s.push_str(" \"\"");
    }
    s.push_str(";\n");
    s
}

/// The unit an image carries: the text of [`embed_source`]'s array (its bytes without the
/// final NUL).
pub fn embedded_unit(bytes: &[u8]) -> Option<String> {
    let b = bytes.strip_suffix(&[0]).unwrap_or(bytes);
    String::from_utf8(b.to_vec()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_copy_is_the_unit_in_raw_string_pieces() {
        let unit: String = (0..10_000)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let e = embed_source(&unit);
        assert!(e.starts_with(&unit));
        let decl = &e[unit.len()..];
        assert!(decl.contains("extern \"C\" __device__ const char xt_portable_source[] ="));
        // Reassemble the pieces as the compiler concatenates them.
        let mut copy = String::new();
        for piece in decl.split("R\"xt_src(").skip(1) {
            let body = piece.split(")xt_src\"").next().unwrap_or_default();
            assert!(body.len() <= 4096);
            copy.push_str(body);
        }
        assert_eq!(copy, unit);
        let mut bytes = copy.into_bytes();
        bytes.push(0);
        assert_eq!(embedded_unit(&bytes).as_deref(), Some(unit.as_str()));
        // A unit holding the closing delimiter is left as it is.
        let odd = "const char* s = R\"xt_src(x)xt_src\";";
        assert_eq!(embed_source(odd), odd);
    }
}
