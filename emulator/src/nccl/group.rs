//! Groups (`ncclGroupStart` / `ncclGroupEnd`): initializations and operations issued inside
//! a group are deferred to its end, where each stream gets one operation holding its parts.
//! Initializations in a group register their rank at once and are waited for at the end
//! (non-blocking ones are not: the end then returns `ncclInProgress`). What an open group holds
//! is in `deferred`.

use super::deferred::{GROUP, QueuedPart};
use super::init::finish_group_inits;
use super::slot::issue;
use super::{IN_PROGRESS, INVALID_USAGE, NcclResult, SUCCESS, api, fail};
use crate::diag::Kind;
use crate::stream::StreamCore;
use std::sync::Arc;

#[unsafe(no_mangle)]
pub extern "C" fn ncclGroupStart() -> NcclResult {
    GROUP.with(|g| g.borrow_mut().depth += 1);
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGroupEnd() -> NcclResult {
    const C: &str = "ncclGroupEnd";
    api(C, || {
        let (ops, inits) = match GROUP.with(|g| {
            let mut g = g.borrow_mut();
            if g.depth == 0 {
                return None;
            }
            g.depth -= 1;
            if g.depth > 0 {
                return Some((vec![], vec![]));
            }
            Some((std::mem::take(&mut g.ops), std::mem::take(&mut g.inits)))
        }) {
            Some(x) => x,
            None => {
                return fail(
                    INVALID_USAGE,
                    C,
                    Kind::InvalidState,
                    "ncclGroupEnd without ncclGroupStart",
                );
            }
        };
        let inits = finish_group_inits(inits, C);
        if inits != SUCCESS && inits != IN_PROGRESS {
            return inits;
        }
        // One stream operation per stream, holding all its parts.
        let mut by_stream: Vec<(Arc<StreamCore>, Vec<QueuedPart>)> = vec![];
        for (comm, s, key, part) in ops {
            match by_stream.iter_mut().find(|(x, _)| Arc::ptr_eq(x, &s)) {
                Some((_, v)) => v.push((comm, key, part)),
                None => by_stream.push((s, vec![(comm, key, part)])),
            }
        }
        for (s, parts) in by_stream {
            if let Err(r) = issue(&s, parts, C) {
                return r;
            }
        }
        inits
    })
}
