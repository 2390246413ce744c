//! The gemm, `C = alpha·op(A)·op(B) + beta·C` over row-major matrices: its one shape type
//! [`Gemm`] (the IR's [`GemmThunk`] names its operands by slices, a backend's launch by device
//! ranges), the one check of the operands against the shape, and the one restatement of the
//! row-major gemm for a column-major BLAS ([`Gemm::column_major`]), used by the host backend,
//! cuBLAS and rocBLAS.

use super::{DType, Slice};

/// Element types a `Gemm` supports. f16/bf16 accumulate in f32.
pub const GEMM_DTYPES: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];

/// A gemm, row-major: `C = alpha * op(A) * op(B) + beta * C` for each batch entry, with
/// `op(A)` of shape m×k and `op(B)` k×n. `lda`/`ldb`/`ldc` are row strides (in elements) of the
/// matrices as stored (A is stored k×m when `trans_a`). Batch strides are in elements.
///
/// `T` names the operands: a [`Slice`] in the IR ([`GemmThunk`]), a device range in a
/// backend's launch (`backend::GemmLaunch`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gemm<T> {
    pub a: T,
    pub b: T,
    pub c: T,
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub lda: u64,
    pub ldb: u64,
    pub ldc: u64,
    pub trans_a: bool,
    pub trans_b: bool,
    pub alpha: f64,
    pub beta: f64,
    pub dtype: DType,
    pub batch: u64,
    pub stride_a: u64,
    pub stride_b: u64,
    pub stride_c: u64,
}

/// The `Gemm` thunk: operands are slices of the program's allocations.
pub type GemmThunk = Gemm<Slice>;

/// One of a gemm's three matrices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmMatrix {
    A,
    B,
    C,
}

impl GemmMatrix {
    pub const ALL: [GemmMatrix; 3] = [GemmMatrix::A, GemmMatrix::B, GemmMatrix::C];

    /// The operand's field name: `a`, `b`, `c`.
    pub const fn name(self) -> &'static str {
        match self {
            GemmMatrix::A => "a",
            GemmMatrix::B => "b",
            GemmMatrix::C => "c",
        }
    }
}

/// What the operand check needs to know of an operand.
pub trait GemmOperand: Copy {
    /// Where the operand starts (an offset in an allocation, or an address): it must be
    /// aligned to the element size.
    fn start(&self) -> u64;
    /// The bytes the operand holds.
    fn bytes(&self) -> u64;
    /// The operand in errors, e.g. `the slice %0[0..+64]`.
    fn describe(&self) -> String;
    /// Its start in errors, e.g. `offset 6`.
    fn describe_start(&self) -> String;
    /// Whether the two operands share a byte (operands of no bytes share none).
    fn overlaps(&self, other: &Self) -> bool;
}

impl GemmOperand for Slice {
    fn start(&self) -> u64 {
        self.offset
    }
    fn bytes(&self) -> u64 {
        self.size
    }
    fn describe(&self) -> String {
        format!("the slice {self}")
    }
    fn describe_start(&self) -> String {
        format!("offset {}", self.offset)
    }
    fn overlaps(&self, other: &Self) -> bool {
        Slice::overlaps(self, other)
    }
}

/// An operand that does not fit the gemm's shape: the field at fault and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct GemmError {
    /// The field, e.g. `lda`, `stride_b`, `c`.
    pub field: String,
    pub message: String,
}

/// The largest byte offset, stride (in bytes) or extent a gemm may use: `i64::MAX`.
const MAX_GEMM_OFFSET: u64 = i64::MAX as u64;

fn gemm_error(field: impl Into<String>, message: impl Into<String>) -> GemmError {
    GemmError {
        field: field.into(),
        message: message.into(),
    }
}

/// Elements spanned by `batch` row-major `rows×cols` matrices with row stride `ld`, `stride`
/// elements apart: `(batch-1)·stride + (rows-1)·ld + cols`, 0 when a matrix is empty. `None`
/// when the batch is empty, the matrices of a batch overlap (`stride` smaller than one
/// matrix) or the count overflows.
fn span(rows: u64, cols: u64, ld: u64, batch: u64, stride: u64) -> Option<u64> {
    let last = batch.checked_sub(1)?;
    if rows == 0 || cols == 0 {
        return Some(0);
    }
    let one = (rows - 1).checked_mul(ld)?.checked_add(cols)?;
    if last > 0 && stride < one {
        return None;
    }
    last.checked_mul(stride)?.checked_add(one)
}

