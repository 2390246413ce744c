//! Collective memory through NCCL/RCCL: the library's allocator (`ncclMemAlloc` /
//! `ncclMemFree`, NCCL 2.19) as an [`ExternalAllocator`], and what the library lets xthunk do
//! with an executable's collective memory ([`MemoryFeatures`]): register it as a symmetric
//! window (`ncclCommWindowRegister` with `NCCL_WIN_COLL_SYMMETRIC`, NCCL 2.27; the memory
//! must come from `ncclMemAlloc`, 4096-byte aligned, at the same offset on every rank), else
//! as a user buffer (`ncclCommRegister`, 2.19), else not at all.
//!
//! Every call is an optional symbol of the table, `None` below the version that introduced it
//! (the loader's gates) or where the library lacks it; the features are decided per library
//! (NCCL and RCCL apart) and what is not used is logged once per library, with why. A window
//! the library reports as registered but hands back empty (a null `ncclWindow_t`, as some
//! RCCL releases do) turns windows off for that library, logged once, and the communicator
//! registers a user buffer instead.

use crate::loader::{Flavor, Nccl};
use crate::sys;
use crate::version::{MEM_ALLOC_SINCE, WINDOW_SINCE};
use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use xthunk_core::backend::ExternalAllocator;
use xthunk_core::{Error, Result};

/// What a library offers for collective memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryFeatures {
    /// `ncclMemAlloc` / `ncclMemFree`.
    pub allocator: bool,
    /// `ncclCommWindowRegister` / `ncclCommWindowDeregister` (and not turned off by an empty
    /// window).
    pub windows: bool,
    /// `ncclCommRegister` / `ncclCommDeregister`.
    pub user_buffers: bool,
}

/// Set when a library handed back an empty window: windows are off for it from then on.
static EMPTY_WINDOW: [AtomicBool; 2] = [AtomicBool::new(false), AtomicBool::new(false)];
/// Whether the line naming what is not used was logged, per library.
static LOGGED: [AtomicBool; 2] = [AtomicBool::new(false), AtomicBool::new(false)];

fn slot(flavor: Flavor) -> usize {
    match flavor {
        Flavor::Nccl => 0,
        Flavor::Rccl => 1,
    }
}

impl Nccl {
    /// What this library offers for collective memory (see the [module](self)).
    pub fn memory_features(&self) -> MemoryFeatures {
        let api = &self.api;
        MemoryFeatures {
            allocator: api.ncclMemAlloc.is_some() && api.ncclMemFree.is_some(),
            windows: api.ncclCommWindowRegister.is_some()
                && api.ncclCommWindowDeregister.is_some()
                && !EMPTY_WINDOW[slot(self.flavor())].load(Ordering::SeqCst),
            user_buffers: api.ncclCommRegister.is_some() && api.ncclCommDeregister.is_some(),
        }
    }

    /// What collective memory goes without on this library, and why, in words (`None` when
    /// it has everything).
    pub fn memory_shortfall(&self) -> Option<String> {
        let f = self.memory_features();
        let v = self.version();
        let why = |since| {
            if v < since {
                format!("{} {v} is older than {since}", self.flavor())
            } else {
                format!("{} {v} does not export it", self.flavor())
            }
        };
        let mut lacks = vec![];
        if !f.allocator {
            lacks.push(format!(
                "ncclMemAlloc (collective memory is plain device memory: {})",
                why(MEM_ALLOC_SINCE)
            ));
        }
        if !f.windows {
            let reason = if EMPTY_WINDOW[slot(self.flavor())].load(Ordering::SeqCst) {
                format!("{} handed back an empty window", self.flavor())
            } else {
                why(WINDOW_SINCE)
            };
            let instead = if f.user_buffers {
                "ncclCommRegister instead"
            } else {
                "no registration"
            };
            lacks.push(format!(
                "symmetric windows (ncclCommWindowRegister; {instead}: {reason})"
            ));
        }
        if !f.user_buffers {
            lacks.push(format!(
                "user-buffer registration (ncclCommRegister: {})",
                why(MEM_ALLOC_SINCE)
            ));
        }
        (!lacks.is_empty()).then(|| lacks.join("; "))
    }

    /// Logs [`Self::memory_shortfall`] once per library (NCCL and RCCL apart).
    pub fn log_memory_shortfall(&self) {
        if let Some(s) = self.memory_shortfall()
            && !LOGGED[slot(self.flavor())].swap(true, Ordering::SeqCst)
        {
            tracing::info!(library = %self.describe(), "collective memory without: {s}");
        }
    }

    /// Turns windows off for this library (it handed back an empty one) and says so once.
    pub(crate) fn windows_unusable(&self) {
        if !EMPTY_WINDOW[slot(self.flavor())].swap(true, Ordering::SeqCst) {
            LOGGED[slot(self.flavor())].store(false, Ordering::SeqCst);
            self.log_memory_shortfall();
        }
    }

    /// The library's allocator, where it has one.
    pub fn allocator(self: &Arc<Self>) -> Option<Arc<dyn ExternalAllocator>> {
        self.log_memory_shortfall();
        if !self.memory_features().allocator {
            return None;
        }
        Some(Arc::new(NcclAllocator { lib: self.clone() }))
    }
}

/// `ncclMemAlloc` / `ncclMemFree` of one library.
#[derive(Debug)]
pub struct NcclAllocator {
    lib: Arc<Nccl>,
}

impl ExternalAllocator for NcclAllocator {
    fn name(&self) -> String {
        format!("ncclMemAlloc ({})", self.lib.describe())
    }

    fn allocate(&self, bytes: u64) -> Result<u64> {
        let Some(alloc) = self.lib.api.ncclMemAlloc else {
            return Err(Error::Unavailable {
                backend: self.lib.flavor().name().into(),
                reason: "ncclMemAlloc is not available".into(),
            });
        };
        let size =
            usize::try_from(bytes).map_err(|_| Error::InvalidArgument(format!("{bytes} bytes")))?;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: writes one pointer; the caller made the device current.
        let rc = unsafe { alloc(&mut p, size) };
        self.lib.check("ncclMemAlloc", rc)?;
        if p.is_null() {
            return Err(self.lib.error("ncclMemAlloc", sys::ncclInternalError));
        }
        Ok(p as u64)
    }

    unsafe fn free(&self, addr: u64) -> Result<()> {
        let Some(free) = self.lib.api.ncclMemFree else {
            return Err(Error::Unavailable {
                backend: self.lib.flavor().name().into(),
                reason: "ncclMemFree is not available".into(),
            });
        };
        // SAFETY: `addr` came from ncclMemAlloc and is freed once (the caller's contract).
        let rc = unsafe { free(addr as *mut c_void) };
        self.lib.check("ncclMemFree", rc)
    }
}
