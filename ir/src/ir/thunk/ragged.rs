//! `ragged_all_to_all`: an all-to-all with a variable number of rows per peer, offsets and
//! sizes in device buffers (JAX's `lax.ragged_all_to_all`, XLA's `RaggedAllToAll`), and the
//! run-time check of those offsets and sizes ([`RaggedAllToAllThunk::parts`]).

use super::collective::check_groups;
use super::kind::{Checker, Nested, ThunkKind, TraceCost, read};
use crate::ir::error::{ValidationError, err};
use crate::ir::{Access, BufferUse, DType, Slice, ThunkPath};
use serde_json::{Map, Value, json};

/// A ragged all-to-all among replica groups. The operand and the output are arrays of rows of
/// `row_elements` elements of `dtype` (the leading, ragged dimension counts rows); the four
/// index arrays hold one `index_dtype` (i32 or i64) entry per member of the group, in group
/// order, counted in rows:
/// - `input_offsets[j]`, `send_sizes[j]`: the rows of this rank's `operand` sent to member `j`;
/// - `output_offsets[j]`: where in **member `j`'s** `output` those rows land (the sender's
///   view, as in JAX);
/// - `recv_sizes[j]`: how many rows this rank receives from member `j` (must equal member
///   `j`'s `send_sizes` entry for this rank).
///
/// Rows of `output` that nothing is written to keep their contents (`output` is read and
/// written). A rank in no group skips the operation. Offsets and sizes are read on the host
/// once per execution of the thunk (see [`RaggedAllToAllThunk::parts`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RaggedAllToAllThunk {
    pub operand: Slice,
    pub output: Slice,
    pub input_offsets: Slice,
    pub send_sizes: Slice,
    pub output_offsets: Slice,
    pub recv_sizes: Slice,
    pub dtype: DType,
    pub index_dtype: DType,
    /// Elements of `dtype` per row (1 for a vector); at least 1.
    pub row_elements: u64,
    pub groups: Vec<Vec<u32>>,
}

/// The offsets and sizes of one execution, decoded on the host (rows, one entry per member).
/// `offsets_from[j]` and `sizes_from[j]` are member `j`'s `output_offsets` and `send_sizes`
/// entries for this rank, exchanged before the data moves.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RaggedIndices {
    pub input_offsets: Vec<i64>,
    pub send_sizes: Vec<i64>,
    pub recv_sizes: Vec<i64>,
    pub offsets_from: Vec<i64>,
    pub sizes_from: Vec<i64>,
}

/// One transfer in bytes: `offset` into the operand (a send) or the output (a receive).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaggedPart {
    pub offset: u64,
    pub bytes: u64,
}

/// What one rank sends to and receives from each member (by position; empty parts are
/// `bytes == 0`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaggedParts {
    pub sends: Vec<RaggedPart>,
    pub recvs: Vec<RaggedPart>,
}

