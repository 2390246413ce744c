//! `collective_permute`: every rank sends to the rank a pair list maps it to.

use super::kind::{Checker, Nested, ThunkKind, TraceCost, read, uses_line, write};
use crate::ir::error::{ValidationError, err};
use crate::ir::{BufferUse, DType, Slice, ThunkPath};
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;

/// Every rank sends `src` to the rank `pairs` maps it to and receives `dst` from the rank
/// mapped to it (`(source, target)` global ranks; each rank at most once as a source and
/// once as a target). A rank that no one sends to gets `dst` zero-filled, as in XLA.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CollectivePermuteThunk {
    pub src: Slice,
    pub dst: Slice,
    pub dtype: DType,
    pub pairs: Vec<(u32, u32)>,
}

impl ThunkKind for CollectivePermuteThunk {
    fn name(&self) -> &'static str {
        "collective_permute"
    }

    fn buffer_uses(&self) -> Vec<BufferUse> {
        vec![read(self.src), write(self.dst)]
    }

    fn communicates(&self) -> bool {
        true
    }

    fn validate(&self, cx: &mut dyn Checker, path: &ThunkPath) -> Result<(), ValidationError> {
        let (src, dst) = (&self.src, &self.dst);
        cx.no_control_flow(path, "collective_permute")?;
        cx.typed_slice(src, self.dtype, path, "src", false)?;
        cx.typed_slice(dst, self.dtype, path, "dst", true)?;
        if src.size != dst.size {
            return Err(err(
                path,
                "dst",
                format!("{} bytes, src has {}", dst.size, src.size),
            ));
        }
        if src.overlaps(dst) {
            return Err(err(path, "dst", "overlaps src"));
        }
        let mut sources = BTreeSet::new();
        let mut targets = BTreeSet::new();
        for (i, (a, b)) in self.pairs.iter().enumerate() {
            if !sources.insert(*a) {
                return Err(err(
                    path,
                    format!("pairs[{i}]"),
                    format!("rank {a} sends twice"),
                ));
            }
            if !targets.insert(*b) {
                return Err(err(
                    path,
                    format!("pairs[{i}]"),
                    format!("rank {b} receives twice"),
                ));
            }
        }
        Ok(())
    }

    fn describe(&self) -> String {
        uses_line(self)
    }

    fn trace(&self, args: &mut Map<String, Value>) -> TraceCost {
        args.insert("dtype".into(), json!(self.dtype.to_string()));
        args.insert("peers".into(), json!(self.pairs));
        TraceCost {
            bytes: self.src.size,
            flops: 0,
            communicates: true,
        }
    }
}

impl<T> Nested<T> for CollectivePermuteThunk {}
