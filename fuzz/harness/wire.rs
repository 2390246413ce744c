//! Protobuf wire-format mutations that know no schema: an input is parsed into a tree of
//! fields (a length-delimited field whose bytes parse as fields is a nested message), mutated
//! (values, deletions, duplications, swaps, field numbers, wire types, fields grafted from
//! another input) and serialized again with correct lengths, so that mutations reach the
//! converter and the validator instead of stopping at the framing.

use super::bytes;
use super::rng::{Rng, mutate_u32, mutate_u64};

/// One field of a message.
#[derive(Clone, Debug, PartialEq)]
pub struct Field {
    pub number: u32,
    pub value: Value,
}

/// A field's value, by wire type.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    Bytes(Vec<u8>),
    Message(Vec<Field>),
}

/// Deepest nesting parsed as messages (deeper length-delimited fields stay bytes).
const MAX_DEPTH: usize = 120;

fn read_varint(data: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, b) in data.iter().enumerate().take(10) {
        v |= ((b & 0x7f) as u64) << (7 * i);
        if b & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

fn write_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Parses `data` as a message; `None` when it is not one (groups are not parsed).
pub fn parse(data: &[u8]) -> Option<Vec<Field>> {
    parse_at(data, 0)
}

fn parse_at(data: &[u8], depth: usize) -> Option<Vec<Field>> {
    let mut fields = Vec::new();
    let mut i = 0;
    while i < data.len() {
        let (tag, n) = read_varint(&data[i..])?;
        i += n;
        let number = u32::try_from(tag >> 3).ok()?;
        if number == 0 {
            return None;
        }
        let value = match tag & 7 {
            0 => {
                let (v, n) = read_varint(&data[i..])?;
                i += n;
                Value::Varint(v)
            }
            1 => {
                let b: [u8; 8] = data.get(i..i + 8)?.try_into().ok()?;
                i += 8;
                Value::Fixed64(u64::from_le_bytes(b))
            }
            5 => {
                let b: [u8; 4] = data.get(i..i + 4)?.try_into().ok()?;
                i += 4;
                Value::Fixed32(u32::from_le_bytes(b))
            }
            2 => {
                let (len, n) = read_varint(&data[i..])?;
                i += n;
                let len = usize::try_from(len).ok()?;
                let body = data.get(i..i.checked_add(len)?)?;
                i += len;
                match (depth < MAX_DEPTH && !body.is_empty())
                    .then(|| parse_at(body, depth + 1))
                    .flatten()
                {
                    Some(inner) => Value::Message(inner),
                    None => Value::Bytes(body.to_vec()),
                }
            }
            _ => return None,
        };
        fields.push(Field { number, value });
    }
    Some(fields)
}

/// Serializes a message (lengths recomputed).
pub fn serialize(fields: &[Field]) -> Vec<u8> {
    let mut out = Vec::new();
    write_fields(&mut out, fields);
    out
}

fn write_fields(out: &mut Vec<u8>, fields: &[Field]) {
    for f in fields {
        let number = f.number as u64;
        match &f.value {
            Value::Varint(v) => {
                write_varint(out, number << 3);
                write_varint(out, *v);
            }
            Value::Fixed64(v) => {
                write_varint(out, (number << 3) | 1);
                out.extend_from_slice(&v.to_le_bytes());
            }
            Value::Fixed32(v) => {
                write_varint(out, (number << 3) | 5);
                out.extend_from_slice(&v.to_le_bytes());
            }
            Value::Bytes(b) => {
                write_varint(out, (number << 3) | 2);
                write_varint(out, b.len() as u64);
                out.extend_from_slice(b);
            }
            Value::Message(m) => {
                let inner = serialize(m);
                write_varint(out, (number << 3) | 2);
                write_varint(out, inner.len() as u64);
                out.extend_from_slice(&inner);
            }
        }
    }
}

/// Paths (indices from the root) of every field, depth first, at most `limit` of them.
pub fn paths(fields: &[Field], limit: usize) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    let mut stack: Vec<(Vec<usize>, &[Field])> = vec![(vec![], fields)];
    while let Some((prefix, list)) = stack.pop() {
        for (i, f) in list.iter().enumerate() {
            if out.len() >= limit {
                return out;
            }
            let mut p = prefix.clone();
            p.push(i);
            if let Value::Message(m) = &f.value {
                stack.push((p.clone(), m));
            }
            out.push(p);
        }
    }
    out
}

