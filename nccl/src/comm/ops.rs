//! The operations: every [`Communicator`] call as its NCCL call on the stream's native handle,
//! under the communicator's lock.

use super::{ABORT_LOCK_WAIT, NcclCommunicator, POLL_LOCK_WAIT, device_ptr, to_c_int};
use crate::sys;
use crate::types::{nccl_dtype, nccl_op};
use std::ffi::{c_int, c_void};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use xthunk_core::backend::{DevicePtr, Stream};
use xthunk_core::collectives::{Communicator, ReduceOp};
use xthunk_core::ir::DType;
use xthunk_core::{Error, Result};

/// What every collective passes NCCL: the stream, the buffers, the count and the type.
struct Operands {
    s: sys::cudaStream_t,
    src: *mut c_void,
    dst: *mut c_void,
    n: usize,
    t: sys::ncclDataType_t,
}

impl NcclCommunicator {
    fn stream(&self, stream: &dyn Stream, call: &str) -> Result<sys::cudaStream_t> {
        let h = stream.native_handle().ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{} {call}: the stream has no native handle (a host stream?); {} needs a {} stream",
                self.name(),
                self.lib.flavor(),
                match self.lib.flavor() {
                    crate::Flavor::Nccl => "CUDA",
                    crate::Flavor::Rccl => "HIP",
                }
            ))
        })?;
        Ok(std::ptr::with_exposed_provenance_mut(h))
    }

    fn count(&self, count: u64) -> Result<usize> {
        usize::try_from(count).map_err(|_| {
            Error::InvalidArgument(format!("element count {count} does not fit size_t"))
        })
    }

    fn peer(&self, peer: usize, what: &str) -> Result<c_int> {
        if peer >= self.size {
            return Err(Error::InvalidArgument(format!(
                "{} {what} {peer} is not a rank of this clique of {}",
                self.name(),
                self.size
            )));
        }
        to_c_int(peer, what)
    }

    fn dtype(&self, dtype: DType) -> Result<sys::ncclDataType_t> {
        nccl_dtype(dtype, self.lib.version(), self.name())
    }

    /// The stream, buffers, count and type of a collective `call`, as NCCL takes them.
    fn operands(
        &self,
        call: &str,
        stream: &dyn Stream,
        src: DevicePtr,
        dst: DevicePtr,
        count: u64,
        dtype: DType,
    ) -> Result<Operands> {
        Ok(Operands {
            s: self.stream(stream, call)?,
            src: device_ptr(src)?,
            dst: device_ptr(dst)?,
            n: self.count(count)?,
            t: self.dtype(dtype)?,
        })
    }

    /// A send or receive, shared by [`Communicator::send`], `recv` and `all_to_all`.
    fn p2p(
        &self,
        send: bool,
        stream: sys::cudaStream_t,
        buf: *mut c_void,
        count: usize,
        dtype: sys::ncclDataType_t,
        peer: c_int,
    ) -> Result<()> {
        if send {
            self.call("ncclSend", |comm| {
                // SAFETY: `comm` is live under the lock; `buf`, `stream` are the caller's
                // device buffer and stream (NCCL validates them and only queues work).
                unsafe { (self.lib.api.ncclSend)(buf, count, dtype, peer, comm, stream) }
            })
        } else {
            self.call("ncclRecv", |comm| {
                // SAFETY: as for the send.
                unsafe { (self.lib.api.ncclRecv)(buf, count, dtype, peer, comm, stream) }
            })
        }
    }
}

impl Communicator for NcclCommunicator {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn describe(&self) -> String {
        let lib = format!(
            "{} {}{}",
            self.lib.flavor(),
            self.lib.version(),
            if self.is_aborted() { ", aborted" } else { "" }
        );
        match &self.clique {
            Some(c) => format!("{} ({lib})", c.member),
            None => format!("rank {} of a clique of {} ({lib})", self.rank, self.size),
        }
    }

