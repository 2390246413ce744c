//! A reader of MLIR bytecode (the format `mlir.llvm.org/docs/BytecodeFormat/` documents:
//! magic `ML\xefR`, a version, a producer string, then sections of strings, dialects and op
//! names, attributes and types, properties, resources and the IR), for the attributes and
//! types of the `builtin` and `vhlo` dialects — what a StableHLO portable artifact
//! (`jax.export`'s `mlir_module_serialized`) holds. [`crate::vhlo`] turns what it reads into
//! the syntax tree the text reader gives.
//!
//! Why hand-written: MLIR's bytecode reader is C++ inside LLVM; the Rust crates that reach
//! it (`melior`, `mlir-sys`) bind an installed LLVM/MLIR of a matching version, which
//! xthunk's one-binary build cannot require (and must not depend on), and they know no
//! dialect's own encodings (VHLO's attributes and types) without linking StableHLO's C++
//! too. A search of docs.rs for a pure-Rust reader found only readers of LLVM *bitcode*
//! (`llvm-bitcode`, mollusc's crates), a different format. The subset a portable artifact
//! uses is small.
//!
//! The input is untrusted: every length, count and index is checked against the bytes left
//! or the table it indexes, nesting is limited ([`MAX_NESTING`]), and allocations are bounded
//! by the input's size (a count never exceeds the bytes that would hold it) or by
//! [`MAX_TENSOR_BYTES`]. Malformed input gives a [`BytecodeError`], never a panic.

use crate::ast::{BlockArg, ElementType, Location, NarrowFloat, ResultGroup, Type, ValueRef};
use crate::ast::{ComplexOf, Dim};
use thiserror::Error;

/// How deep regions, attributes and types may nest.
pub const MAX_NESTING: usize = 256;
/// The largest tensor constant (bytes) one attribute may hold.
pub const MAX_TENSOR_BYTES: u64 = 4 << 30;
/// The bytecode versions read (MLIR's 1 to 6; JAX 0.10 writes 6).
pub const BYTECODE_VERSIONS: std::ops::RangeInclusive<u64> = 1..=6;

/// Why bytes could not be read as MLIR bytecode.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum BytecodeError {
    /// The bytes break the format: `offset` is where, from the start of the bytecode.
    #[error("bytecode offset {offset}: {message}")]
    Malformed { offset: usize, message: String },
    /// Well-formed, but something this reader does not take.
    #[error("unsupported in the bytecode: {what}")]
    Unsupported { what: String },
    /// Larger than a limit.
    #[error("bytecode: {what} exceeds the limit of {limit}")]
    TooLarge { what: String, limit: u64 },
}

type R<T> = Result<T, BytecodeError>;

fn unsupported<T>(what: impl Into<String>) -> R<T> {
    Err(BytecodeError::Unsupported { what: what.into() })
}

/// A cursor over a slice; `base` is the slice's offset in the whole bytecode (for errors).
#[derive(Clone)]
pub(crate) struct Cur<'a> {
    data: &'a [u8],
    pos: usize,
    base: usize,
}

impl<'a> Cur<'a> {
    fn new(data: &'a [u8], base: usize) -> Self {
        Cur { data, pos: 0, base }
    }

    fn fail<T>(&self, message: impl Into<String>) -> R<T> {
        Err(BytecodeError::Malformed {
            offset: self.base.saturating_add(self.pos),
            message: message.into(),
        })
    }

    fn left(&self) -> usize {
        self.data.len().saturating_sub(self.pos)
    }

    fn is_empty(&self) -> bool {
        self.left() == 0
    }

    fn byte(&mut self) -> R<u8> {
        match self.data.get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                Ok(b)
            }
            None => self.fail("unexpected end of data"),
        }
    }

    fn bytes(&mut self, n: u64) -> R<&'a [u8]> {
        let n = match usize::try_from(n) {
            Ok(n) if n <= self.left() => n,
            _ => return self.fail(format!("{n} bytes wanted, {} left", self.left())),
        };
        let s = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// A prefix varint: the trailing zeros of the first byte count the bytes that follow.
    fn varint(&mut self) -> R<u64> {
        let first = self.byte()?;
        if first == 0 {
            let b = self.bytes(8)?;
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            return Ok(u64::from_le_bytes(a));
        }
        let extra = first.trailing_zeros() as usize;
        let rest = self.bytes(extra as u64)?;
        let mut a = [0u8; 8];
        a[0] = first;
        a[1..=extra].copy_from_slice(rest);
        Ok(u64::from_le_bytes(a) >> (extra + 1))
    }

    /// A zigzag-encoded signed varint.
    fn svarint(&mut self) -> R<i64> {
        let v = self.varint()?;
        Ok(((v >> 1) as i64) ^ -((v & 1) as i64))
    }

    /// A count of items that take at least one byte each: never more than the bytes left,
    /// so what it sizes is bounded by the input.
    fn count(&mut self) -> R<usize> {
        let n = self.varint()?;
        match usize::try_from(n) {
            Ok(n) if n <= self.left() => Ok(n),
            _ => self.fail(format!("count {n} exceeds the {} bytes left", self.left())),
        }
    }

    fn index(&mut self, len: usize, what: &str) -> R<usize> {
        let i = self.varint()?;
        match usize::try_from(i) {
            Ok(i) if i < len => Ok(i),
            _ => self.fail(format!("{what} index {i} out of range (0..{len})")),
        }
    }

    fn cstr(&mut self) -> R<&'a str> {
        let rest = &self.data[self.pos.min(self.data.len())..];
        let Some(end) = rest.iter().position(|&b| b == 0) else {
            return self.fail("unterminated string");
        };
        let Ok(s) = std::str::from_utf8(&rest[..end]) else {
            return self.fail("string is not UTF-8");
        };
        self.pos += end + 1;
        Ok(s)
    }

    fn offset(&self) -> usize {
        self.base.saturating_add(self.pos)
    }
}

const MAGIC: &[u8; 4] = b"ML\xefR";

/// Whether `bytes` start with MLIR bytecode's magic number.
pub fn is_bytecode(bytes: &[u8]) -> bool {
    bytes.starts_with(MAGIC)
}

