//! Registering collective memory with one communicator ([`Communicator::register`]): a
//! symmetric window where the library has windows and the memory came from its allocator,
//! else a user buffer, else nothing; [`NcclRegistration`] deregisters when dropped (skipped,
//! with a debug line, once the communicator was aborted: the library freed it then).
//!
//! [`Communicator::register`]: xthunk_core::collectives::Communicator::register

use super::NcclCommunicator;
use crate::sys;
use std::ffi::c_void;
use std::sync::Arc;
use xthunk_core::Result;
use xthunk_core::backend::DevicePtr;
use xthunk_core::collectives::{Communicator, Registration, RegistrationKind};

/// The library's handle of one registration.
enum Handle {
    Window(sys::ncclWindow_t),
    UserBuffer(*mut c_void),
}

/// One buffer registered with one communicator; deregistered when dropped.
pub struct NcclRegistration {
    comm: Arc<NcclCommunicator>,
    handle: Handle,
}

// SAFETY: the handles are opaque library pointers, used only through the communicator's
// lock (as the communicator itself is).
unsafe impl Send for NcclRegistration {}
// SAFETY: as above: nothing is reached through `&self` but the kind.
unsafe impl Sync for NcclRegistration {}

impl Registration for NcclRegistration {
    fn kind(&self) -> RegistrationKind {
        match self.handle {
            Handle::Window(_) => RegistrationKind::Window,
            Handle::UserBuffer(_) => RegistrationKind::UserBuffer,
        }
    }
}

impl Drop for NcclRegistration {
    fn drop(&mut self) {
        let api = &self.comm.lib.api;
        let r = match self.handle {
            Handle::Window(w) => match api.ncclCommWindowDeregister {
                // SAFETY: `w` was registered on this live communicator and is deregistered
                // once, here.
                Some(f) => self
                    .comm
                    .call("ncclCommWindowDeregister", |c| unsafe { f(c, w) }),
                None => Ok(()),
            },
            Handle::UserBuffer(h) => match api.ncclCommDeregister {
                // SAFETY: as above, for a user-buffer handle.
                Some(f) => self.comm.call("ncclCommDeregister", |c| unsafe { f(c, h) }),
                None => Ok(()),
            },
        };
        if let Err(e) = r {
            tracing::debug!(
                "deregistering collective memory on {}: {e}",
                self.comm.describe()
            );
        }
    }
}

impl NcclCommunicator {
    /// [`Communicator::register`] for NCCL/RCCL (see the module documentation).
    pub(super) fn register_memory(
        self: Arc<Self>,
        ptr: DevicePtr,
        bytes: u64,
        from_library: bool,
    ) -> Result<Option<Box<dyn Registration>>> {
        let lib = self.lib.clone();
        let features = lib.memory_features();
        let buff = ptr.0 as *mut c_void;
        let size = usize::try_from(bytes)
            .map_err(|_| xthunk_core::Error::InvalidArgument(format!("{bytes} bytes")))?;
        if features.windows
            && from_library
            && ptr.0.is_multiple_of(sys::NCCL_WIN_REQUIRED_ALIGNMENT)
            && let Some(f) = lib.api.ncclCommWindowRegister
        {
            let mut win: sys::ncclWindow_t = std::ptr::null_mut();
            // SAFETY: `buff` is `size` bytes of live memory from the library's allocator;
            // writes one window handle.
            self.call("ncclCommWindowRegister", |c| unsafe {
                f(c, buff, size, &mut win, sys::NCCL_WIN_COLL_SYMMETRIC)
            })?;
            if !win.is_null() {
                return Ok(Some(Box::new(NcclRegistration {
                    comm: self,
                    handle: Handle::Window(win),
                })));
            }
            lib.windows_unusable();
        }
        if features.user_buffers
            && let Some(f) = lib.api.ncclCommRegister
        {
            let mut h: *mut c_void = std::ptr::null_mut();
            // SAFETY: `buff` is `size` bytes of live device memory; writes one handle.
            self.call("ncclCommRegister", |c| unsafe { f(c, buff, size, &mut h) })?;
            return Ok(Some(Box::new(NcclRegistration {
                comm: self,
                handle: Handle::UserBuffer(h),
            })));
        }
        Ok(None)
    }
}