    fn all_reduce(
        &self,
        stream: &dyn Stream,
        src: DevicePtr,
        dst: DevicePtr,
        count: u64,
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        const CALL: &str = "ncclAllReduce";
        let x = self.operands(CALL, stream, src, dst, count, dtype)?;
        let op = nccl_op(op, dtype, self.name())?;
        self.call(CALL, |comm| {
            // SAFETY: `comm` is live under the lock; the buffers and stream are the caller's
            // (device addresses checked by the backend); NCCL only queues work on the stream.
            unsafe { (self.lib.api.ncclAllReduce)(x.src, x.dst, x.n, x.t, op, comm, x.s) }
        })
    }

    fn all_gather(
        &self,
        stream: &dyn Stream,
        src: DevicePtr,
        dst: DevicePtr,
        count: u64,
        dtype: DType,
    ) -> Result<()> {
        const CALL: &str = "ncclAllGather";
        let x = self.operands(CALL, stream, src, dst, count, dtype)?;
        self.call(CALL, |comm| {
            // SAFETY: as for `all_reduce`.
            unsafe { (self.lib.api.ncclAllGather)(x.src, x.dst, x.n, x.t, comm, x.s) }
        })
    }

    fn reduce_scatter(
        &self,
        stream: &dyn Stream,
        src: DevicePtr,
        dst: DevicePtr,
        count: u64,
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        const CALL: &str = "ncclReduceScatter";
        let x = self.operands(CALL, stream, src, dst, count, dtype)?;
        let op = nccl_op(op, dtype, self.name())?;
        self.call(CALL, |comm| {
            // SAFETY: as for `all_reduce`.
            unsafe { (self.lib.api.ncclReduceScatter)(x.src, x.dst, x.n, x.t, op, comm, x.s) }
        })
    }

    /// A group of one send and one receive per rank (self included), as nccl-tests does it.
    fn all_to_all(
        &self,
        stream: &dyn Stream,
        src: DevicePtr,
        dst: DevicePtr,
        count: u64,
        dtype: DType,
    ) -> Result<()> {
        let s = self.stream(stream, "all-to-all")?;
        let n = self.count(count)?;
        let t = self.dtype(dtype)?;
        let chunk = count.checked_mul(dtype.size() as u64).ok_or_else(|| {
            Error::InvalidArgument(format!("all-to-all of {count} {dtype} overflows"))
        })?;
        // Every address first, so that nothing is issued when one is out of range.
        let mut parts = Vec::with_capacity(self.size);
        for p in 0..self.size {
            let off = chunk
                .checked_mul(p as u64)
                .ok_or_else(|| Error::InvalidArgument("all-to-all offsets overflow".into()))?;
            parts.push((
                device_ptr(src.offset(off))?,
                device_ptr(dst.offset(off))?,
                to_c_int(p, "peer")?,
            ));
        }
        self.group_start()?;
        let mut result = Ok(());
        for (sp, dp, peer) in parts {
            result = self
                .p2p(true, s, sp, n, t, peer)
                .and_then(|()| self.p2p(false, s, dp, n, t, peer));
            if result.is_err() {
                break;
            }
        }
        // The group is always closed, even after a failed call inside it.
        let end = self.group_end();
        result.and(end)
    }

    fn broadcast(
        &self,
        stream: &dyn Stream,
        src: DevicePtr,
        dst: DevicePtr,
        count: u64,
        dtype: DType,
        root: usize,
    ) -> Result<()> {
        const CALL: &str = "ncclBroadcast";
        let x = self.operands(CALL, stream, src, dst, count, dtype)?;
        let root = self.peer(root, "root")?;
        self.call(CALL, |comm| {
            // SAFETY: as for `all_reduce`.
            unsafe { (self.lib.api.ncclBroadcast)(x.src, x.dst, x.n, x.t, root, comm, x.s) }
        })
    }

    fn send(
        &self,
        stream: &dyn Stream,
        src: DevicePtr,
        count: u64,
        dtype: DType,
        peer: usize,
    ) -> Result<()> {
        let s = self.stream(stream, "ncclSend")?;
        let (buf, n, t) = (device_ptr(src)?, self.count(count)?, self.dtype(dtype)?);
        self.p2p(true, s, buf, n, t, self.peer(peer, "peer")?)
    }