impl<T> Gemm<T> {
    /// Rows and columns of A as stored.
    pub fn stored_a(&self) -> (u64, u64) {
        if self.trans_a {
            (self.k, self.m)
        } else {
            (self.m, self.k)
        }
    }

    /// Rows and columns of B as stored.
    pub fn stored_b(&self) -> (u64, u64) {
        if self.trans_b {
            (self.n, self.k)
        } else {
            (self.k, self.n)
        }
    }

    /// Rows, columns, row stride and batch stride of one matrix as stored.
    pub fn layout(&self, m: GemmMatrix) -> (u64, u64, u64, u64) {
        match m {
            GemmMatrix::A => {
                let (r, c) = self.stored_a();
                (r, c, self.lda, self.stride_a)
            }
            GemmMatrix::B => {
                let (r, c) = self.stored_b();
                (r, c, self.ldb, self.stride_b)
            }
            GemmMatrix::C => (self.m, self.n, self.ldc, self.stride_c),
        }
    }

    /// The same gemm with other names for its operands.
    pub fn with_operands<U>(&self, a: U, b: U, c: U) -> Gemm<U> {
        Gemm {
            a,
            b,
            c,
            m: self.m,
            n: self.n,
            k: self.k,
            lda: self.lda,
            ldb: self.ldb,
            ldc: self.ldc,
            trans_a: self.trans_a,
            trans_b: self.trans_b,
            alpha: self.alpha,
            beta: self.beta,
            dtype: self.dtype,
            batch: self.batch,
            stride_a: self.stride_a,
            stride_b: self.stride_b,
            stride_c: self.stride_c,
        }
    }

    /// The batch count is at least 1, and it and `m`, `n`, `k` fit an `i64` (the BLAS
    /// libraries and the host's gemm take signed or pointer-sized dimensions).
    pub fn check_batch(&self) -> Result<(), GemmError> {
        if self.batch == 0 {
            return Err(gemm_error("batch", "must be at least 1"));
        }
        for (field, v) in [
            ("batch", self.batch),
            ("m", self.m),
            ("n", self.n),
            ("k", self.k),
        ] {
            if v > MAX_GEMM_OFFSET {
                return Err(gemm_error(
                    field,
                    format!("{v} is larger than the largest supported extent {MAX_GEMM_OFFSET}"),
                ));
            }
        }
        Ok(())
    }
}

impl<T: GemmOperand> Gemm<T> {
    /// Checks the batch count, every operand ([`Self::check_operand`]) and that the output
    /// overlaps no input ([`Self::check_disjoint`]).
    pub fn check(&self) -> Result<(), GemmError> {
        self.check_batch()?;
        for m in GemmMatrix::ALL {
            self.check_operand(m)?;
        }
        self.check_disjoint()
    }

    /// The output C shares no byte with A or B: the one overlap check of the validator, the
    /// host backend, cuBLAS and rocBLAS.
    pub fn check_disjoint(&self) -> Result<(), GemmError> {
        if self.c.overlaps(&self.a) || self.c.overlaps(&self.b) {
            return Err(gemm_error("c", "the output overlaps an input"));
        }
        Ok(())
    }

