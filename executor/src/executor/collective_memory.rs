//! Collective memory, planned like XLA's: the temps of `MEMORY_SPACE_COLLECTIVE` are placed
//! by the temp plan in arenas of their own, and each such arena is allocated **once per
//! loaded executable** (not per pooled execution state, not per execution) with the
//! collective library's allocator (`ncclMemAlloc`, through
//! [`CliqueProvider::collective_allocator`] and [`Device::allocate_external`]) where it has
//! one, else as the device's own memory (the host backend, old libraries, executions without
//! collectives). The allocation is made by the first execution (the clique provider comes with
//! the execution's [`CollectiveContext`]).
//!
//! Each arena is registered with each clique whose collectives use it, once, at that
//! collective's first execution ([`Communicator::register`]: a symmetric window where the
//! library has windows and the memory is the library's, else a user buffer, else nothing); a
//! collective on registered buffers says so in the trace (`registered`). At unload the
//! registrations are dropped (deregistered) before the memory is freed.
//!
//! Executions of a program with collective memory share it, so they are serialized (a lock
//! held for the whole execution).
//!
//! [`CliqueProvider::collective_allocator`]: crate::collectives::CliqueProvider::collective_allocator
//! [`Device::allocate_external`]: crate::backend::Device::allocate_external
//! [`Communicator::register`]: crate::collectives::Communicator::register
//! [`CollectiveContext`]: super::CollectiveContext

use super::config::CollectiveContext;
use super::temps::TempPlan;
use crate::backend::{Buffer, Device, DevicePtr};
use crate::collectives::{Communicator, Registration, RegistrationKind};
use crate::error::{Error, Result};
use crate::ir::{MemorySpace, Slice};
use parking_lot::Mutex;
use std::sync::Arc;

/// The alignment collective arenas get (NCCL's window alignment, `NCCL_WIN_REQUIRED_ALIGNMENT`).
pub const COLLECTIVE_ALIGNMENT: u64 = 4096;

/// One collective arena's registration with one communicator (`None`: the library
/// registers nothing).
struct Registered {
    comm: Arc<dyn Communicator>,
    registration: Option<Box<dyn Registration>>,
}

/// One collective arena of the temp plan.
struct Arena {
    /// Its index in the temp plan.
    index: usize,
    /// Declared before `buffer`: deregistered before the memory is freed.
    registered: Mutex<Vec<Registered>>,
    buffer: Buffer,
    /// From the collective library's allocator.
    from_library: bool,
}

/// The collective memory of one loaded executable (see the [module](self)).
pub(super) struct CollectiveMemory {
    arenas: Vec<Arena>,
    /// For each allocation (by index): the arena of `arenas` it lies in, if a collective temp.
    by_allocation: Vec<Option<usize>>,
}

/// Whether the temp plan has collective arenas (the executor then owns them, not the pooled
/// states).
pub(super) fn has_collective(plan: &TempPlan) -> bool {
    plan.arenas
        .iter()
        .any(|a| a.memory_space == MemorySpace::Collective)
}

impl CollectiveMemory {
    /// Allocates the collective arenas of `plan` on `device` for `allocations` allocations,
    /// with the library's allocator of `ctx`'s clique provider where there is one.
    pub(super) fn allocate(
        device: &dyn Device,
        plan: &TempPlan,
        allocations: usize,
        ctx: Option<&CollectiveContext>,
    ) -> Result<Self> {
        let library = ctx.and_then(|c| c.cliques.collective_allocator(c.rank as usize));
        let own_space = if device
            .capabilities()
            .memory_spaces
            .contains(&MemorySpace::Collective)
        {
            MemorySpace::Collective
        } else {
            MemorySpace::Device
        };
        let mut arenas = vec![];
        for (index, a) in plan.arenas.iter().enumerate() {
            if a.memory_space != MemorySpace::Collective {
                continue;
            }
            let align = a.alignment.max(COLLECTIVE_ALIGNMENT);
            // Whole pages: a window's size is a multiple of its alignment on every rank.
            let size = a
                .size
                .div_ceil(COLLECTIVE_ALIGNMENT)
                .checked_mul(COLLECTIVE_ALIGNMENT)
                .ok_or_else(|| {
                    Error::InvalidArgument(format!("a collective arena of {} bytes", a.size))
                })?;
            let external = match &library {
                Some(l) => {
                    match device.allocate_external(size, align, MemorySpace::Collective, l.clone())
                    {
                        Ok(b) => Some(b),
                        Err(Error::Unsupported { .. }) => None,
                        Err(e) => return Err(e),
                    }
                }
                None => None,
            };
            let from_library = external.is_some();
            let buffer = match external {
                Some(b) => b,
                None => device.allocate(size, align, own_space)?,
            };
            tracing::debug!(
                arena = index,
                bytes = size,
                at = %buffer.ptr(),
                from = if from_library { "the collective library" } else { "the device" },
                "allocated collective memory"
            );
            arenas.push(Arena {
                index,
                registered: Mutex::new(vec![]),
                buffer,
                from_library,
            });
        }
        let mut by_allocation = vec![None; allocations];
        for p in &plan.placements {
            if let Some(k) = arenas.iter().position(|a| a.index == p.arena)
                && let Some(slot) = by_allocation.get_mut(p.allocation as usize)
            {
                *slot = Some(k);
            }
        }
        Ok(CollectiveMemory {
            arenas,
            by_allocation,
        })
    }

