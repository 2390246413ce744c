//! What a handler takes ([`HandlerSignature`], with the attribute types it reads), checked
//! against every call at load.

use crate::ir::{AttrArray, AttrValue, CustomCallThunk};
use std::fmt;

/// An attribute type a handler reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttrType {
    Bool,
    I32,
    I64,
    F32,
    F64,
    Str,
    BoolArray,
    I32Array,
    I64Array,
    F32Array,
    F64Array,
    StrArray,
    Dict,
}

impl AttrType {
    /// The type of a value.
    pub fn of(v: &AttrValue) -> AttrType {
        match v {
            AttrValue::Bool(_) => AttrType::Bool,
            AttrValue::I32(_) => AttrType::I32,
            AttrValue::I64(_) => AttrType::I64,
            AttrValue::F32(_) => AttrType::F32,
            AttrValue::F64(_) => AttrType::F64,
            AttrValue::Str(_) => AttrType::Str,
            AttrValue::Array(AttrArray::Bool(_)) => AttrType::BoolArray,
            AttrValue::Array(AttrArray::I32(_)) => AttrType::I32Array,
            AttrValue::Array(AttrArray::I64(_)) => AttrType::I64Array,
            AttrValue::Array(AttrArray::F32(_)) => AttrType::F32Array,
            AttrValue::Array(AttrArray::F64(_)) => AttrType::F64Array,
            AttrValue::Array(AttrArray::Str(_)) => AttrType::StrArray,
            AttrValue::Dict(_) => AttrType::Dict,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            AttrType::Bool => "bool",
            AttrType::I32 => "i32",
            AttrType::I64 => "i64",
            AttrType::F32 => "f32",
            AttrType::F64 => "f64",
            AttrType::Str => "string",
            AttrType::BoolArray => "array<bool>",
            AttrType::I32Array => "array<i32>",
            AttrType::I64Array => "array<i64>",
            AttrType::F32Array => "array<f32>",
            AttrType::F64Array => "array<f64>",
            AttrType::StrArray => "array<string>",
            AttrType::Dict => "dict",
        }
    }
}

impl fmt::Display for AttrType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a handler takes, checked for every call at load. `None` means anything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HandlerSignature {
    pub operands: Option<usize>,
    pub results: Option<usize>,
    /// The attributes the handler reads, each required with its type; a call giving another
    /// attribute is refused too (a misspelt name would otherwise be ignored).
    pub attributes: Option<Vec<(String, AttrType)>>,
}

impl HandlerSignature {
    /// Checks `c` against this signature; the message names the attribute or list.
    pub fn check(&self, c: &CustomCallThunk) -> Result<(), String> {
        for (what, want, have) in [
            ("operands", self.operands, c.operands.len()),
            ("results", self.results, c.results.len()),
        ] {
            if let Some(n) = want
                && n != have
            {
                return Err(format!("the handler takes {n} {what}, the call has {have}"));
            }
        }
        let Some(attrs) = &self.attributes else {
            return Ok(());
        };
        for (name, ty) in attrs {
            match c.attributes.get(name) {
                None => return Err(format!("attribute `{name}` ({ty}) is missing")),
                Some(v) if AttrType::of(v) != *ty => {
                    return Err(format!(
                        "attribute `{name}` is {}, the handler reads {ty}",
                        v.type_name()
                    ));
                }
                Some(_) => {}
            }
        }
        if let Some((name, _)) = c
            .attributes
            .0
            .iter()
            .find(|(n, _)| !attrs.iter().any(|(a, _)| a == n))
        {
            let reads: Vec<&str> = attrs.iter().map(|(n, _)| n.as_str()).collect();
            return Err(format!(
                "attribute `{name}` is not one the handler reads (it reads: {})",
                if reads.is_empty() {
                    "none".to_string()
                } else {
                    reads.join(", ")
                }
            ));
        }
        Ok(())
    }
}