    fn recv(
        &self,
        stream: &dyn Stream,
        dst: DevicePtr,
        count: u64,
        dtype: DType,
        peer: usize,
    ) -> Result<()> {
        let s = self.stream(stream, "ncclRecv")?;
        let (buf, n, t) = (device_ptr(dst)?, self.count(count)?, self.dtype(dtype)?);
        self.p2p(false, s, buf, n, t, self.peer(peer, "peer")?)
    }

    fn group_start(&self) -> Result<()> {
        if self.is_aborted() {
            return Err(self.aborted_error("ncclGroupStart"));
        }
        self.lib.group_start()
    }

    fn group_end(&self) -> Result<()> {
        const CALL: &str = "ncclGroupEnd";
        // The group is closed even on an aborted communicator (NCCL's group depth is per
        // thread); its outcome is then the abort.
        let done = self.lib.group_end();
        let mut inner = self.inner.lock();
        let comm_ok = self.live(&mut inner, CALL);
        match (done, comm_ok) {
            (Err(e), _) => {
                inner.failed = true;
                Err(e)
            }
            (Ok(_), Err(e)) => Err(e),
            (Ok(true), Ok(_)) => Ok(()),
            (Ok(false), Ok(_)) => self.finish(&mut inner, CALL, sys::ncclInProgress),
        }
    }

    /// `ncclCommGetAsyncError`: `ncclInProgress` (a non-blocking call still running) is not an
    /// error. While another thread is inside a blocking call on this communicator, nothing new
    /// can be read; that reads as no error (the watchdog's deadline still applies).
    fn async_error(&self) -> Result<()> {
        const CALL: &str = "ncclCommGetAsyncError";
        let Some(mut inner) = self.inner.try_lock_for(POLL_LOCK_WAIT) else {
            return Ok(());
        };
        let comm = self.live(&mut inner, CALL)?;
        let mut state: sys::ncclResult_t = sys::ncclSuccess;
        // SAFETY: `comm` is live under the lock; writes one result.
        let rc = unsafe { (self.lib.api.ncclCommGetAsyncError)(comm, &mut state) };
        self.lib.check(CALL, rc)?;
        match state {
            sys::ncclSuccess | sys::ncclInProgress => Ok(()),
            e => {
                inner.failed = true;
                Err(self.lib.error("asynchronous error", e))
            }
        }
    }

    /// Aborts the communicator (`ncclCommAbort`) and, for a provider's, fails its clique's
    /// rendezvous, so that peers waiting there (a split in progress) fail at once.
    fn abort(&self, reason: &str) {
        if let Some(c) = &self.clique {
            c.meeting.poison(&format!(
                "{} aborted by rank {}: {reason}",
                c.member.key(),
                c.member.global_rank()
            ));
        }
        {
            let mut r = self.abort_reason.lock();
            if r.is_none() {
                *r = Some(reason.to_string());
                let key = self.clique.as_ref().map(|c| c.member.key().to_string());
                tracing::warn!(
                    target: "xthunk::clique",
                    key = key.as_deref().unwrap_or("(no clique)"),
                    rank = self.rank,
                    reason,
                    "clique aborted"
                );
            }
        }
        self.abort_requested.store(true, Ordering::SeqCst);
        match self.inner.try_lock_for(ABORT_LOCK_WAIT) {
            Some(mut inner) => self.abort_now(&mut inner),
            None => tracing::warn!(
                library = self.name(),
                rank = self.rank,
                %reason,
                "a call is inside the library on this communicator: it is aborted when that call returns"
            ),
        }
    }

    fn pending(&self) -> Option<String> {
        self.clique
            .as_ref()
            .and_then(|c| c.meeting.describe_pending())
    }

    fn register(
        self: Arc<Self>,
        ptr: DevicePtr,
        bytes: u64,
        from_library: bool,
    ) -> Result<Option<Box<dyn xthunk_core::collectives::Registration>>> {
        self.register_memory(ptr, bytes, from_library)
    }
}