impl RaggedAllToAllThunk {
    /// The four index arrays with their field names.
    fn index_arrays(&self) -> [(&'static str, &Slice); 4] {
        [
            ("input_offsets", &self.input_offsets),
            ("send_sizes", &self.send_sizes),
            ("output_offsets", &self.output_offsets),
            ("recv_sizes", &self.recv_sizes),
        ]
    }

    /// Bytes per row (`None` when it overflows).
    pub fn row_bytes(&self) -> Option<u64> {
        self.row_elements.checked_mul(self.dtype.size() as u64)
    }

    /// Entries in each index array.
    pub fn entries(&self) -> u64 {
        self.input_offsets.size / self.index_dtype.size() as u64
    }

    /// Decodes an index array read back from the device (little-endian i32 or i64 entries).
    pub fn decode(&self, bytes: &[u8]) -> Vec<i64> {
        match self.index_dtype {
            DType::I32 => bytes
                .chunks_exact(4)
                .map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect(),
            _ => bytes
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                .collect(),
        }
    }

    /// Checks one execution's offsets and sizes for member `me` of a group of `n` and turns
    /// them into byte ranges: every offset and size non-negative, every part inside its buffer
    /// (checked arithmetic: an overflow is out of bounds), `recv_sizes` equal to what each
    /// member sends, and no two received parts overlapping. The message names the array and
    /// the member.
    pub fn parts(&self, n: usize, me: usize, ix: &RaggedIndices) -> Result<RaggedParts, String> {
        let lens = [
            ix.input_offsets.len(),
            ix.send_sizes.len(),
            ix.recv_sizes.len(),
            ix.offsets_from.len(),
            ix.sizes_from.len(),
        ];
        if lens.iter().any(|l| *l != n) || me >= n {
            return Err(format!(
                "index arrays of {lens:?} entries for a group of {n} (member {me})"
            ));
        }
        let row = self
            .row_bytes()
            .ok_or_else(|| format!("{} elements per row overflow", self.row_elements))?;
        // A part of `size` rows at row `offset` of a buffer of `len` bytes.
        let part = |what: &str, j: usize, offset: i64, size: i64, len: u64| {
            let (Ok(o), Ok(s)) = (u64::try_from(offset), u64::try_from(size)) else {
                return Err(format!(
                    "{what} for member {j}: offset {offset} and size {size} must not be negative"
                ));
            };
            let bytes = s.checked_mul(row);
            let start = o.checked_mul(row);
            match (
                start,
                bytes,
                start.zip(bytes).and_then(|(a, b)| a.checked_add(b)),
            ) {
                (Some(offset), Some(bytes), Some(end)) if end <= len => {
                    Ok(RaggedPart { offset, bytes })
                }
                _ => Err(format!(
                    "{what} for member {j}: rows {o}..{o}+{s} exceed the {} rows of the buffer",
                    len / row
                )),
            }
        };
        let mut sends = Vec::with_capacity(n);
        let mut recvs = Vec::with_capacity(n);
        for j in 0..n {
            let (io, ss) = (ix.input_offsets[j], ix.send_sizes[j]);
            sends.push(part(
                "input_offsets/send_sizes",
                j,
                io,
                ss,
                self.operand.size,
            )?);
            if ix.recv_sizes[j] != ix.sizes_from[j] {
                return Err(format!(
                    "recv_sizes[{j}] is {} but member {j} sends {} rows",
                    ix.recv_sizes[j], ix.sizes_from[j]
                ));
            }
            recvs.push(part(
                "output_offsets (the sender's)/recv_sizes",
                j,
                ix.offsets_from[j],
                ix.recv_sizes[j],
                self.output.size,
            )?);
        }
        let mut order: Vec<usize> = (0..n).filter(|j| recvs[*j].bytes > 0).collect();
        order.sort_by_key(|j| recvs[*j].offset);
        for w in order.windows(2) {
            let (a, b) = (recvs[w[0]], recvs[w[1]]);
            if a.offset.saturating_add(a.bytes) > b.offset {
                return Err(format!(
                    "the parts received from members {} and {} overlap in the output",
                    w[0], w[1]
                ));
            }
        }
        Ok(RaggedParts { sends, recvs })
    }
}

impl ThunkKind for RaggedAllToAllThunk {
    fn name(&self) -> &'static str {
        "ragged_all_to_all"
    }

    fn buffer_uses(&self) -> Vec<BufferUse> {
        let mut uses = vec![read(self.operand)];
        uses.extend(self.index_arrays().iter().map(|(_, s)| read(**s)));
        // Rows nothing is written to keep their contents: the output is read and written.
        uses.push(BufferUse {
            slice: self.output,
            access: Access::ReadWrite,
        });
        uses
    }

    fn communicates(&self) -> bool {
        true
    }

    fn validate(&self, cx: &mut dyn Checker, path: &ThunkPath) -> Result<(), ValidationError> {
        cx.no_control_flow(path, "ragged_all_to_all")?;
        cx.typed_slice(&self.operand, self.dtype, path, "operand", false)?;
        cx.typed_slice(&self.output, self.dtype, path, "output", true)?;
        if !matches!(self.index_dtype, DType::I32 | DType::I64) {
            return Err(err(
                path,
                "index_dtype",
                format!("{} offsets and sizes (i32 or i64)", self.index_dtype),
            ));
        }
        for (field, s) in self.index_arrays() {
            cx.typed_slice(s, self.index_dtype, path, field, false)?;
            if s.size != self.input_offsets.size {
                return Err(err(
                    path,
                    field,
                    format!(
                        "{} bytes, input_offsets has {} (one entry per member each)",
                        s.size, self.input_offsets.size
                    ),
                ));
            }
            if s.overlaps(&self.output) {
                return Err(err(path, "output", format!("overlaps {field}")));
            }
        }
        if self.input_offsets.size == 0 {
            return Err(err(path, "input_offsets", "no entries"));
        }
        if self.operand.overlaps(&self.output) {
            return Err(err(path, "output", "overlaps operand"));
        }
        let row = match self.row_bytes() {
            Some(r) if r > 0 => r,
            _ => {
                return Err(err(
                    path,
                    "row_elements",
                    format!("{} elements per row (at least 1)", self.row_elements),
                ));
            }
        };
        for (field, s) in [("operand", &self.operand), ("output", &self.output)] {
            if s.size % row != 0 {
                return Err(err(
                    path,
                    field,
                    format!("{} bytes are not whole rows of {row} bytes", s.size),
                ));
            }
        }
        // With explicit groups, the arrays' lengths can be checked now; otherwise at run time.
        if let Some(n) = check_groups(&self.groups, path)?
            && self.entries() != n as u64
        {
            return Err(err(
                path,
                "input_offsets",
                format!("{} entries for groups of {n}", self.entries()),
            ));
        }
        Ok(())
    }

