//! Decoding and checking of host kernel arguments, and aliasing-safe input views.

use super::elem::Elem;
use super::{HostArg, KernelError};

/// A raw buffer argument: `len` bytes at `ptr`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Raw {
    pub ptr: *mut u8,
    pub len: usize,
}

impl Raw {
    /// True if both byte ranges share at least one byte.
    pub fn overlaps(&self, other: &Raw) -> bool {
        let (a, b) = (self.ptr as usize, other.ptr as usize);
        self.len > 0
            && other.len > 0
            && a < b.saturating_add(other.len)
            && b < a.saturating_add(self.len)
    }
}

fn describe(a: Option<&HostArg>) -> String {
    match a {
        None => "nothing".to_string(),
        Some(HostArg::Buffer { len, .. }) => format!("a buffer of {len} bytes"),
        Some(HostArg::Scalar(s)) => format!("the immediate {s}"),
    }
}

fn bad(index: usize, expected: impl Into<String>, got: Option<&HostArg>) -> KernelError {
    KernelError::BadArgument {
        index,
        expected: expected.into(),
        got: describe(got),
    }
}

/// Checks the number of arguments.
pub(crate) fn expect_count(args: &[HostArg], n: usize) -> Result<(), KernelError> {
    if args.len() == n {
        Ok(())
    } else {
        Err(KernelError::BadArgument {
            index: args.len().min(n),
            expected: format!("{n} arguments"),
            got: format!("{} arguments", args.len()),
        })
    }
}

/// An immediate of exactly element type `T`.
pub(crate) fn scalar<T: Elem>(args: &[HostArg], i: usize) -> Result<T, KernelError> {
    match args.get(i) {
        Some(HostArg::Scalar(s)) => T::from_scalar(s)
            .ok_or_else(|| bad(i, format!("a {} immediate", T::DTYPE), args.get(i))),
        other => Err(bad(i, format!("a {} immediate", T::DTYPE), other)),
    }
}

/// An `i64` element count or extent: must be non-negative and fit in `usize`.
pub(crate) fn extent(args: &[HostArg], i: usize) -> Result<usize, KernelError> {
    let v = scalar::<i64>(args, i)?;
    usize::try_from(v).map_err(|_| bad(i, "a non-negative i64 extent", args.get(i)))
}

/// `rows * cols`, or an error naming argument `i` on overflow.
pub(crate) fn product(
    args: &[HostArg],
    i: usize,
    rows: usize,
    cols: usize,
) -> Result<usize, KernelError> {
    rows.checked_mul(cols)
        .ok_or_else(|| bad(i, "extents whose product fits in memory", args.get(i)))
}

/// Buffer argument `i`, which must hold exactly `count` elements of `T`.
pub(crate) fn buffer<T: Elem>(
    args: &[HostArg],
    i: usize,
    count: usize,
) -> Result<Raw, KernelError> {
    let expected = || {
        format!(
            "a buffer of {} bytes ({count} x {})",
            count.saturating_mul(T::SIZE),
            T::DTYPE
        )
    };
    match args.get(i) {
        Some(&HostArg::Buffer { ptr, len }) => {
            if count.checked_mul(T::SIZE) == Some(len) && (len == 0 || !ptr.is_null()) {
                Ok(Raw { ptr, len })
            } else {
                Err(bad(i, expected(), args.get(i)))
            }
        }
        other => Err(bad(i, expected(), other)),
    }
}

/// An input buffer, read in place or, when it overlaps an output in a way that in-place reading
/// would not see the original values, from a snapshot copy.
pub(crate) struct Src {
    raw: *const u8,
    copy: Option<Vec<u8>>,
}

impl Src {
    /// Prepares input `input` (elements of `elem` bytes) against the kernel's `outputs`
    /// (buffer, element size). `same_index`: the kernel reads element `i` of this input before
    /// it writes element `i` of each output, and nothing else of the output at that point, so
    /// an output starting at the same address with the same element size is harmless. Any
    /// other overlap makes a copy.
    ///
    /// # Safety
    /// `input` must be valid for reading `input.len` bytes, with no concurrent writer.
    pub unsafe fn new(input: Raw, elem: usize, outputs: &[(Raw, usize)], same_index: bool) -> Src {
        let conflict = outputs.iter().any(|(o, size)| {
            input.overlaps(o) && !(same_index && o.ptr == input.ptr && *size == elem)
        });
        let copy = if conflict {
            // SAFETY: `input.len > 0` (it overlaps something), so `ptr` is non-null, and the
            // caller guarantees it is valid for reading `len` bytes with no concurrent writer;
            // the slice lives only for this copy.
            Some(unsafe { std::slice::from_raw_parts(input.ptr.cast_const(), input.len) }.to_vec())
        } else {
            None
        };
        Src {
            raw: input.ptr.cast_const(),
            copy,
        }
    }

    /// Where to read: the original buffer or the copy, valid while `self` lives.
    pub fn ptr(&self) -> *const u8 {
        match &self.copy {
            Some(v) => v.as_ptr(),
            None => self.raw,
        }
    }
}
