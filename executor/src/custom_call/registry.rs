//! The one custom-call registry: handlers by backend name (`host`, `cuda`, `rocm`), then by
//! target, shared by every backend and by every way in (Rust registration, C plugins); and
//! the checks done when a program is loaded (a handler for every call, each call matching
//! what its handler takes).

use super::errors::CustomCallError;
use super::handler::{Handler, Traits};
use crate::ir::{CustomCallThunk, ThunkPath};
use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

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