    fn label(&self) -> String {
        format!("ragged_all_to_all {} {}", self.dtype, self.operand)
    }

    fn describe(&self) -> String {
        let uses: Vec<String> = self
            .buffer_uses()
            .iter()
            .map(|u| format!("{} {}", u.slice, u.access.short()))
            .collect();
        format!(
            "ragged_all_to_all {} rows of {} ({} indices) uses=[{}]",
            self.dtype,
            self.row_elements,
            self.index_dtype,
            uses.join(", ")
        )
    }

    fn trace(&self, args: &mut Map<String, Value>) -> TraceCost {
        args.insert("dtype".into(), json!(self.dtype.to_string()));
        args.insert("op".into(), json!("ragged_all_to_all"));
        let peers = if self.groups.is_empty() {
            json!("all ranks")
        } else {
            json!(self.groups)
        };
        args.insert("peers".into(), peers);
        TraceCost {
            // At most the whole operand leaves (the real amount is known on the device).
            bytes: self.operand.size,
            flops: 0,
            communicates: true,
        }
    }
}

impl<T> Nested<T> for RaggedAllToAllThunk {}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// 8 rows of 2 f32 in and out, two members, i32 indices.
    fn thunk() -> RaggedAllToAllThunk {
        let s = |a| Slice::new(a, 0, 8);
        RaggedAllToAllThunk {
            operand: Slice::new(0, 0, 64),
            output: Slice::new(1, 0, 64),
            input_offsets: s(2),
            send_sizes: s(3),
            output_offsets: s(4),
            recv_sizes: s(5),
            dtype: DType::F32,
            index_dtype: DType::I32,
            row_elements: 2,
            groups: vec![],
        }
    }

    fn ix(io: [i64; 2], ss: [i64; 2], rs: [i64; 2], of: [i64; 2], sf: [i64; 2]) -> RaggedIndices {
        RaggedIndices {
            input_offsets: io.to_vec(),
            send_sizes: ss.to_vec(),
            recv_sizes: rs.to_vec(),
            offsets_from: of.to_vec(),
            sizes_from: sf.to_vec(),
        }
    }

    #[test]
    fn parts_are_byte_ranges_of_rows() {
        let p = thunk()
            .parts(2, 0, &ix([0, 3], [3, 0], [3, 5], [0, 3], [3, 5]))
            .unwrap();
        assert_eq!(
            p.sends[0],
            RaggedPart {
                offset: 0,
                bytes: 24
            }
        );
        assert_eq!(p.sends[1].bytes, 0);
        assert_eq!(
            p.recvs[1],
            RaggedPart {
                offset: 24,
                bytes: 40
            }
        );
    }

    #[test]
    fn bad_offsets_and_sizes_are_errors() {
        let t = thunk();
        let cases = [
            (ix([-1, 0], [1, 0], [1, 0], [0, 0], [1, 0]), "negative"),
            (ix([7, 0], [2, 0], [2, 0], [0, 0], [2, 0]), "exceed"),
            (ix([0, 0], [1, 0], [1, 0], [i64::MAX, 0], [1, 0]), "exceed"),
            (ix([0, 0], [1, 0], [2, 0], [0, 0], [1, 0]), "sends 1 rows"),
            (ix([0, 0], [2, 2], [2, 2], [0, 1], [2, 2]), "overlap"),
        ];
        for (i, want) in cases {
            let e = t.parts(2, 0, &i).unwrap_err();
            assert!(e.contains(want), "{e}");
        }
        assert!(t.parts(3, 0, &RaggedIndices::default()).is_err());
    }

    #[test]
    fn decodes_little_endian_indices() {
        let mut t = thunk();
        assert_eq!(t.decode(&[1, 0, 0, 0, 255, 255, 255, 255]), vec![1, -1]);
        t.index_dtype = DType::I64;
        assert_eq!(t.decode(&[2, 0, 0, 0, 0, 0, 0, 0]), vec![2]);
    }
}