/// The bytecode version and producer string of MLIR bytecode, reading nothing else.
pub fn header(data: &[u8]) -> R<(u64, String)> {
    let mut c = Cur::new(data, 0);
    if !is_bytecode(data) {
        return c.fail("not MLIR bytecode (no `ML\\xefR` magic number)");
    }
    c.pos = 4;
    let version = c.varint()?;
    Ok((version, c.cstr()?.to_string()))
}

/// An attribute of `builtin` or `vhlo` as read (VHLO's forms: integers carry their type,
/// arrays of integers are tensors).
#[derive(Clone, Debug, PartialEq)]
pub enum V {
    Unit,
    Bool(bool),
    Int {
        value: i128,
        ty: Type,
    },
    Float {
        value: f64,
        ty: Type,
    },
    Str(String),
    Array(Vec<V>),
    Dict(Vec<(V, V)>),
    /// A dense tensor: its type and little-endian element bytes (i1 one byte each).
    Tensor {
        ty: Type,
        data: Vec<u8>,
    },
    Type(Type),
    /// A VHLO enum: its StableHLO kind (`comparison_direction`) and value name.
    Enum {
        kind: &'static str,
        value: &'static str,
    },
    OutputOperandAlias {
        output_tuple_indices: Vec<i64>,
        operand_index: i64,
        operand_tuple_indices: Vec<i64>,
    },
    ResultAccuracy {
        atol: f64,
        rtol: f64,
        ulps: i64,
        mode: Box<V>,
    },
    TypeExtensions(Vec<i64>),
    Symbol(Vec<String>),
    Loc(Location),
    /// An attribute stored as its text (MLIR's fallback for those with no binary encoding).
    Text(String),
}

/// One operation as read: `dialect.name`, its attributes (dictionary and properties,
/// by name), its regions, results and operands.
#[derive(Clone, Debug)]
pub struct RawOp {
    pub name: String,
    pub attrs: Vec<(String, V)>,
    pub results: Vec<ResultGroup>,
    pub result_types: Vec<Type>,
    pub operands: Vec<ValueRef>,
    pub operand_types: Vec<Type>,
    pub successors: Vec<String>,
    pub regions: Vec<Vec<RawBlock>>,
    pub loc: Location,
}

#[derive(Clone, Debug)]
pub struct RawBlock {
    pub args: Vec<BlockArg>,
    pub ops: Vec<RawOp>,
}

/// A read bytecode file: its version, producer and top-level operations.
#[derive(Clone, Debug)]
pub struct Bytecode {
    pub version: u64,
    pub producer: String,
    pub ops: Vec<RawOp>,
}

