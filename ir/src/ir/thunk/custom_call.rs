//! The `CustomCall` thunk: a call of a handler registered under a target name (a framework's
//! own library call), with typed buffers (slice, element type, dims) and typed attributes,
//! and its validation.

use super::kind::{Checker, Nested, ThunkKind, TraceCost};
use crate::ir::error::{ValidationError, err};
use crate::ir::{Access, BufferUse, DType, Slice, ThunkPath};
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;
use std::fmt;

/// The version of the custom-call interface (the typed FFI) this build implements: the
/// version a program's custom calls declare, the version of `include/xthunk_ffi.h`'s call
/// frame, and the version a C plugin's registration function must report.
pub const CUSTOM_CALL_API_VERSION: u32 = 1;

/// The deepest nesting of attribute dictionaries a program may use.
pub const MAX_ATTRIBUTE_DEPTH: usize = 8;

/// The most dims one custom-call buffer may have.
pub const MAX_CUSTOM_CALL_RANK: usize = 16;

/// An array attribute: homogeneous, of one scalar type.
#[derive(Clone, Debug, PartialEq)]
pub enum AttrArray {
    Bool(Vec<bool>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Str(Vec<String>),
}

impl AttrArray {
    pub fn len(&self) -> usize {
        match self {
            AttrArray::Bool(v) => v.len(),
            AttrArray::I32(v) => v.len(),
            AttrArray::I64(v) => v.len(),
            AttrArray::F32(v) => v.len(),
            AttrArray::F64(v) => v.len(),
            AttrArray::Str(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The element type's name, e.g. `i64`.
    pub const fn element_type(&self) -> &'static str {
        match self {
            AttrArray::Bool(_) => "bool",
            AttrArray::I32(_) => "i32",
            AttrArray::I64(_) => "i64",
            AttrArray::F32(_) => "f32",
            AttrArray::F64(_) => "f64",
            AttrArray::Str(_) => "string",
        }
    }
}

/// A typed attribute value.
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    Bool(bool),
    I32(i32),
    I64(i64),
    F32(f32),
    F64(f64),
    Str(String),
    Array(AttrArray),
    Dict(Attributes),
}

impl AttrValue {
    /// The type's name as errors and listings show it: `bool`, `i32`, `i64`, `f32`, `f64`,
    /// `string`, `array<i64>`, `dict`.
    pub fn type_name(&self) -> String {
        match self {
            AttrValue::Bool(_) => "bool".into(),
            AttrValue::I32(_) => "i32".into(),
            AttrValue::I64(_) => "i64".into(),
            AttrValue::F32(_) => "f32".into(),
            AttrValue::F64(_) => "f64".into(),
            AttrValue::Str(_) => "string".into(),
            AttrValue::Array(a) => format!("array<{}>", a.element_type()),
            AttrValue::Dict(_) => "dict".into(),
        }
    }
}

impl fmt::Display for AttrValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn list<T: fmt::Debug>(f: &mut fmt::Formatter<'_>, v: &[T]) -> fmt::Result {
            write!(f, "{v:?}")
        }
        match self {
            AttrValue::Bool(v) => write!(f, "{v}"),
            AttrValue::I32(v) => write!(f, "i32:{v}"),
            AttrValue::I64(v) => write!(f, "i64:{v}"),
            AttrValue::F32(v) => write!(f, "f32:{v}"),
            AttrValue::F64(v) => write!(f, "f64:{v}"),
            AttrValue::Str(v) => write!(f, "{v:?}"),
            AttrValue::Array(a) => {
                write!(f, "{}", a.element_type())?;
                match a {
                    AttrArray::Bool(v) => list(f, v),
                    AttrArray::I32(v) => list(f, v),
                    AttrArray::I64(v) => list(f, v),
                    AttrArray::F32(v) => list(f, v),
                    AttrArray::F64(v) => list(f, v),
                    AttrArray::Str(v) => list(f, v),
                }
            }
            AttrValue::Dict(d) => write!(f, "{d}"),
        }
    }
}

/// Named attributes in program order; names are unique (checked by validation).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Attributes(pub Vec<(String, AttrValue)>);

impl Attributes {
    pub fn get(&self, name: &str) -> Option<&AttrValue> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Depth of dictionary nesting (0 without dictionaries).
    pub fn depth(&self) -> usize {
        self.0
            .iter()
            .map(|(_, v)| match v {
                AttrValue::Dict(d) => 1 + d.depth(),
                _ => 0,
            })
            .max()
            .unwrap_or(0)
    }
}

impl fmt::Display for Attributes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, (n, v)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{n}={v}")?;
        }
        f.write_str("}")
    }
}

