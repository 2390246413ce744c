//! Host modules: the standard kernel library and registered host kernel libraries.

use crate::backend::{KernelHandle, LoadedModule};
use crate::error::{Error, Result};
use crate::kernels::{HostKernel, KernelLibrary};
use std::any::Any;
use std::sync::Arc;

/// A host kernel ready to run.
#[derive(Debug)]
pub struct HostKernelHandle {
    pub(crate) kernel: HostKernel,
}

impl KernelHandle for HostKernelHandle {
    fn name(&self) -> &str {
        &self.kernel.signature.name
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A module resolved to a host kernel library.
pub struct HostModule {
    pub(crate) name: String,
    pub(crate) image: String,
    pub(crate) library: Arc<KernelLibrary>,
    pub(crate) library_ref: Option<&'static KernelLibrary>,
}

impl HostModule {
    fn lib(&self) -> &KernelLibrary {
        match self.library_ref {
            Some(l) => l,
            None => &self.library,
        }
    }
}

impl LoadedModule for HostModule {
    fn name(&self) -> &str {
        &self.name
    }
    fn image(&self) -> String {
        self.image.clone()
    }
    fn kernel(&self, name: &str) -> Result<Arc<dyn KernelHandle>> {
        let lib = self.lib();
        match lib.get(name) {
            Some(k) => Ok(Arc::new(HostKernelHandle { kernel: k.clone() })),
            None => Err(Error::Module {
                module: self.name.clone(),
                message: format!(
                    "kernel `{name}` not found in host library `{}` ({} kernels)",
                    lib.name,
                    lib.len()
                ),
            }),
        }
    }
}