/// The names of an op's properties in the order the bytecode writes them, each with whether
/// it is optional (written with a presence flag); `None` for an op this reader does not know.
pub type PropertyNames = dyn Fn(&str) -> Option<Vec<(&'static str, bool)>>;

struct Entry {
    dialect: usize,
    custom: bool,
    start: usize,
    end: usize,
}

/// A lazily decoded table's entries: the value and its weight, once decoded.
type Cache<T> = Vec<Option<(T, u64)>>;

struct File<'a> {
    version: u64,
    strings: Vec<&'a str>,
    dialects: Vec<&'a str>,
    op_names: Vec<String>,
    attr_base: usize,
    attr_data: &'a [u8],
    attrs: Vec<Entry>,
    types: Vec<Entry>,
    /// Decoded attributes and types, with their weight (see [`File::spend`]).
    attr_cache: Cache<V>,
    type_cache: Cache<Type>,
    /// What has been decoded so far and the most it may be: shared attributes and types are
    /// copied into each use, so a small file could otherwise decode to an exponential size.
    spent: u64,
    budget: u64,
    props: Vec<(usize, &'a [u8])>,
    props_of: &'a PropertyNames,
    depth: usize,
    next_name: u64,
}

/// Reads MLIR bytecode; `props_of` names the properties of each op (see [`PropertyNames`]).
pub fn read(data: &[u8], props_of: &PropertyNames) -> R<Bytecode> {
    let mut c = Cur::new(data, 0);
    if !is_bytecode(data) {
        return c.fail("not MLIR bytecode (no `ML\\xefR` magic number)");
    }
    c.pos = 4;
    let version = c.varint()?;
    if !BYTECODE_VERSIONS.contains(&version) {
        return unsupported(format!(
            "MLIR bytecode version {version} (this reader takes {} to {})",
            BYTECODE_VERSIONS.start(),
            BYTECODE_VERSIONS.end()
        ));
    }
    let producer = c.cstr()?.to_string();
    let mut sections: [Option<(usize, &[u8])>; 9] = [None; 9];
    while !c.is_empty() {
        let id_byte = c.byte()?;
        let id = usize::from(id_byte & 0x7f);
        let len = c.varint()?;
        if id_byte & 0x80 != 0 {
            let align = c.varint()?;
            if !align.is_power_of_two() || align > 1 << 16 {
                return c.fail(format!("section alignment {align}"));
            }
            while !(c.pos as u64).is_multiple_of(align) {
                if c.byte()? != 0xCB {
                    return c.fail("section padding byte other than 0xCB");
                }
            }
        }
        let start = c.offset();
        let body = c.bytes(len)?;
        match sections.get_mut(id) {
            Some(slot @ None) => *slot = Some((start, body)),
            Some(Some(_)) => return c.fail(format!("section {id} appears twice")),
            None => return c.fail(format!("unknown section id {id}")),
        }
    }
    let need = |id: usize, what: &str| {
        sections[id].ok_or_else(|| BytecodeError::Malformed {
            offset: data.len(),
            message: format!("no {what} section"),
        })
    };
    let (sbase, sdata) = need(0, "string")?;
    let strings = read_strings(Cur::new(sdata, sbase))?;
    let (dbase, ddata) = need(1, "dialect")?;
    let (dialects, op_names) = read_dialects(Cur::new(ddata, dbase), &strings, version)?;
    let (abase, adata) = need(2, "attribute/type")?;
    let (obase, odata) = need(3, "attribute/type offset")?;
    let (attrs, types) = read_offsets(Cur::new(odata, obase), dialects.len(), adata.len())?;
    let props = match sections[8] {
        Some((pbase, pdata)) => read_props(Cur::new(pdata, pbase))?,
        None => vec![],
    };
    let (ibase, idata) = need(4, "IR")?;
    let mut file = File {
        version,
        strings,
        dialects,
        op_names,
        attr_base: abase,
        attr_data: adata,
        attr_cache: vec![None; attrs.len()],
        type_cache: vec![None; types.len()],
        attrs,
        types,
        props,
        props_of,
        depth: 0,
        next_name: 0,
        spent: 0,
        budget: (data.len() as u64)
            .saturating_mul(64)
            .saturating_add(1 << 16),
    };
    let mut c = Cur::new(idata, ibase);
    let mut scope = Scope::default();
    let block = file.block(&mut c, &mut scope)?;
    Ok(Bytecode {
        version,
        producer,
        ops: block.ops,
    })
}

fn read_strings(mut c: Cur<'_>) -> R<Vec<&str>> {
    let n = c.count()?;
    let mut lens = Vec::with_capacity(n);
    for _ in 0..n {
        lens.push(c.varint()?);
    }
    let mut out = Vec::with_capacity(n);
    for &len in lens.iter().rev() {
        let b = c.bytes(len)?;
        let b = b.strip_suffix(&[0]).unwrap_or(b);
        match std::str::from_utf8(b) {
            Ok(s) => out.push(s),
            Err(_) => return c.fail("a string is not UTF-8"),
        }
    }
    Ok(out)
}

fn read_dialects<'a>(
    mut c: Cur<'a>,
    strings: &[&'a str],
    version: u64,
) -> R<(Vec<&'a str>, Vec<String>)> {
    let n = c.count()?;
    let mut dialects = Vec::with_capacity(n);
    for _ in 0..n {
        let v = c.varint()?;
        let name = usize::try_from(v >> 1).ok().and_then(|i| strings.get(i));
        let Some(&name) = name else {
            return c.fail(format!("dialect name index {} out of range", v >> 1));
        };
        if v & 1 != 0 {
            let len = c.varint()?;
            c.bytes(len)?;
        }
        dialects.push(name);
    }
    if version >= 3 {
        c.varint()?;
    }
    let mut ops = vec![];
    while !c.is_empty() {
        let d = c.index(dialects.len(), "dialect")?;
        let k = c.count()?;
        for _ in 0..k {
            let mut v = c.varint()?;
            if version >= 5 {
                v >>= 1;
            }
            let Some(name) = usize::try_from(v).ok().and_then(|i| strings.get(i)) else {
                return c.fail(format!("op name index {v} out of range"));
            };
            ops.push(format!("{}.{name}", dialects[d]));
        }
    }
    Ok((dialects, ops))
}

fn read_offsets(mut c: Cur<'_>, dialects: usize, data_len: usize) -> R<(Vec<Entry>, Vec<Entry>)> {
    let na = c.count()?;
    let nt = c.count()?;
    if na.saturating_add(nt) > c.left() {
        return c.fail("more attributes and types than the offset section can describe");
    }
    let mut all = Vec::with_capacity(na + nt);
    let mut at = 0usize;
    while !c.is_empty() {
        let dialect = c.index(dialects, "dialect")?;
        let k = c.count()?;
        for _ in 0..k {
            let v = c.varint()?;
            let size = usize::try_from(v >> 1).unwrap_or(usize::MAX);
            let end = at.saturating_add(size);
            if end > data_len {
                return c.fail("an attribute or type runs past its section");
            }
            all.push(Entry {
                dialect,
                custom: v & 1 != 0,
                start: at,
                end,
            });
            at = end;
        }
    }
    if all.len() != na + nt {
        return c.fail(format!(
            "{} attributes and types listed, {} declared",
            all.len(),
            na + nt
        ));
    }
    let types = all.split_off(na);
    Ok((all, types))
}

fn read_props(mut c: Cur<'_>) -> R<Vec<(usize, &[u8])>> {
    if c.is_empty() {
        return Ok(vec![]);
    }
    let n = c.count()?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let len = c.varint()?;
        let at = c.offset();
        out.push((at, c.bytes(len)?));
    }
    Ok(out)
}

/// MLIR's value numbering: per region isolated from above, values in definition order, each
/// region's own values after those of the regions enclosing it.
#[derive(Default)]
struct Scope {
    values: Vec<Option<(ValueRef, Type)>>,
    next: Vec<usize>,
}

/// How many values all scopes together may declare.
const MAX_VALUES: usize = 1 << 26;

impl Scope {
    fn push(&mut self, n: usize, c: &Cur<'_>) -> R<()> {
        let total = self.values.len().saturating_add(n);
        if n > c.left().saturating_add(1) || total > MAX_VALUES {
            return c.fail(format!("region declares {n} values"));
        }
        self.next.push(self.values.len());
        self.values.resize(total, None);
        Ok(())
    }

    fn pop_to(&mut self, len: usize) {
        self.next.pop();
        self.values.truncate(len);
    }

    fn define(&mut self, v: ValueRef, ty: Type, c: &Cur<'_>) -> R<()> {
        let len = self.values.len();
        match self.next.last_mut() {
            Some(i) if *i < len => {
                self.values[*i] = Some((v, ty));
                *i += 1;
                Ok(())
            }
            _ => c.fail("more values defined than the region declares"),
        }
    }

    fn get(&self, i: u64, c: &Cur<'_>) -> R<(ValueRef, Type)> {
        match usize::try_from(i).ok().and_then(|i| self.values.get(i)) {
            Some(Some(v)) => Ok(v.clone()),
            _ => c.fail(format!("operand value {i} is not defined here")),
        }
    }
}