    /// Writes the address of every collective temp of `plan` into `table`.
    pub(super) fn place(&self, plan: &TempPlan, table: &mut [DevicePtr]) {
        for p in &plan.placements {
            if let Some(a) = self.arenas.iter().find(|a| a.index == p.arena)
                && let Some(slot) = table.get_mut(p.allocation as usize)
            {
                *slot = a.buffer.ptr().offset(p.offset);
            }
        }
    }

    /// Registers the arenas `slices` lie in with `comm` (once per arena and communicator;
    /// every rank of the clique reaches here in the same program order) and returns how the
    /// collective's buffers are registered: a kind when every collective buffer is, `None`
    /// when some buffer is not collective memory or not registered.
    pub(super) fn register(
        &self,
        comm: &Arc<dyn Communicator>,
        slices: &[&Slice],
    ) -> Result<Option<RegistrationKind>> {
        let mut kind = None;
        for s in slices {
            let Some(Some(k)) = self.by_allocation.get(s.allocation as usize) else {
                return Ok(None);
            };
            let Some(arena) = self.arenas.get(*k) else {
                return Ok(None);
            };
            let mut registered = arena.registered.lock();
            let found = registered
                .iter()
                .find(|r| Arc::ptr_eq(&r.comm, comm))
                .map(|r| r.registration.as_ref().map(|x| x.kind()));
            let this = match found {
                Some(k) => k,
                None => {
                    let b = &arena.buffer;
                    let registration =
                        comm.clone()
                            .register(b.ptr(), b.size(), arena.from_library)?;
                    let k = registration.as_ref().map(|r| r.kind());
                    tracing::info!(
                        arena = arena.index,
                        bytes = b.size(),
                        clique = %comm.describe(),
                        registered = k.map_or("not registered", RegistrationKind::name),
                        "collective memory registered"
                    );
                    registered.push(Registered {
                        comm: comm.clone(),
                        registration,
                    });
                    k
                }
            };
            match this {
                None => return Ok(None),
                Some(t) => kind = Some(kind.map_or(t, |k| weaker(k, t))),
            }
        }
        Ok(kind)
    }
}

/// What an executable's collective memory is now ([`LoadedExecutable::collective_memory`]).
///
/// [`LoadedExecutable::collective_memory`]: super::LoadedExecutable::collective_memory
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CollectiveMemoryReport {
    /// Collective arenas allocated (0 before the first execution).
    pub arenas: usize,
    /// Of those, from the collective library's allocator.
    pub from_library: usize,
    pub bytes: u64,
    /// One per arena and communicator it was registered with: how (`None`: the library
    /// registers nothing).
    pub registrations: Vec<Option<RegistrationKind>>,
}

impl CollectiveMemory {
    pub(super) fn report(&self) -> CollectiveMemoryReport {
        CollectiveMemoryReport {
            arenas: self.arenas.len(),
            from_library: self.arenas.iter().filter(|a| a.from_library).count(),
            bytes: self.arenas.iter().map(|a| a.buffer.size()).sum(),
            registrations: self
                .arenas
                .iter()
                .flat_map(|a| {
                    a.registered
                        .lock()
                        .iter()
                        .map(|r| r.registration.as_ref().map(|x| x.kind()))
                        .collect::<Vec<_>>()
                })
                .collect(),
        }
    }
}

impl Drop for CollectiveMemory {
    fn drop(&mut self) {
        // Deregister everything first, then free (the fields would too; explicit for clarity).
        for a in &self.arenas {
            a.registered.lock().clear();
        }
    }
}

/// The weaker of two registrations (a user buffer is weaker than a window).
fn weaker(a: RegistrationKind, b: RegistrationKind) -> RegistrationKind {
    if a == RegistrationKind::UserBuffer || b == RegistrationKind::UserBuffer {
        RegistrationKind::UserBuffer
    } else {
        RegistrationKind::Window
    }
}
