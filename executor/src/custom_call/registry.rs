//! The one custom-call registry: handlers by backend name (`host`, `cuda`, `rocm`), then by
//! target, shared by every backend and by every way in (Rust registration, C plugins); and
//! the checks done when a program is loaded (a handler for every call, each call matching
//! what its handler takes).

use super::{CustomCallError, Handler, Traits};
use crate::ir::{AttrArray, AttrValue, CustomCallThunk, ThunkPath};
use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

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
            if let Some(n) = want {
                if n != have {
                    return Err(format!("the handler takes {n} {what}, the call has {have}"));
                }
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

/// A registered handler and where it came from.
#[derive(Clone)]
struct Entry {
    handler: Arc<dyn Handler>,
    origin: String,
}

/// Handlers by backend name, then target.
#[derive(Default)]
pub struct Registry {
    backends: RwLock<BTreeMap<String, BTreeMap<String, Entry>>>,
}

/// The process's registry (what the executor resolves custom calls in).
pub fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(Registry::default)
}

impl Registry {
    /// Registers `handler` for `target` on `backend` (`host`, `cuda`, `rocm`); `origin` says
    /// where it comes from in listings (`rust`, a plugin's file). A target registered twice
    /// on one backend is refused.
    pub fn register(
        &self,
        backend: &str,
        target: &str,
        handler: Arc<dyn Handler>,
        origin: &str,
    ) -> Result<(), CustomCallError> {
        let mut g = self.backends.write();
        let targets = g.entry(backend.to_string()).or_default();
        if targets.contains_key(target) {
            return Err(CustomCallError::Duplicate {
                backend: backend.into(),
                target: target.into(),
            });
        }
        targets.insert(
            target.to_string(),
            Entry {
                handler,
                origin: origin.into(),
            },
        );
        Ok(())
    }

    /// Like [`Registry::register`], but a target already registered is left as it is
    /// (returns false then): for code that may run more than once in a process.
    pub fn register_once(
        &self,
        backend: &str,
        target: &str,
        handler: Arc<dyn Handler>,
        origin: &str,
    ) -> bool {
        self.register(backend, target, handler, origin).is_ok()
    }

    /// The handler for `target` on `backend`.
    pub fn get(&self, backend: &str, target: &str) -> Option<Arc<dyn Handler>> {
        let g = self.backends.read();
        g.get(backend)?.get(target).map(|e| e.handler.clone())
    }

    /// The registered targets of `backend`, sorted.
    pub fn targets(&self, backend: &str) -> Vec<String> {
        let g = self.backends.read();
        g.get(backend)
            .map(|t| t.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Every registration: `(backend, target, traits, origin)`, sorted.
    pub fn list(&self) -> Vec<(String, String, Traits, String)> {
        let g = self.backends.read();
        g.iter()
            .flat_map(|(b, t)| {
                t.iter().map(move |(name, e)| {
                    (
                        b.clone(),
                        name.clone(),
                        e.handler.traits(),
                        e.origin.clone(),
                    )
                })
            })
            .collect()
    }

    /// The handler of a call on `backend`, checked against the call (at load): a missing
    /// handler lists the targets registered there.
    pub fn resolve(
        &self,
        backend: &str,
        c: &CustomCallThunk,
        path: &ThunkPath,
    ) -> Result<Arc<dyn Handler>, CustomCallError> {
        let Some(h) = self.get(backend, &c.target) else {
            let t = self.targets(backend);
            return Err(CustomCallError::MissingHandler {
                path: path.clone(),
                target: c.target.clone(),
                backend: backend.into(),
                registered: if t.is_empty() {
                    "none".into()
                } else {
                    t.join(", ")
                },
            });
        };
        h.signature()
            .check(c)
            .map_err(|message| CustomCallError::Mismatch {
                path: path.clone(),
                target: c.target.clone(),
                message,
            })?;
        Ok(h)
    }
}
