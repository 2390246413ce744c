//! Views of device arrays as metadata: a [`Window`] (a byte range of another allocation,
//! which it keeps alive) and the index arithmetic of `DeviceArray`'s `reshape`, `[...]` and
//! `transpose`. A view is only ever contiguous in row-major order: a leading-axis slice (an
//! offset and a shorter first extent), a reshape (same elements, other extents) or a
//! transpose that moves only axes of extent 1. Anything strided is refused, naming what
//! would need a copy. A leaf: `device_array.rs` uses it.

use crate::errors::{XResult, invalid, unsupported};
use pyo3::exceptions::PyIndexError;
use pyo3::prelude::*;
use pyo3::types::{PyEllipsis, PySlice, PyTuple};
use std::sync::Arc;
use xthunk::core::backend::DevicePtr;
use xthunk::ir::MemorySpace;
use xthunk::{Buffer, DeviceMemory};

/// `size` bytes at `offset` of `base`, which it keeps alive.
#[derive(Debug)]
pub struct Window {
    base: Arc<Buffer>,
    offset: u64,
    size: u64,
}

impl Window {
    /// The window, checked to lie inside `base`.
    pub fn new(base: Arc<Buffer>, offset: u64, size: u64) -> XResult<Window> {
        let end = offset.checked_add(size);
        if end.is_none_or(|e| e > base.size()) {
            return Err(invalid(format!(
                "a view of {size} bytes at offset {offset} does not fit its base's {} bytes",
                base.size()
            ))
            .into());
        }
        Ok(Window { base, offset, size })
    }
}

impl DeviceMemory for Window {
    fn ptr(&self) -> DevicePtr {
        self.base.ptr().offset(self.offset)
    }
    fn size(&self) -> u64 {
        self.size
    }
    fn space(&self) -> MemorySpace {
        self.base.space()
    }
}

/// The number of elements of `dims` (checked).
pub fn elements(dims: &[u64]) -> XResult<u64> {
    dims.iter()
        .try_fold(1u64, |n, &d| n.checked_mul(d))
        .ok_or_else(|| {
            invalid(format!(
                "shape {dims:?} has more elements than fit in 64 bits"
            ))
            .into()
        })
}

/// The extents of `reshape(shape)` of an array of `n` elements: at most one `-1` (inferred),
/// no other negative extent, the same number of elements.
pub fn reshape(dims: &[u64], n: u64, shape: &[i64]) -> XResult<Vec<u64>> {
    let mut inferred = None;
    let mut known = 1u64;
    for (i, &d) in shape.iter().enumerate() {
        match d {
            -1 if inferred.is_none() => inferred = Some(i),
            -1 => {
                return Err(invalid(format!(
                    "reshape: shape[{i}] is a second -1 (only one extent can be inferred)"
                ))
                .into());
            }
            d if d < 0 => {
                return Err(invalid(format!(
                    "reshape: shape[{i}] is {d}; extents are >= 0 (or -1, inferred)"
                ))
                .into());
            }
            d => {
                known = known.checked_mul(d as u64).ok_or_else(|| {
                    invalid(format!("reshape: shape {shape:?} overflows 64 bits"))
                })?;
            }
        }
    }
    let mut out: Vec<u64> = shape.iter().map(|&d| d.max(0) as u64).collect();
    if let Some(i) = inferred {
        if known == 0 || !n.is_multiple_of(known) {
            return Err(invalid(format!(
                "reshape: cannot infer shape[{i}] of {shape:?} for an array of shape {dims:?} \
                 ({n} elements)"
            ))
            .into());
        }
        out[i] = n / known;
    } else if known != n {
        return Err(invalid(format!(
            "reshape: shape {shape:?} has {known} elements, the array (shape {dims:?}) {n}"
        ))
        .into());
    }
    Ok(out)
}

/// A view's extents and its first element's offset (in elements) from `a[key]`.
pub struct Indexed {
    pub dims: Vec<u64>,
    pub offset: u64,
}

fn strided(dims: &[u64], what: &str) -> PyErr {
    unsupported(format!(
        "DeviceArray{dims:?}[...]: {what} would not be contiguous, and device arrays only \
         have contiguous views (integers on leading axes, then one slice with step 1, then \
         whole axes); copy it through the host instead: rt.put(a.numpy()[...], device)"
    ))
}