impl<'a> File<'a> {
    fn enter(&mut self, c: &Cur<'_>) -> R<()> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return c.fail(format!("nested deeper than {MAX_NESTING} levels"));
        }
        Ok(())
    }

    /// Charges `w` to the decoding budget.
    fn spend(&mut self, w: u64) -> R<()> {
        self.spent = self.spent.saturating_add(w);
        if self.spent > self.budget {
            return Err(BytecodeError::TooLarge {
                what: "the decoded attributes and types (shared ones counted at each use)".into(),
                limit: self.budget,
            });
        }
        Ok(())
    }

    fn fresh(&mut self, prefix: &str) -> String {
        self.next_name += 1;
        format!("{prefix}{}", self.next_name)
    }

    fn region(&mut self, c: &mut Cur<'a>, scope: &mut Scope) -> R<Vec<RawBlock>> {
        let n = c.count()?;
        if n == 0 {
            return Ok(vec![]);
        }
        let values = c.count()?;
        let mark = scope.values.len();
        scope.push(values, c)?;
        let mut blocks = Vec::with_capacity(n);
        for _ in 0..n {
            match self.block(c, scope) {
                Ok(b) => blocks.push(b),
                Err(e) => {
                    scope.pop_to(mark);
                    return Err(e);
                }
            }
        }
        scope.pop_to(mark);
        Ok(blocks)
    }

    fn block(&mut self, c: &mut Cur<'a>, scope: &mut Scope) -> R<RawBlock> {
        let enc = c.varint()?;
        let nops = usize::try_from(enc >> 1).unwrap_or(usize::MAX);
        if nops > c.left() {
            return c.fail(format!("block of {nops} ops in {} bytes", c.left()));
        }
        let mut args = vec![];
        if enc & 1 != 0 {
            let n = c.count()?;
            for _ in 0..n {
                let (ty, loc) = if self.version >= 4 {
                    let v = c.varint()?;
                    let ty = self.type_at(v >> 1, c)?;
                    let loc = if v & 1 != 0 {
                        let i = c.varint()?;
                        self.loc_at(i, c)?
                    } else {
                        Location::Unknown
                    };
                    (ty, loc)
                } else {
                    let t = c.varint()?;
                    let ty = self.type_at(t, c)?;
                    let i = c.varint()?;
                    (ty, self.loc_at(i, c)?)
                };
                let name = self.fresh("a");
                scope.define(
                    ValueRef {
                        name: name.clone(),
                        index: 0,
                    },
                    ty.clone(),
                    c,
                )?;
                args.push(BlockArg {
                    name,
                    ty,
                    loc: Some(loc),
                });
            }
            if self.version >= 3 && c.byte()? != 0 {
                use_list_orders(c, n)?;
            }
        }
        let mut ops = Vec::with_capacity(nops);
        for _ in 0..nops {
            ops.push(self.op(c, scope)?);
        }
        Ok(RawBlock { args, ops })
    }

    fn op(&mut self, c: &mut Cur<'a>, scope: &mut Scope) -> R<RawOp> {
        let name = self.op_names[c.index(self.op_names.len(), "op name")?].clone();
        let mask = c.byte()?;
        let l = c.varint()?;
        let loc = self.loc_at(l, c)?;
        let mut attrs: Vec<(String, V)> = vec![];
        if mask & 0x01 != 0 {
            let i = c.varint()?;
            match self.attr_at(i, c)? {
                V::Dict(entries) => {
                    for (k, v) in entries {
                        let V::Str(k) = k else {
                            return c.fail("an attribute name is not a string");
                        };
                        attrs.push((k, v));
                    }
                }
                _ => return c.fail("an op's attributes are not a dictionary"),
            }
        }
        if mask & 0x40 != 0 {
            let i = c.index(self.props.len(), "properties")?;
            let (base, bytes) = self.props[i];
            let Some(names) = (self.props_of)(&name) else {
                return unsupported(format!("op `{name}` (its properties are unknown)"));
            };
            let mut p = Cur::new(bytes, base);
            for (key, optional) in names {
                let v = p.varint()?;
                let index = if optional {
                    if v & 1 == 0 {
                        continue;
                    }
                    v >> 1
                } else {
                    v
                };
                let value = self.attr_at(index, &p)?;
                attrs.push((key.to_string(), value));
            }
        }
        let mut results = vec![];
        let mut result_types = vec![];
        if mask & 0x02 != 0 {
            let n = c.count()?;
            for _ in 0..n {
                let t = c.varint()?;
                result_types.push(self.type_at(t, c)?);
            }
            let group = self.fresh("v");
            for (k, ty) in result_types.iter().enumerate() {
                let index = u32::try_from(k).unwrap_or(u32::MAX);
                scope.define(
                    ValueRef {
                        name: group.clone(),
                        index,
                    },
                    ty.clone(),
                    c,
                )?;
            }
            results.push(ResultGroup {
                name: group,
                count: u32::try_from(n).unwrap_or(u32::MAX),
            });
        }
        let mut operands = vec![];
        let mut operand_types = vec![];
        if mask & 0x04 != 0 {
            let n = c.count()?;
            for _ in 0..n {
                let i = c.varint()?;
                let (v, t) = scope.get(i, c)?;
                operands.push(v);
                operand_types.push(t);
            }
        }
        let mut successors = vec![];
        if mask & 0x08 != 0 {
            let n = c.count()?;
            for _ in 0..n {
                successors.push(format!("bb{}", c.varint()?));
            }
        }
        if mask & 0x20 != 0 {
            use_list_orders(c, result_types.len())?;
        }
        let mut regions = vec![];
        if mask & 0x10 != 0 {
            let v = c.varint()?;
            let n = usize::try_from(v >> 1).unwrap_or(usize::MAX);
            if n > c.left() {
                return c.fail(format!("{n} regions"));
            }
            let isolated = v & 1 != 0;
            self.enter(c)?;
            if isolated {
                // All the op's regions, in one IR section (bytecode 2 and later), numbering
                // their values afresh.
                let mut inner = Scope::default();
                let mut rc;
                let rcur = if self.version >= 2 {
                    let id = c.byte()?;
                    if id & 0x7f != 4 {
                        return c.fail("an isolated region outside an IR section");
                    }
                    let len = c.varint()?;
                    if id & 0x80 != 0 {
                        return unsupported("an aligned IR section");
                    }
                    let base = c.offset();
                    rc = Cur::new(c.bytes(len)?, base);
                    &mut rc
                } else {
                    &mut *c
                };
                for _ in 0..n {
                    regions.push(self.region(rcur, &mut inner)?);
                }
            } else {
                for _ in 0..n {
                    regions.push(self.region(c, scope)?);
                }
            }
            self.depth -= 1;
        }
        Ok(RawOp {
            name,
            attrs,
            results,
            result_types,
            operands,
            operand_types,
            successors,
            regions,
            loc,
        })
    }

    fn entry_cur(&self, e: &Entry) -> Cur<'a> {
        Cur::new(
            &self.attr_data[e.start..e.end],
            self.attr_base.saturating_add(e.start),
        )
    }

    fn loc_at(&mut self, i: u64, c: &Cur<'_>) -> R<Location> {
        // A location is diagnostics only: one this reader cannot decode reads as unknown.
        match self.attr_at(i, c) {
            Ok(V::Loc(l)) => Ok(l),
            Ok(_) | Err(BytecodeError::Unsupported { .. }) => Ok(Location::Unknown),
            Err(e) => Err(e),
        }
    }

    fn attr_at(&mut self, i: u64, c: &Cur<'_>) -> R<V> {
        self.cached(
            i,
            c,
            "attribute",
            |r| &mut r.attr_cache,
            Self::decode_attr,
            weigh_attr,
        )
    }

    fn type_at(&mut self, i: u64, c: &Cur<'_>) -> R<Type> {
        self.cached(
            i,
            c,
            "type",
            |r| &mut r.type_cache,
            Self::decode_type,
            weigh_type,
        )
    }

    /// Entry `i` of a lazily decoded table (attributes or types): decoded once (nesting
    /// counted), its weight charged to the decoding budget at every use.
    fn cached<T: Clone>(
        &mut self,
        i: u64,
        c: &Cur<'_>,
        what: &str,
        cache: fn(&mut Self) -> &mut Cache<T>,
        decode: fn(&mut Self, usize) -> R<T>,
        weigh: fn(&T) -> u64,
    ) -> R<T> {
        let len = cache(self).len();
        let Some(idx) = usize::try_from(i).ok().filter(|&i| i < len) else {
            return c.fail(format!("{what} index {i} out of range"));
        };
        if let Some((v, w)) = &cache(self)[idx] {
            let (v, w) = (v.clone(), *w);
            self.spend(w)?;
            return Ok(v);
        }
        self.enter(c)?;
        let r = decode(self, idx);
        self.depth -= 1;
        let v = r?;
        let w = weigh(&v);
        self.spend(w)?;
        cache(self)[idx] = Some((v.clone(), w));
        Ok(v)
    }

    fn string(&self, c: &mut Cur<'_>) -> R<String> {
        let i = c.index(self.strings.len(), "string")?;
        Ok(self.strings[i].to_string())
    }

    fn str_attr(&mut self, c: &mut Cur<'_>) -> R<String> {
        let i = c.varint()?;
        match self.attr_at(i, c)? {
            V::Str(s) => Ok(s),
            _ => c.fail("a string attribute expected"),
        }
    }

    fn decode_attr(&mut self, idx: usize) -> R<V> {
        let e = &self.attrs[idx];
        let dialect = self.dialects[e.dialect];
        let custom = e.custom;
        let mut c = self.entry_cur(e);
        if !custom {
            return Ok(V::Text(c.cstr()?.to_string()));
        }
        match dialect {
            "builtin" => self.builtin_attr(&mut c),
            "vhlo" => self.vhlo_attr(&mut c),
            // Another dialect's own encoding (Shardy's `sdy.sharding_rule` on a custom call):
            // kept as an opaque placeholder, which the importer ignores where the attribute
            // is discardable and refuses, naming it, where it matters.
            d => Ok(V::Text(format!("#{d}<binary attribute>"))),
        }
    }

    fn decode_type(&mut self, idx: usize) -> R<Type> {
        let e = &self.types[idx];
        let dialect = self.dialects[e.dialect];
        let custom = e.custom;
        let mut c = self.entry_cur(e);
        if !custom {
            return Ok(Type::Opaque(c.cstr()?.to_string()));
        }
        match dialect {
            "builtin" => self.builtin_type(&mut c),
            "vhlo" => self.vhlo_type(&mut c),
            d => unsupported(format!("a type of dialect `{d}`")),
        }
    }

    /// A count, then that many indices, each read with `at` (attributes, types, locations).
    fn list<T>(&mut self, c: &mut Cur<'_>, at: fn(&mut Self, u64, &Cur<'_>) -> R<T>) -> R<Vec<T>> {
        let n = c.count()?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let i = c.varint()?;
            out.push(at(self, i, c)?);
        }
        Ok(out)
    }

    fn attr_list(&mut self, c: &mut Cur<'_>) -> R<Vec<V>> {
        self.list(c, Self::attr_at)
    }

    fn type_list(&mut self, c: &mut Cur<'_>) -> R<Vec<Type>> {
        self.list(c, Self::type_at)
    }

    fn loc_list(&mut self, c: &mut Cur<'_>) -> R<Vec<Location>> {
        self.list(c, Self::loc_at)
    }

    fn builtin_attr(&mut self, c: &mut Cur<'_>) -> R<V> {
        let code = c.varint()?;
        Ok(match code {
            0 => V::Array(self.attr_list(c)?),
            1 => {
                let n = c.count()?;
                let mut out = Vec::with_capacity(n);
                for _ in 0..n {
                    let k = c.varint()?;
                    let k = self.attr_at(k, c)?;
                    let v = c.varint()?;
                    out.push((k, self.attr_at(v, c)?));
                }
                V::Dict(out)
            }
            2 => V::Str(self.string(c)?),
            3 => {
                let s = self.string(c)?;
                let t = c.varint()?;
                self.type_at(t, c)?;
                V::Str(s)
            }
            4 => V::Symbol(vec![self.str_attr(c)?]),
            5 => {
                let mut path = vec![self.str_attr(c)?];
                for v in self.attr_list(c)? {
                    match v {
                        V::Symbol(s) => path.extend(s),
                        _ => return c.fail("a nested symbol reference expected"),
                    }
                }
                V::Symbol(path)
            }
            6 => {
                let t = c.varint()?;
                V::Type(self.type_at(t, c)?)
            }
            7 => V::Unit,
            8 => {
                let t = c.varint()?;
                let ty = self.type_at(t, c)?;
                let value = int_value(c, &ty)?;
                if ty
                    == Type::Scalar(ElementType::Int {
                        width: 1,
                        signed: None,
                    })
                {
                    V::Bool(value != 0)
                } else {
                    V::Int { value, ty }
                }
            }
            9 => {
                let t = c.varint()?;
                let ty = self.type_at(t, c)?;
                V::Float {
                    value: float_value(c, &ty)?,
                    ty,
                }
            }
            10 => {
                let a = c.varint()?;
                let callee = self.loc_at(a, c)?;
                let b = c.varint()?;
                let caller = self.loc_at(b, c)?;
                V::Loc(Location::CallSite {
                    callee: Box::new(callee),
                    caller: Box::new(caller),
                })
            }
            11 => {
                let file = self.str_attr(c)?;
                let line = c.varint()?;
                let col = c.varint()?;
                V::Loc(Location::File {
                    file,
                    line: u32::try_from(line).unwrap_or(u32::MAX),
                    col: u32::try_from(col).unwrap_or(u32::MAX),
                    end: None,
                })
            }
            12 | 13 => {
                let locs = self.loc_list(c)?;
                if code == 13 {
                    c.varint()?;
                }
                V::Loc(Location::Fused {
                    metadata: None,
                    locs,
                })
            }
            14 => {
                let name = self.str_attr(c)?;
                let child = c.varint()?;
                let child = self.loc_at(child, c)?;
                V::Loc(Location::Name {
                    name,
                    child: (child != Location::Unknown).then(|| Box::new(child)),
                })
            }
            15 => V::Loc(Location::Unknown),
            22 => {
                let file = self.str_attr(c)?;
                let n = c.count()?;
                let mut raw = vec![];
                for _ in 0..n.min(4) {
                    raw.push(u32::try_from(c.varint()?).unwrap_or(u32::MAX));
                }
                let at = |i: usize| raw.get(i).copied().unwrap_or(0);
                let end = match raw.len() {
                    3 => Some((None, at(2))),
                    4 => Some((Some(at(2)), at(3))),
                    _ => None,
                };
                V::Loc(Location::File {
                    file,
                    line: at(0),
                    col: at(1),
                    end,
                })
            }
            _ => return unsupported(format!("builtin attribute code {code}")),
        })
    }

    fn builtin_type(&mut self, c: &mut Cur<'_>) -> R<Type> {
        let code = c.varint()?;
        Ok(match code {
            0 => {
                let v = c.varint()?;
                let width = u16::try_from(v >> 2).unwrap_or(u16::MAX);
                let signed = match v & 3 {
                    0 => None,
                    1 => Some(true),
                    _ => Some(false),
                };
                Type::Scalar(ElementType::Int { width, signed })
            }
            1 => Type::Scalar(ElementType::Index),
            2 => {
                let inputs = self.type_list(c)?;
                let results = self.type_list(c)?;
                Type::Function { inputs, results }
            }
            3 => Type::Scalar(ElementType::BF16),
            4 => Type::Scalar(ElementType::F16),
            5 => Type::Scalar(ElementType::F32),
            6 => Type::Scalar(ElementType::F64),
            12 => Type::None,
            13 => self.tensor(c, false)?,
            14 => self.tensor(c, true)?,
            15 => Type::Tuple(self.type_list(c)?),
            _ => return unsupported(format!("builtin type code {code}")),
        })
    }

    fn tensor(&mut self, c: &mut Cur<'_>, encoded: bool) -> R<Type> {
        let encoding = if encoded {
            let i = c.varint()?;
            Some(Box::new(to_text_attr(self.attr_at(i, c)?)))
        } else {
            None
        };
        let n = c.count()?;
        let mut dims = Vec::with_capacity(n);
        for _ in 0..n {
            let d = c.svarint()?;
            dims.push(if d < 0 {
                Dim::Dynamic
            } else {
                Dim::Static(d as u64)
            });
        }
        let t = c.varint()?;
        let Type::Scalar(elem) = self.type_at(t, c)? else {
            return unsupported("a tensor whose element type is not a scalar type");
        };
        Ok(Type::Tensor {
            dims: Some(dims),
            elem,
            encoding,
        })
    }

    fn vhlo_type(&mut self, c: &mut Cur<'_>) -> R<Type> {
        use ElementType as E;
        let code = c.varint()?;
        let int = |width, signed| Type::Scalar(E::Int { width, signed });
        let narrow = |n| Type::Scalar(E::Narrow(n));
        Ok(match code {
            0 => int(1, None),
            1 => {
                let t = c.varint()?;
                match self.type_at(t, c)? {
                    Type::Scalar(E::F32) => Type::Scalar(E::Complex(ComplexOf::F32)),
                    Type::Scalar(E::F64) => Type::Scalar(E::Complex(ComplexOf::F64)),
                    _ => return unsupported("a complex type of other than f32 or f64"),
                }
            }
            2 => Type::Scalar(E::BF16),
            3 => Type::Scalar(E::F16),
            4 => Type::Scalar(E::F32),
            5 => Type::Scalar(E::F64),
            6 => narrow(NarrowFloat::F8E4M3FN),
            7 => narrow(NarrowFloat::F8E5M2),
            8 => {
                let inputs = self.type_list(c)?;
                let results = self.type_list(c)?;
                Type::Function { inputs, results }
            }
            9 => Type::Scalar(E::Index),
            31 => int(2, None),
            10 => int(4, None),
            11 => int(8, None),
            12 => int(16, None),
            13 => int(32, None),
            14 => int(64, None),
            32 => int(2, Some(false)),
            15 => int(4, Some(false)),
            16 => int(8, Some(false)),
            17 => int(16, Some(false)),
            18 => int(32, Some(false)),
            19 => int(64, Some(false)),
            20 => self.tensor(c, false)?,
            21 => self.tensor(c, true)?,
            22 => Type::Token,
            23 => Type::Tuple(self.type_list(c)?),
            25 => {
                let t = c.varint()?;
                let Type::Scalar(elem) = self.type_at(t, c)? else {
                    return unsupported("an unranked tensor of a non-scalar type");
                };
                Type::Tensor {
                    dims: None,
                    elem,
                    encoding: None,
                }
            }
            27 => narrow(NarrowFloat::F8E4M3FNUZ),
            28 => narrow(NarrowFloat::F8E5M2FNUZ),
            29 => narrow(NarrowFloat::F8E4M3B11FNUZ),
            33 => Type::None,
            35 => narrow(NarrowFloat::F8E4M3),
            36 => narrow(NarrowFloat::F8E3M4),
            37 => narrow(NarrowFloat::F4E2M1FN),
            38 => narrow(NarrowFloat::F6E2M3FN),
            39 => narrow(NarrowFloat::F6E3M2FN),
            40 => narrow(NarrowFloat::F8E8M0FNU),
            24 | 30 => return unsupported("quantized types"),
            _ => return unsupported(format!("vhlo type code {code}")),
        })
    }

    fn vhlo_attr(&mut self, c: &mut Cur<'_>) -> R<V> {
        let code = c.varint()?;
        let enum_of = |c: &mut Cur<'_>, kind: &'static str, names: &[&'static str]| -> R<V> {
            let v = c.varint()?;
            match usize::try_from(v).ok().and_then(|i| names.get(i)) {
                Some(&value) if !value.is_empty() => Ok(V::Enum { kind, value }),
                _ => c.fail(format!("{kind} value {v}")),
            }
        };
        Ok(match code {
            1 => V::Array(self.attr_list(c)?),
            2 => V::Bool(c.varint()? != 0),
            3 => enum_of(
                c,
                "comparison_direction",
                &["EQ", "NE", "GE", "GT", "LE", "LT"],
            )?,
            4 => enum_of(
                c,
                "comparison_type",
                &["NOTYPE", "FLOAT", "TOTALORDER", "SIGNED", "UNSIGNED"],
            )?,
            5 => enum_of(
                c,
                "api_version",
                &[
                    "API_VERSION_UNSPECIFIED",
                    "API_VERSION_ORIGINAL",
                    "API_VERSION_STATUS_RETURNING",
                    "API_VERSION_STATUS_RETURNING_UNIFIED",
                    "API_VERSION_TYPED_FFI",
                ],
            )?,
            6 => {
                let n = c.count()?;
                let mut out = Vec::with_capacity(n);
                for _ in 0..n {
                    let k = c.varint()?;
                    let k = self.attr_at(k, c)?;
                    let v = c.varint()?;
                    out.push((k, self.attr_at(v, c)?));
                }
                V::Dict(out)
            }
            7 => enum_of(c, "fft_type", &["FFT", "IFFT", "RFFT", "IRFFT"])?,
            8 => {
                let t = c.varint()?;
                let ty = self.type_at(t, c)?;
                V::Float {
                    value: float_value(c, &ty)?,
                    ty,
                }
            }
            9 => {
                let t = c.varint()?;
                let ty = self.type_at(t, c)?;
                V::Int {
                    value: int_value(c, &ty)?,
                    ty,
                }
            }
            10 => {
                let output_tuple_indices = svarints(c)?;
                let operand_index = c.svarint()?;
                let operand_tuple_indices = svarints(c)?;
                V::OutputOperandAlias {
                    output_tuple_indices,
                    operand_index,
                    operand_tuple_indices,
                }
            }
            11 => enum_of(c, "precision", &["DEFAULT", "HIGH", "HIGHEST"])?,
            12 => enum_of(c, "rng_algorithm", &["DEFAULT", "THREE_FRY", "PHILOX"])?,
            13 => enum_of(c, "rng_distribution", &["", "UNIFORM", "NORMAL"])?,
            14 => V::Str(self.string(c)?),
            15 => {
                let t = c.varint()?;
                let ty = self.type_at(t, c)?;
                let len = c.varint()?;
                let blob = c.bytes(len)?;
                V::Tensor {
                    data: tensor_bytes(&ty, blob, c)?,
                    ty,
                }
            }
            16 => enum_of(
                c,
                "transpose",
                &["TRANSPOSE_INVALID", "NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"],
            )?,
            17 => {
                let t = c.varint()?;
                V::Type(self.type_at(t, c)?)
            }
            18 => V::TypeExtensions(svarints(c)?),
            19 => enum_of(
                c,
                "result_accuracy_mode",
                &["DEFAULT", "HIGHEST", "TOLERANCE"],
            )?,
            20 => {
                let atol = f64::from_bits(c.svarint()? as u64);
                let rtol = f64::from_bits(c.svarint()? as u64);
                let ulps = c.svarint()?;
                let m = c.varint()?;
                V::ResultAccuracy {
                    atol,
                    rtol,
                    ulps,
                    mode: Box::new(self.attr_at(m, c)?),
                }
            }
            _ => return unsupported(format!("vhlo attribute code {code}")),
        })
    }
}