/// One operand or result of a custom call: a slice holding a dense row-major array.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CustomCallBuffer {
    pub slice: Slice,
    pub dtype: DType,
    /// Empty for a scalar; the product times the element size must equal the slice's size.
    pub dims: Vec<u64>,
}

impl CustomCallBuffer {
    pub fn new(slice: Slice, dtype: DType, dims: &[u64]) -> Self {
        CustomCallBuffer {
            slice,
            dtype,
            dims: dims.to_vec(),
        }
    }

    /// Elements, or `None` on overflow.
    pub fn element_count(&self) -> Option<u64> {
        self.dims.iter().try_fold(1u64, |a, d| a.checked_mul(*d))
    }

    /// `f32[4,2] %3[0..+32]`.
    pub fn describe(&self) -> String {
        let dims: Vec<String> = self.dims.iter().map(u64::to_string).collect();
        format!("{}[{}] {}", self.dtype, dims.join(","), self.slice)
    }
}

/// `CustomCall` thunk: calls the handler registered for `target` on the device's backend.
#[derive(Clone, Debug, PartialEq)]
pub struct CustomCallThunk {
    /// The handler's name in the backend's registry, e.g. `myfw.scaled_add`.
    pub target: String,
    /// Read by the handler.
    pub operands: Vec<CustomCallBuffer>,
    /// Written by the handler (they must not overlap each other or an operand).
    pub results: Vec<CustomCallBuffer>,
    pub attributes: Attributes,
    /// The custom-call interface version the call was written for
    /// ([`CUSTOM_CALL_API_VERSION`]).
    pub api_version: u32,
    /// The call has effects beyond its results (I/O, global state): side-effecting calls keep
    /// their program order among themselves.
    pub side_effect: bool,
}

impl CustomCallThunk {
    /// A call of `target` at the current API version, without buffers or attributes.
    pub fn new(target: impl Into<String>) -> Self {
        CustomCallThunk {
            target: target.into(),
            operands: vec![],
            results: vec![],
            attributes: Attributes::default(),
            api_version: CUSTOM_CALL_API_VERSION,
            side_effect: false,
        }
    }

    /// Adds an operand.
    pub fn operand(mut self, b: CustomCallBuffer) -> Self {
        self.operands.push(b);
        self
    }

    /// Adds a result.
    pub fn result(mut self, b: CustomCallBuffer) -> Self {
        self.results.push(b);
        self
    }

    /// Adds an attribute.
    pub fn attr(mut self, name: impl Into<String>, v: impl Into<AttrValue>) -> Self {
        self.attributes.0.push((name.into(), v.into()));
        self
    }

    /// Marks the call side-effecting.
    pub fn with_side_effect(mut self) -> Self {
        self.side_effect = true;
        self
    }

    /// Operands read, results written.
    pub fn buffer_uses(&self) -> Vec<BufferUse> {
        let op = self.operands.iter().map(|b| BufferUse {
            slice: b.slice,
            access: Access::Read,
        });
        let res = self.results.iter().map(|b| BufferUse {
            slice: b.slice,
            access: Access::Write,
        });
        op.chain(res).collect()
    }
}

/// Validates a custom call: the target, the API version, every buffer (inside its allocation
/// through `slice`, which is the verifier's one slice check: `(slice, field, writes)`), dims
/// against sizes, no overlapping results, and the attributes (unique names, bounded nesting,
/// finite floats are not required: NaN and infinities are values a handler may want).
fn verify(
    c: &CustomCallThunk,
    path: &ThunkPath,
    slice: &dyn Fn(&Slice, &str, bool) -> Result<(), ValidationError>,
) -> Result<(), ValidationError> {
    if c.target.is_empty() {
        return Err(err(path, "target", "empty custom-call target"));
    }
    if c.target.len() > 256 || c.target.chars().any(|ch| ch.is_control()) {
        return Err(err(
            path,
            "target",
            "a target name is at most 256 bytes without control characters",
        ));
    }
    if c.api_version != CUSTOM_CALL_API_VERSION {
        return Err(err(
            path,
            "api_version",
            format!(
                "custom call `{}` declares API version {} (this build implements version \
                 {CUSTOM_CALL_API_VERSION})",
                c.target, c.api_version
            ),
        ));
    }
    for (list, bufs, writes) in [
        ("operands", &c.operands, false),
        ("results", &c.results, true),
    ] {
        for (i, b) in bufs.iter().enumerate() {
            let f = format!("{list}[{i}]");
            slice(&b.slice, &f, writes)?;
            if b.dims.len() > MAX_CUSTOM_CALL_RANK {
                return Err(err(
                    path,
                    format!("{f}.dims"),
                    format!("{} dims (at most {MAX_CUSTOM_CALL_RANK})", b.dims.len()),
                ));
            }
            let bytes = b
                .element_count()
                .and_then(|n| n.checked_mul(b.dtype.size() as u64));
            if bytes != Some(b.slice.size) {
                return Err(err(
                    path,
                    format!("{f}.dims"),
                    format!(
                        "{:?} x {} is {} bytes, the slice {} has {}",
                        b.dims,
                        b.dtype,
                        bytes
                            .map(|n| n.to_string())
                            .unwrap_or_else(|| "overflowing".into()),
                        b.slice,
                        b.slice.size
                    ),
                ));
            }
            if b.slice.offset % b.dtype.size() as u64 != 0 {
                return Err(err(
                    path,
                    format!("{f}.slice"),
                    format!(
                        "offset {} is not aligned to the {}-byte {}",
                        b.slice.offset,
                        b.dtype.size(),
                        b.dtype
                    ),
                ));
            }
        }
    }
    for (i, r) in c.results.iter().enumerate() {
        let clash = c
            .operands
            .iter()
            .map(|b| ("operand", b))
            .chain(c.results[..i].iter().map(|b| ("result", b)))
            .find(|(_, b)| b.slice.overlaps(&r.slice));
        if let Some((what, b)) = clash {
            return Err(err(
                path,
                format!("results[{i}]"),
                format!("{} overlaps the {what} {}", r.slice, b.slice),
            ));
        }
    }
    attributes(&c.attributes, path, "attributes", 1)
}