/// The list holding the field at `path`, and the field's index in it.
fn parent_mut<'a>(
    fields: &'a mut Vec<Field>,
    path: &[usize],
) -> Option<(&'a mut Vec<Field>, usize)> {
    let (last, prefix) = path.split_last()?;
    let mut list = fields;
    for &i in prefix {
        match &mut list.get_mut(i)?.value {
            Value::Message(m) => list = m,
            _ => return None,
        }
    }
    (*last < list.len()).then_some((list, *last))
}

/// Float bit patterns that break lossy conversions (NaN payloads, infinities, signed zero,
/// subnormals).
const F32_BITS: &[u32] = &[
    0x7fc0_0000,
    0xffff_ffff,
    0x7f80_0001,
    0x7f80_0000,
    0xff80_0000,
    0x8000_0000,
    0x0000_0001,
    0x7f7f_ffff,
];
const F64_BITS: &[u64] = &[
    0x7ff8_0000_0000_0000,
    0xffff_ffff_ffff_ffff,
    0x7ff0_0000_0000_0001,
    0x7ff0_0000_0000_0000,
    0xfff0_0000_0000_0000,
    0x8000_0000_0000_0000,
    1,
    0x7fef_ffff_ffff_ffff,
];
const STRINGS: &[&[u8]] = &[
    b"",
    b"std",
    b"add_f32",
    b"fill_i32",
    b"gemm",
    b"sm_90",
    b"gfx90a",
    b"\0",
    b"\xff\xfe",
    b"x\"y\\z\n",
];

fn mutate_value(rng: &mut Rng, value: &mut Value) {
    match value {
        Value::Varint(v) => {
            *v = match rng.below(6) {
                // Negative int32/int64 values are 10-byte varints.
                0 => (-(rng.range(1, 3) as i64)) as u64,
                1 => rng.below(12) as u64,
                _ => mutate_u64(rng, *v),
            }
        }
        Value::Fixed64(v) => {
            *v = if rng.chance(1, 2) {
                *rng.pick(F64_BITS).unwrap_or(&0)
            } else {
                mutate_u64(rng, *v)
            }
        }
        Value::Fixed32(v) => {
            *v = if rng.chance(1, 2) {
                *rng.pick(F32_BITS).unwrap_or(&0)
            } else {
                mutate_u32(rng, *v)
            }
        }
        Value::Bytes(b) => {
            if rng.chance(1, 3) {
                *b = rng.pick(STRINGS).unwrap_or(&&b""[..]).to_vec();
            } else {
                let copy = b.clone();
                bytes::mutate_once(rng, b, &copy);
            }
        }
        Value::Message(m) => {
            if rng.chance(1, 4) {
                // The message as raw bytes, damaged.
                let mut raw = serialize(m);
                let copy = raw.clone();
                bytes::mutate_once(rng, &mut raw, &copy);
                *value = Value::Bytes(raw);
            } else {
                m.clear();
            }
        }
    }
}

/// A value of another wire type.
fn retype(rng: &mut Rng, value: &Value) -> Value {
    let as_u64 = match value {
        Value::Varint(v) | Value::Fixed64(v) => *v,
        Value::Fixed32(v) => *v as u64,
        Value::Bytes(b) => b.len() as u64,
        Value::Message(m) => m.len() as u64,
    };
    match rng.below(4) {
        0 => Value::Varint(as_u64),
        1 => Value::Fixed64(as_u64),
        2 => Value::Fixed32(as_u64 as u32),
        _ => {
            let mut raw = Vec::new();
            write_varint(&mut raw, as_u64);
            Value::Bytes(raw)
        }
    }
}

/// Applies one to four wire-level mutations to `data`; `donor` supplies grafted fields.
/// Returns `false` (and leaves `data` alone) when `data` is not a message.
pub fn mutate(rng: &mut Rng, data: &mut Vec<u8>, donor: &[u8]) -> bool {
    let Some(mut tree) = parse(data) else {
        return false;
    };
    let mut donor = Donor {
        bytes: donor,
        tree: None,
    };
    let rounds = rng.range(1, 4);
    for _ in 0..rounds {
        mutate_tree(rng, &mut tree, &mut donor);
    }
    *data = serialize(&tree);
    data.truncate(bytes::MAX_LEN);
    true
}

/// The input grafts come from, parsed on first use.
pub struct Donor<'a> {
    pub bytes: &'a [u8],
    pub tree: Option<Vec<Field>>,
}