/// The size of a decoded attribute: one per node, plus the bytes it holds.
fn weigh_attr(v: &V) -> u64 {
    let own = match v {
        V::Str(s) | V::Text(s) => s.len() as u64,
        V::Tensor { ty, data } => data.len() as u64 + weigh_type(ty),
        V::Array(items) => items.iter().map(weigh_attr).sum(),
        V::Dict(entries) => entries
            .iter()
            .map(|(k, v)| weigh_attr(k) + weigh_attr(v))
            .sum(),
        V::Int { ty, .. } | V::Float { ty, .. } | V::Type(ty) => weigh_type(ty),
        V::ResultAccuracy { mode, .. } => weigh_attr(mode),
        V::Symbol(p) => p.iter().map(|s| s.len() as u64).sum(),
        V::OutputOperandAlias {
            output_tuple_indices: a,
            operand_tuple_indices: b,
            ..
        } => (a.len() + b.len()) as u64,
        V::TypeExtensions(b) => b.len() as u64,
        V::Loc(_) | V::Unit | V::Bool(_) | V::Enum { .. } => 0,
    };
    own.saturating_add(1)
}

/// The size of a decoded type: one per node, plus its dimensions.
fn weigh_type(t: &Type) -> u64 {
    let own = match t {
        Type::Tensor { dims, .. } => dims.as_ref().map_or(0, |d| d.len() as u64),
        Type::Tuple(items) => items.iter().map(weigh_type).sum(),
        Type::Function { inputs, results } => inputs.iter().chain(results).map(weigh_type).sum(),
        Type::Opaque(s) => s.len() as u64,
        _ => 0,
    };
    own.saturating_add(1)
}