    /// Checks one operand against the shape: its row stride covers a row, the matrices of a
    /// batch do not overlap, it holds the bytes every batch entry touches, and it starts
    /// aligned to the element type. (Whether the operand exists depends on memory and is the
    /// caller's to check.)
    pub fn check_operand(&self, m: GemmMatrix) -> Result<(), GemmError> {
        self.check_batch()?;
        let name = m.name();
        let (rows, cols, ld, stride) = self.layout(m);
        let op = self.operand(m);
        if ld < cols.max(1) {
            return Err(gemm_error(
                format!("ld{name}"),
                format!("row stride {ld} is smaller than the {cols} columns of {name}"),
            ));
        }
        let es = self.dtype.size() as u64;
        // Row and batch strides become signed byte offsets in the backends (the host's gemm
        // takes `isize` strides, BLAS 64-bit ones): each, and the start of the last batch
        // entry, must fit, even where the shape does not need them (one row, one entry).
        let bytes_fit = |elems: Option<u64>| {
            elems
                .and_then(|e| e.checked_mul(es))
                .is_some_and(|b| b <= MAX_GEMM_OFFSET)
        };
        if !bytes_fit(Some(ld)) {
            return Err(gemm_error(
                format!("ld{name}"),
                format!(
                    "row stride {ld} elements of {} does not fit a signed 64-bit byte offset",
                    self.dtype
                ),
            ));
        }
        let last = self.batch.saturating_sub(1);
        if !bytes_fit(Some(stride)) || !bytes_fit(last.checked_mul(stride)) {
            return Err(gemm_error(
                format!("stride_{name}"),
                format!(
                    "batch stride {stride} elements of {} over {} entries does not fit a \
                     signed 64-bit byte offset",
                    self.dtype, self.batch
                ),
            ));
        }
        match span(rows, cols, ld, self.batch, stride).and_then(|n| n.checked_mul(es)) {
            Some(n) if n <= op.bytes() => {}
            Some(n) => {
                return Err(gemm_error(
                    name,
                    format!(
                        "{name} needs {n} bytes, {} has {}",
                        op.describe(),
                        op.bytes()
                    ),
                ));
            }
            None => {
                return Err(gemm_error(
                    format!("stride_{name}"),
                    format!("batch stride {stride} is smaller than one matrix, or sizes overflow"),
                ));
            }
        }
        if !op.start().is_multiple_of(es) {
            return Err(gemm_error(
                name,
                format!("{} is not aligned to {}", op.describe_start(), self.dtype),
            ));
        }
        Ok(())
    }
}

impl<T: Copy> Gemm<T> {
    /// The operand of one matrix.
    pub fn operand(&self, m: GemmMatrix) -> T {
        match m {
            GemmMatrix::A => self.a,
            GemmMatrix::B => self.b,
            GemmMatrix::C => self.c,
        }
    }

    /// The gemm as a column-major BLAS (cuBLAS, rocBLAS) computes it. A row-major m×n matrix
    /// with row stride `ld` is, read column-major, its transpose (n×m, leading dimension
    /// `ld`), so the row-major `C = op(A)·op(B)` is the column-major `Cᵀ = op(B)ᵀ·op(A)ᵀ`:
    /// the BLAS gets B as its first operand and A as its second, `m` and `n` swapped, each
    /// operand's transpose flag, leading dimension and batch stride kept with the operand,
    /// and C as it is. The scalars, the element type and the batch count do not change.
    pub fn column_major(&self) -> ColumnMajorGemm<T> {
        ColumnMajorGemm {
            trans_a: self.trans_b,
            trans_b: self.trans_a,
            m: self.n,
            n: self.m,
            k: self.k,
            a: self.b,
            lda: self.ldb,
            stride_a: self.stride_b,
            b: self.a,
            ldb: self.lda,
            stride_b: self.stride_a,
            c: self.c,
            ldc: self.ldc,
            stride_c: self.stride_c,
        }
    }
}

