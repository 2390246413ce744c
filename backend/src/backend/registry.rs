//! Choosing a backend at run time.

use super::{Backend, BackendInfo};
use crate::error::{Error, Result};
use std::sync::Arc;

/// What the user asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackendChoice {
    /// The first available of the registered backends, in registration order.
    Auto,
    /// Exactly this backend.
    Named(String),
}

/// The outcome of probing one backend.
#[derive(Debug)]
pub struct BackendStatus {
    pub name: &'static str,
    pub result: Result<BackendInfo>,
}

/// The backends compiled into this binary, in `auto` preference order.
#[derive(Default, Clone)]
pub struct BackendRegistry {
    backends: Vec<Arc<dyn Backend>>,
}

impl BackendRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn register(&mut self, backend: Arc<dyn Backend>) {
        self.backends.push(backend);
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.backends.iter().map(|b| b.name()).collect()
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Backend>> {
        self.backends.iter().find(|b| b.name() == name)
    }

    /// Probes every backend.
    pub fn probe_all(&self) -> Vec<BackendStatus> {
        self.backends
            .iter()
            .map(|b| BackendStatus {
                name: b.name(),
                result: b.probe(),
            })
            .collect()
    }

    /// Picks a backend. For `Auto`, the first one whose probe finds a device; the log says
    /// why the others were skipped. Returns the backend and the reasons others were skipped.
    pub fn select(&self, choice: &BackendChoice) -> Result<(Arc<dyn Backend>, Vec<String>)> {
        match choice {
            BackendChoice::Named(name) => {
                let Some(b) = self.get(name) else {
                    return Err(Error::Unavailable {
                        backend: name.clone(),
                        reason: format!(
                            "no such backend in this build (available: {})",
                            self.names().join(", ")
                        ),
                    });
                };
                let info = b.probe()?;
                if info.devices.is_empty() {
                    return Err(Error::Unavailable {
                        backend: name.clone(),
                        reason: "no device found".into(),
                    });
                }
                Ok((b.clone(), vec![]))
            }
            BackendChoice::Auto => {
                let mut skipped = vec![];
                for b in &self.backends {
                    match b.probe() {
                        Ok(info) if !info.devices.is_empty() => {
                            tracing::info!(
                                backend = b.name(),
                                "auto selected backend `{}`",
                                b.name()
                            );
                            for s in &skipped {
                                tracing::info!("auto skipped {s}");
                            }
                            return Ok((b.clone(), skipped));
                        }
                        Ok(_) => skipped.push(format!("{}: no device found", b.name())),
                        Err(e) => skipped.push(format!("{}: {e}", b.name())),
                    }
                }
                Err(Error::Unavailable {
                    backend: "auto".into(),
                    reason: format!("no backend has a device: {}", skipped.join("; ")),
                })
            }
        }
    }
}