fn svarints(c: &mut Cur<'_>) -> R<Vec<i64>> {
    let n = c.count()?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(c.svarint()?);
    }
    Ok(out)
}

fn use_list_orders(c: &mut Cur<'_>, values: usize) -> R<()> {
    let n = if values > 1 { c.count()? } else { 1 };
    for _ in 0..n {
        if values > 1 {
            c.varint()?;
        }
        let v = c.varint()?;
        let k = usize::try_from(v >> 1).unwrap_or(usize::MAX);
        if k > c.left() {
            return c.fail("use-list order longer than its data");
        }
        for _ in 0..k {
            c.varint()?;
        }
    }
    Ok(())
}

/// The width in bits of an integer or float scalar type.
fn bit_width(ty: &Type) -> Option<u32> {
    use ElementType as E;
    match ty {
        Type::Scalar(e) => Some(match e {
            E::Int { width, .. } => u32::from(*width),
            E::Index => 64,
            E::F16 | E::BF16 => 16,
            E::F32 => 32,
            E::F64 => 64,
            E::Narrow(n) => match n {
                NarrowFloat::F6E2M3FN | NarrowFloat::F6E3M2FN => 6,
                NarrowFloat::F4E2M1FN => 4,
                _ => 8,
            },
            E::Complex(_) => return None,
        }),
        _ => None,
    }
}

