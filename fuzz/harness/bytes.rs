//! Byte-level mutations (havoc): bit flips, boundary bytes, insertions, deletions, duplicated
//! ranges and splices with another input. They know nothing of the format, so they test the
//! decoders' framing and the error paths.

use super::rng::Rng;

/// Bytes that often matter in binary formats (protobuf tags and lengths, signs, ASCII).
const INTERESTING_BYTES: &[u8] = &[
    0x00, 0x01, 0x02, 0x07, 0x08, 0x0a, 0x10, 0x12, 0x1a, 0x7f, 0x80, 0xff, b'{', b'(', b'\'', b'"',
];

/// The largest input a mutation makes (mutations stop growing it there).
pub const MAX_LEN: usize = 64 << 10;

/// Applies one to eight random byte mutations; `other` is another input for splices.
pub fn havoc(rng: &mut Rng, data: &mut Vec<u8>, other: &[u8]) {
    let rounds = 1 << rng.below(4);
    for _ in 0..rounds {
        mutate_once(rng, data, other);
    }
    data.truncate(MAX_LEN);
}

/// One byte mutation.
pub fn mutate_once(rng: &mut Rng, data: &mut Vec<u8>, other: &[u8]) {
    let len = data.len();
    match rng.below(11) {
        // Flip one bit.
        0 | 1 => {
            if let Some(i) = rng.index(len) {
                data[i] ^= 1 << rng.below(8);
            }
        }
        // A boundary byte.
        2 => {
            if let Some(i) = rng.index(len) {
                data[i] = *rng.pick(INTERESTING_BYTES).unwrap_or(&0);
            }
        }
        // A random byte.
        3 => {
            if let Some(i) = rng.index(len) {
                data[i] = rng.byte();
            }
        }
        // Add or subtract a small number (lengths and counts, little-endian).
        4 => {
            if let Some(i) = rng.index(len) {
                let d = rng.range(1, 16) as u8;
                data[i] = if rng.chance(1, 2) {
                    data[i].wrapping_add(d)
                } else {
                    data[i].wrapping_sub(d)
                };
            }
        }
        // Insert random bytes.
        5 => {
            let at = rng.below(len + 1);
            let n = rng.range(1, 8);
            let bytes: Vec<u8> = (0..n).map(|_| rng.byte()).collect();
            data.splice(at..at, bytes);
        }
        // Insert a run of one byte.
        6 => {
            let at = rng.below(len + 1);
            let n = rng.range(1, 32);
            let b = *rng.pick(INTERESTING_BYTES).unwrap_or(&0);
            data.splice(at..at, std::iter::repeat_n(b, n));
        }
        // Delete a range.
        7 => {
            if len > 0 {
                let at = rng.below(len);
                let most = if rng.chance(1, 4) { len } else { 16 };
                let n = rng.range(1, (len - at).min(most));
                data.drain(at..at + n);
            }
        }
        // Duplicate a range elsewhere.
        8 => {
            if len > 0 {
                let at = rng.below(len);
                let n = rng.range(1, (len - at).min(64));
                let chunk = data[at..at + n].to_vec();
                let to = rng.below(len + 1);
                data.splice(to..to, chunk);
            }
        }
        // Overwrite a range with bytes of the other input.
        9 => {
            if len > 0 && !other.is_empty() {
                let from = rng.below(other.len());
                let n = rng.range(1, (other.len() - from).min(64));
                let at = rng.below(len);
                for (k, b) in other[from..from + n].iter().enumerate() {
                    if let Some(slot) = data.get_mut(at + k) {
                        *slot = *b;
                    }
                }
            }
        }
        // Splice: a head of this input and a tail of the other (or truncate).
        _ => {
            let cut = rng.below(len + 1);
            data.truncate(cut);
            if !other.is_empty() && rng.chance(3, 4) {
                let from = rng.below(other.len());
                data.extend_from_slice(&other[from..]);
            }
        }
    }
}

/// Lowercase hex of `bytes`, for failure reports.
pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Parses [`to_hex`] output (whitespace ignored); `None` when it is not hex.
pub fn from_hex(text: &str) -> Option<Vec<u8>> {
    let digits: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    if !digits.len().is_multiple_of(2) {
        return None;
    }
    digits
        .chunks(2)
        .map(|pair| {
            let s = std::str::from_utf8(pair).ok()?;
            u8::from_str_radix(s, 16).ok()
        })
        .collect()
}