/// `a[key]` as a contiguous view of an array of extents `dims`: integers index the leading
/// axes, then at most one slice with step 1, then only full slices (`:`) or one `...`.
pub fn index(dims: &[u64], key: &Bound<'_, PyAny>) -> XResult<Indexed> {
    let items: Vec<Bound<'_, PyAny>> = match key.cast::<PyTuple>() {
        Ok(t) => t.iter().collect(),
        Err(_) => vec![key.clone()],
    };
    let mut offset = 0u64;
    let mut axis = 0usize;
    let mut out: Vec<u64> = Vec::with_capacity(dims.len());
    // Once an axis keeps more than one position (a slice, or `...` over it), every later
    // axis must be taken whole.
    let mut narrowed = false;
    let mut ellipsis = false;
    for (k, item) in items.iter().enumerate() {
        if item.is_instance_of::<PyEllipsis>() {
            if ellipsis {
                return Err(
                    PyIndexError::new_err("an index can only have a single ellipsis").into(),
                );
            }
            ellipsis = true;
            // The axes the items after it do not name are taken whole.
            let after = items.len() - k - 1;
            let whole = dims.len().saturating_sub(axis + after);
            for _ in 0..whole {
                out.push(dims[axis]);
                narrowed |= dims[axis] > 1;
                axis += 1;
            }
            continue;
        }
        let Some(&extent) = dims.get(axis) else {
            return Err(PyIndexError::new_err(format!(
                "too many indices for a device array of {} dimensions",
                dims.len()
            ))
            .into());
        };
        // Elements per step along this axis.
        let inner = elements(&dims[axis + 1..])?;
        if let Ok(slice) = item.cast::<PySlice>() {
            let len = i64::try_from(extent)
                .map_err(|_| invalid(format!("axis {axis}: extent {extent} is too large")))?;
            let ix = slice.indices(len as isize)?;
            let whole = ix.slicelength as u64 == extent && (ix.step == 1 || extent <= 1);
            if whole {
                out.push(extent);
                narrowed |= extent > 1;
            } else if narrowed {
                return Err(strided(
                    dims,
                    &format!("slicing axis {axis} after an earlier axis kept several positions"),
                )
                .into());
            } else if ix.step != 1 && ix.slicelength > 1 {
                return Err(strided(dims, &format!("a step of {} on axis {axis}", ix.step)).into());
            } else {
                narrowed = ix.slicelength > 1;
                let start = if ix.slicelength == 0 {
                    0
                } else {
                    ix.start as u64
                };
                offset = start
                    .checked_mul(inner)
                    .and_then(|s| offset.checked_add(s))
                    .ok_or_else(|| invalid("index offset overflows 64 bits"))?;
                out.push(ix.slicelength as u64);
            }
            axis += 1;
            continue;
        }
        let i: i64 = item.extract().map_err(|_| {
            PyIndexError::new_err(format!(
                "index {k} is a {}: device arrays take integers, slices and `...`",
                item.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })?;
        if narrowed {
            return Err(strided(
                dims,
                &format!("an integer on axis {axis} after an axis that kept several positions"),
            )
            .into());
        }
        let e = extent as i64;
        let j = if i < 0 { i + e } else { i };
        if j < 0 || j >= e {
            return Err(PyIndexError::new_err(format!(
                "index {i} is out of bounds for axis {axis} with size {extent}"
            ))
            .into());
        }
        offset = (j as u64)
            .checked_mul(inner)
            .and_then(|s| offset.checked_add(s))
            .ok_or_else(|| invalid("index offset overflows 64 bits"))?;
        axis += 1;
    }
    out.extend_from_slice(&dims[axis.min(dims.len())..]);
    Ok(Indexed { dims: out, offset })
}

/// The extents of `transpose(axes)` (reversed when `axes` is empty) if it keeps the layout:
/// the axes of extent other than 1 stay in their order. Otherwise an error saying that it
/// would need a copy.
pub fn transpose(dims: &[u64], axes: &[i64]) -> XResult<Vec<u64>> {
    let n = dims.len();
    let perm: Vec<usize> = if axes.is_empty() {
        (0..n).rev().collect()
    } else {
        if axes.len() != n {
            return Err(invalid(format!(
                "transpose: axes {axes:?} do not match the array's {n} dimensions"
            ))
            .into());
        }
        let mut seen = vec![false; n];
        let mut p = Vec::with_capacity(n);
        for (i, &a) in axes.iter().enumerate() {
            let j = if a < 0 { a + n as i64 } else { a };
            if j < 0 || j >= n as i64 || seen[j as usize] {
                return Err(invalid(format!(
                    "transpose: axes[{i}] = {a} is out of range or repeated (axes {axes:?})"
                ))
                .into());
            }
            seen[j as usize] = true;
            p.push(j as usize);
        }
        p
    };
    let moved: Vec<usize> = perm.iter().copied().filter(|&a| dims[a] != 1).collect();
    if moved.windows(2).any(|w| w[0] > w[1]) {
        return Err(unsupported(format!(
            "transpose{perm:?} of a device array of shape {dims:?} would reorder its elements: \
             device arrays only have views that keep the layout (moving axes of extent 1); \
             copy it through the host instead: rt.put(a.numpy().transpose(...), device)"
        ))
        .into());
    }
    Ok(perm.iter().map(|&a| dims[a]).collect())
}