/// An APInt of the type's width: one byte up to 8 bits, a signed varint up to 64.
fn raw_int(c: &mut Cur<'_>, ty: &Type) -> R<(u64, u32)> {
    let Some(w) = bit_width(ty).filter(|&w| w > 0) else {
        return unsupported(format!("an integer or float value of type {ty:?}"));
    };
    if w <= 8 {
        Ok((u64::from(c.byte()?), w))
    } else if w <= 64 {
        Ok((c.svarint()? as u64, w))
    } else {
        unsupported(format!("a {w}-bit integer value"))
    }
}

fn int_value(c: &mut Cur<'_>, ty: &Type) -> R<i128> {
    let (bits, w) = raw_int(c, ty)?;
    let unsigned = matches!(
        ty,
        Type::Scalar(ElementType::Int {
            signed: Some(false),
            ..
        })
    ) || w == 1;
    let masked = if w >= 64 {
        bits
    } else {
        bits & ((1u64 << w) - 1)
    };
    if unsigned {
        Ok(i128::from(masked))
    } else {
        // Sign-extend from the type's width.
        let shift = 128 - w;
        Ok((i128::from(masked) << shift) >> shift)
    }
}

fn float_value(c: &mut Cur<'_>, ty: &Type) -> R<f64> {
    let (bits, _) = raw_int(c, ty)?;
    Ok(match ty {
        Type::Scalar(ElementType::F64) => f64::from_bits(bits),
        Type::Scalar(ElementType::F32) => f64::from(f32::from_bits(bits as u32)),
        Type::Scalar(ElementType::F16) => half_to_f64(bits as u16),
        Type::Scalar(ElementType::BF16) => f64::from(f32::from_bits((bits as u32) << 16)),
        _ => return unsupported(format!("a float attribute of type {ty:?}")),
    })
}