/// A gemm in a column-major BLAS's terms ([`Gemm::column_major`]): `C = op(A)·op(B)` with
/// `op(A)` m×k and `op(B)` k×n, element (i, j) of a matrix with leading dimension `ld` at
/// `i + j·ld`. `a` is the row-major gemm's B and `b` its A.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ColumnMajorGemm<T> {
    pub trans_a: bool,
    pub trans_b: bool,
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub a: T,
    pub lda: u64,
    pub stride_a: u64,
    pub b: T,
    pub ldb: u64,
    pub stride_b: u64,
    pub c: T,
    pub ldc: u64,
    pub stride_c: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gemm of `dtype` over operands that are just byte counts starting at 0.
    #[derive(Clone, Copy, Debug, PartialEq)]
    struct Bytes(u64, u64);

    impl GemmOperand for Bytes {
        fn start(&self) -> u64 {
            self.0
        }
        fn bytes(&self) -> u64 {
            self.1
        }
        fn describe(&self) -> String {
            "the test operand".into()
        }
        fn describe_start(&self) -> String {
            format!("start {}", self.0)
        }
        /// Each test operand is a buffer of its own.
        fn overlaps(&self, _: &Self) -> bool {
            false
        }
    }

    fn gemm(m: u64, n: u64, k: u64, ta: bool, tb: bool) -> Gemm<usize> {
        let (lda, ldb) = (if ta { m } else { k }, if tb { k } else { n });
        Gemm {
            a: 1,
            b: 2,
            c: 3,
            m,
            n,
            k,
            lda,
            ldb,
            ldc: n,
            trans_a: ta,
            trans_b: tb,
            alpha: 1.0,
            beta: 0.0,
            dtype: DType::F64,
            batch: 1,
            stride_a: 0,
            stride_b: 0,
            stride_c: 0,
        }
    }

    #[test]
    fn operand_extents() {
        assert_eq!(span(2, 3, 4, 1, 0), Some(7));
        assert_eq!(span(2, 3, 4, 3, 10), Some(27));
        assert_eq!(span(0, 3, 4, 3, 10), Some(0));
        assert_eq!(span(2, 3, 4, 0, 10), None);
        assert_eq!(span(2, 3, 4, 2, 6), None, "batch entries overlap");
        assert_eq!(span(2, 3, u64::MAX, 1, 0), None, "overflow");
    }

    #[test]
    fn operands_are_checked_against_the_shape() {
        // a: 2×3 f64 (48 bytes), b: 3×4 (96), c: 2×4 (64).
        let g = gemm(2, 4, 3, false, false).with_operands(Bytes(0, 48), Bytes(8, 96), Bytes(0, 64));
        assert_eq!(g.check(), Ok(()));
        let field = |g: Gemm<Bytes>| g.check().err().map(|e| e.field);
        assert_eq!(field(Gemm { batch: 0, ..g }).as_deref(), Some("batch"));
        assert_eq!(field(Gemm { lda: 2, ..g }).as_deref(), Some("lda"));
        assert_eq!(
            field(Gemm {
                c: Bytes(0, 63),
                ..g
            })
            .as_deref(),
            Some("c")
        );
        assert_eq!(
            field(Gemm {
                b: Bytes(4, 96),
                ..g
            })
            .as_deref(),
            Some("b")
        );
        let batched = Gemm {
            batch: 2,
            stride_a: 6,
            stride_b: 12,
            stride_c: 7,
            a: Bytes(0, 96),
            b: Bytes(0, 192),
            c: Bytes(0, 1000),
            ..g
        };
        assert_eq!(field(batched).as_deref(), Some("stride_c"));
        assert_eq!(
            Gemm {
                stride_c: 8,
                ..batched
            }
            .check(),
            Ok(())
        );
        let e = Gemm {
            c: Bytes(0, 63),
            ..g
        }
        .check()
        .err()
        .map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("c: c needs 64 bytes, the test operand has 63")
        );
        // k = 0: A and B are empty, but their row strides must still be at least 1.
        let empty =
            gemm(2, 4, 0, false, false).with_operands(Bytes(0, 0), Bytes(0, 0), Bytes(0, 64));
        assert_eq!(Gemm { lda: 1, ..empty }.check(), Ok(()));
        assert_eq!(field(Gemm { lda: 0, ..empty }).as_deref(), Some("lda"));
    }

    #[test]
    fn strides_and_extents_fit_signed_offsets() {
        // One row of one entry: neither stride is needed by the shape, both must still fit
        // an isize in bytes (8-byte elements: at most 2^60 - 1 elements).
        let g = gemm(1, 1, 1, false, false).with_operands(Bytes(0, 8), Bytes(0, 8), Bytes(0, 8));
        assert_eq!(g.check(), Ok(()));
        let field = |g: Gemm<Bytes>| g.check().err().map(|e| e.field);
        let big = 1u64 << 60;
        assert_eq!(Gemm { lda: big - 1, ..g }.check(), Ok(()));
        assert_eq!(field(Gemm { lda: big, ..g }).as_deref(), Some("lda"));
        assert_eq!(field(Gemm { ldb: u64::MAX, ..g }).as_deref(), Some("ldb"));
        assert_eq!(
            field(Gemm { stride_c: big, ..g }).as_deref(),
            Some("stride_c")
        );
        // Empty matrices bound nothing: m, n, k and batch have their own limit.
        let empty =
            gemm(0, 0, 0, false, false).with_operands(Bytes(0, 0), Bytes(0, 0), Bytes(0, 0));
        let empty = Gemm {
            lda: 1,
            ldb: 1,
            ldc: 1,
            ..empty
        };
        assert_eq!(empty.check(), Ok(()));
        assert_eq!(
            field(Gemm {
                m: 1 << 63,
                ..empty
            })
            .as_deref(),
            Some("m")
        );
        assert_eq!(
            field(Gemm {
                k: u64::MAX,
                ..empty
            })
            .as_deref(),
            Some("k")
        );
        // Many empty entries: the last one's start, (batch - 1) · stride, must fit.
        let many = Gemm {
            batch: 1 << 40,
            stride_a: 1 << 30,
            ..empty
        };
        assert_eq!(field(many).as_deref(), Some("stride_a"));
        assert_eq!(
            Gemm {
                stride_a: 1 << 10,
                ..many
            }
            .check(),
            Ok(())
        );
    }

    #[test]
    fn the_output_overlapping_an_input_is_refused() {
        // a: 2×3 f64 (48 bytes), b: 3×4 (96), c: 2×4 (64), all in allocation 0.
        let g = gemm(2, 4, 3, false, false).with_operands(
            Slice::new(0, 0, 48),
            Slice::new(0, 48, 96),
            Slice::new(0, 144, 64),
        );
        assert_eq!(g.check(), Ok(()));
        let overlap = GemmError {
            field: "c".into(),
            message: "the output overlaps an input".into(),
        };
        for c in [Slice::new(0, 40, 64), Slice::new(0, 136, 64)] {
            assert_eq!(Gemm { c, ..g }.check_disjoint(), Err(overlap.clone()));
            assert_eq!(Gemm { c, ..g }.check(), Err(overlap.clone()));
        }
        // Touching is not overlapping; other allocations never overlap.
        assert_eq!(
            Gemm {
                c: Slice::new(1, 0, 64),
                ..g
            }
            .check(),
            Ok(())
        );
        let empty_a = Gemm {
            k: 0,
            a: Slice::new(0, 144, 0),
            b: Slice::new(0, 144, 0),
            lda: 1,
            ..g
        };
        assert_eq!(empty_a.check_disjoint(), Ok(()));
    }

    /// Column-major gemm as BLAS defines it, on f64 slices indexed from 0.
    #[allow(clippy::too_many_arguments)]
    fn blas_reference(
        transa: bool,
        transb: bool,
        m: usize,
        n: usize,
        k: usize,
        a: &[f64],
        lda: usize,
        b: &[f64],
        ldb: usize,
        c: &mut [f64],
        ldc: usize,
    ) {
        for j in 0..n {
            for i in 0..m {
                let mut s = 0.0;
                for p in 0..k {
                    let av = if transa {
                        a[p + i * lda]
                    } else {
                        a[i + p * lda]
                    };
                    let bv = if transb {
                        b[j + p * ldb]
                    } else {
                        b[p + j * ldb]
                    };
                    s += av * bv;
                }
                c[i + j * ldc] = s;
            }
        }
    }

    #[test]
    fn row_major_maps_to_column_major() {
        let (m, n, k) = (3usize, 4usize, 5usize);
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            // Stored shapes (row-major) with padded leading dimensions.
            let (ar, ac) = if ta { (k, m) } else { (m, k) };
            let (br, bc) = if tb { (n, k) } else { (k, n) };
            let (lda, ldb, ldc) = (ac + 2, bc + 1, n + 3);
            let a: Vec<f64> = (0..ar * lda).map(|i| (i as f64 * 0.37).sin()).collect();
            let b: Vec<f64> = (0..br * ldb).map(|i| (i as f64 * 0.11).cos()).collect();
            // The row-major definition.
            let at = |i: usize, p: usize| if ta { a[p * lda + i] } else { a[i * lda + p] };
            let bt = |p: usize, j: usize| if tb { b[j * ldb + p] } else { b[p * ldb + j] };
            let mut want = vec![0.0; m * ldc];
            for i in 0..m {
                for j in 0..n {
                    want[i * ldc + j] = (0..k).map(|p| at(i, p) * bt(p, j)).sum();
                }
            }
            let g = Gemm {
                lda: lda as u64,
                ldb: ldb as u64,
                ldc: ldc as u64,
                ..gemm(m as u64, n as u64, k as u64, ta, tb)
            };
            let cm = g.column_major();
            assert_eq!((cm.a, cm.b, cm.c), (2, 1, 3));
            let operand = |x: usize| if x == 1 { &a } else { &b };
            let mut got = vec![0.0; m * ldc];
            blas_reference(
                cm.trans_a,
                cm.trans_b,
                cm.m as usize,
                cm.n as usize,
                cm.k as usize,
                operand(cm.a),
                cm.lda as usize,
                operand(cm.b),
                cm.ldb as usize,
                &mut got,
                cm.ldc as usize,
            );
            for i in 0..m {
                for j in 0..n {
                    let (x, y) = (got[i * ldc + j], want[i * ldc + j]);
                    assert!(
                        (x - y).abs() < 1e-12,
                        "ta={ta} tb={tb} ({i},{j}): {x} vs {y}"
                    );
                }
            }
        }
    }
}