impl Donor<'_> {
    /// A random field of the donor, with its subtree.
    fn graft(&mut self, rng: &mut Rng) -> Option<Field> {
        let bytes = self.bytes;
        let tree = self
            .tree
            .get_or_insert_with(|| parse(bytes).unwrap_or_default());
        let path = random_path(rng, tree)?;
        field_at(tree, &path).cloned()
    }
}

/// Number of fields in a message, nested ones included.
fn count(fields: &[Field]) -> usize {
    fields
        .iter()
        .map(|f| match &f.value {
            Value::Message(m) => 1 + count(m),
            _ => 1,
        })
        .sum()
}

/// The path of the `n`-th field in depth-first order (`n` counts down as fields are passed).
fn nth_path(fields: &[Field], n: &mut usize, path: &mut Vec<usize>) -> bool {
    for (i, f) in fields.iter().enumerate() {
        path.push(i);
        if *n == 0 {
            return true;
        }
        *n -= 1;
        if let Value::Message(m) = &f.value
            && nth_path(m, n, path)
        {
            return true;
        }
        path.pop();
    }
    false
}

/// A random field's path, `None` for an empty message.
fn random_path(rng: &mut Rng, fields: &[Field]) -> Option<Vec<usize>> {
    let mut n = rng.index(count(fields))?;
    let mut path = Vec::new();
    nth_path(fields, &mut n, &mut path).then_some(path)
}

/// One mutation of a parsed message.
pub fn mutate_tree(rng: &mut Rng, tree: &mut Vec<Field>, donor: &mut Donor<'_>) {
    let Some(path) = random_path(rng, tree) else {
        // An empty message: graft something.
        if let Some(f) = donor.graft(rng) {
            tree.push(f);
        }
        return;
    };
    let Some((list, i)) = parent_mut(tree, &path) else {
        return;
    };
    match rng.below(9) {
        0..=2 => mutate_value(rng, &mut list[i].value),
        3 => {
            list.remove(i);
        }
        4 => {
            let f = list[i].clone();
            let at = if rng.chance(1, 2) { i + 1 } else { list.len() };
            list.insert(at, f);
        }
        5 => {
            if let Some(j) = rng.index(list.len()) {
                list.swap(i, j);
            }
        }
        6 => {
            let n = list[i].number;
            list[i].number = match rng.below(4) {
                0 => n.saturating_add(1),
                1 => n.saturating_sub(1).max(1),
                2 => rng.range(1, 20) as u32,
                _ => (1 << 29) - 1,
            };
        }
        7 => {
            let v = retype(rng, &list[i].value);
            list[i].value = v;
        }
        _ => {
            // Graft a field of the donor into this list or into a message.
            if let Some(g) = donor.graft(rng) {
                match &mut list[i].value {
                    Value::Message(m) if rng.chance(1, 2) => {
                        let at = rng.below(m.len() + 1);
                        m.insert(at, g);
                    }
                    _ => {
                        let at = rng.below(list.len() + 1);
                        list.insert(at, g);
                    }
                }
            }
        }
    }
}

/// The field at `path`.
pub fn field_at<'a>(fields: &'a [Field], path: &[usize]) -> Option<&'a Field> {
    let (last, prefix) = path.split_last()?;
    let mut list = fields;
    for &i in prefix {
        match &list.get(i)?.value {
            Value::Message(m) => list = m,
            _ => return None,
        }
    }
    list.get(*last)
}

/// Candidate reductions of a message for the minimizer: each field removed, each message
/// emptied, each varint set to 0 or 1 (serialized), largest first.
pub fn reductions(data: &[u8]) -> Vec<Vec<u8>> {
    let Some(tree) = parse(data) else {
        return vec![];
    };
    let mut out = Vec::new();
    let all = paths(&tree, 2048);
    for p in &all {
        let mut t = tree.clone();
        if let Some((list, i)) = parent_mut(&mut t, p) {
            list.remove(i);
            out.push(serialize(&t));
        }
    }
    for p in &all {
        let mut t = tree.clone();
        if let Some((list, i)) = parent_mut(&mut t, p) {
            match &mut list[i].value {
                Value::Varint(v) if *v > 1 => *v = 1,
                Value::Varint(v) if *v == 1 => *v = 0,
                Value::Bytes(b) if b.len() > 1 => b.truncate(1),
                _ => continue,
            }
            out.push(serialize(&t));
        }
    }
    out
}