fn half_to_f64(h: u16) -> f64 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((h >> 10) & 0x1f);
    let man = f64::from(h & 0x3ff);
    match exp {
        0 => sign * man * 2f64.powi(-24),
        31 if man == 0.0 => sign * f64::INFINITY,
        31 => f64::NAN,
        e => sign * (1.0 + man / 1024.0) * 2f64.powi(e - 15),
    }
}

/// A tensor attribute's blob as element bytes: i1 tensors may be bit-packed (8 to a byte)
/// or a one-byte splat; others are kept as they are (a splat is one element).
fn tensor_bytes(ty: &Type, blob: &[u8], c: &Cur<'_>) -> R<Vec<u8>> {
    let Type::Tensor {
        dims: Some(dims),
        elem,
        ..
    } = ty
    else {
        return Ok(blob.to_vec());
    };
    let mut n: u64 = 1;
    for d in dims {
        let Dim::Static(d) = d else {
            return c.fail("a tensor constant of dynamic shape");
        };
        n = n.saturating_mul(*d);
    }
    if n > MAX_TENSOR_BYTES {
        return Err(BytecodeError::TooLarge {
            what: format!("a tensor constant of {n} elements"),
            limit: MAX_TENSOR_BYTES,
        });
    }
    if n == 0 {
        // A splat of no elements (MLIR writes one element for any splat).
        return Ok(vec![]);
    }
    let is_bool = *elem
        == ElementType::Int {
            width: 1,
            signed: None,
        };
    if is_bool && n > 1 {
        let packed = n.div_ceil(8);
        if blob.len() as u64 == packed && blob.len() as u64 != n {
            let n = n as usize;
            return Ok((0..n)
                .map(|i| u8::from(blob[i / 8] & (1 << (i % 8)) != 0))
                .collect());
        }
        if blob.len() == 1 {
            return Ok(vec![u8::from(blob[0] != 0)]);
        }
    }
    Ok(blob.to_vec())
}

/// An attribute as MLIR text, for the places the tree keeps text (a tensor's encoding).
fn to_text_attr(v: V) -> crate::ast::Attr {
    match v {
        V::Text(t) => crate::ast::Attr::Opaque(t),
        other => crate::ast::Attr::Opaque(format!("{other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_decode() {
        let mut c = Cur::new(&[0x0d, 0x02, 0x02, 0x00, 1, 0, 0, 0, 0, 0, 0, 0], 0);
        assert_eq!(c.varint(), Ok(6));
        assert_eq!(c.varint(), Ok(128));
        assert_eq!(c.varint(), Ok(1));
        let mut c = Cur::new(&[0x05, 0x03], 0);
        assert_eq!(c.svarint(), Ok(1));
        assert_eq!(c.svarint(), Ok(-1));
        assert!(Cur::new(&[0x02], 0).varint().is_err());
    }
}