fn attributes(
    a: &Attributes,
    path: &ThunkPath,
    field: &str,
    depth: usize,
) -> Result<(), ValidationError> {
    if depth > MAX_ATTRIBUTE_DEPTH {
        return Err(err(
            path,
            field,
            format!("dictionaries nested deeper than {MAX_ATTRIBUTE_DEPTH}"),
        ));
    }
    let mut names = BTreeSet::new();
    for (name, v) in &a.0 {
        if name.is_empty() {
            return Err(err(path, field, "an attribute has an empty name"));
        }
        if !names.insert(name.as_str()) {
            return Err(err(
                path,
                format!("{field}.{name}"),
                "the attribute is given twice",
            ));
        }
        if let AttrValue::Dict(d) = v {
            attributes(d, path, &format!("{field}.{name}"), depth + 1)?;
        }
    }
    Ok(())
}

macro_rules! attr_from {
    ($t:ty, $scalar:ident, $array:ident) => {
        impl From<$t> for AttrValue {
            fn from(v: $t) -> Self {
                AttrValue::$scalar(v)
            }
        }
        impl From<Vec<$t>> for AttrValue {
            fn from(v: Vec<$t>) -> Self {
                AttrValue::Array(AttrArray::$array(v))
            }
        }
    };
}

attr_from!(bool, Bool, Bool);
attr_from!(i32, I32, I32);
attr_from!(i64, I64, I64);
attr_from!(f32, F32, F32);
attr_from!(f64, F64, F64);
attr_from!(String, Str, Str);

impl From<&str> for AttrValue {
    fn from(v: &str) -> Self {
        AttrValue::Str(v.to_string())
    }
}

impl From<Vec<&str>> for AttrValue {
    fn from(v: Vec<&str>) -> Self {
        AttrValue::Array(AttrArray::Str(v.into_iter().map(String::from).collect()))
    }
}

impl From<Attributes> for AttrValue {
    fn from(v: Attributes) -> Self {
        AttrValue::Dict(v)
    }
}

impl ThunkKind for CustomCallThunk {
    fn name(&self) -> &'static str {
        "custom_call"
    }

    fn buffer_uses(&self) -> Vec<BufferUse> {
        CustomCallThunk::buffer_uses(self)
    }

    fn validate(&self, cx: &mut dyn Checker, path: &ThunkPath) -> Result<(), ValidationError> {
        verify(self, path, &|s, f, w| cx.slice(s, path, f, w))
    }

    fn label(&self) -> String {
        format!("custom_call {}", self.target)
    }

    /// The call without its handlers (`xthunk inspect` adds what each registered handler
    /// does with it).
    fn describe(&self) -> String {
        let bufs = |l: &[CustomCallBuffer]| {
            l.iter()
                .map(|b| b.describe())
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "custom_call {} operands=[{}] results=[{}] attributes={}{}",
            self.target,
            bufs(&self.operands),
            bufs(&self.results),
            self.attributes,
            if self.side_effect { " side_effect" } else { "" },
        )
    }

    fn trace(&self, args: &mut Map<String, Value>) -> TraceCost {
        args.insert("target".into(), json!(self.target));
        let bytes = self
            .operands
            .iter()
            .chain(&self.results)
            .map(|b| b.slice.size)
            .fold(0u64, u64::saturating_add);
        TraceCost {
            bytes,
            ..TraceCost::default()
        }
    }
}

impl<T> Nested<T> for CustomCallThunk {}
