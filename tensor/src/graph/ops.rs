//! The operations of a tensor graph: the elementwise op sets with their names and element-type
//! rules, comparisons, dot dimension numbers, and [`Op`], one node's operation.

use super::Graph;
pub use xthunk_core::ir::ReduceOp;
use xthunk_core::ir::{Attributes, DType};

/// Which family an element type belongs to, for the ops' type rules.
pub fn is_int(d: DType) -> bool {
    d.is_int()
}

/// Signed integer types.
pub fn is_signed_int(d: DType) -> bool {
    d.is_signed_int()
}

/// Unsigned integer types (pred is not one: it is a boolean).
pub fn is_unsigned_int(d: DType) -> bool {
    d.is_unsigned_int()
}

/// The real float types of the ops' rules: f16, bf16, f32, f64 and the 8-bit floats (which
/// compute in f32 and round once to their type).
pub fn is_float(d: DType) -> bool {
    d.is_float() || d.is_f8()
}

/// Bits of an element.
pub fn bits(d: DType) -> u32 {
    if d == DType::Pred {
        1
    } else {
        d.size() as u32 * 8
    }
}

macro_rules! op_enum {
    ($(#[$m:meta])* $name:ident { $($v:ident => $s:literal),* $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name { $($v),* }
        impl $name {
            /// Every op of the set.
            pub const ALL: &'static [$name] = &[$($name::$v),*];
            /// StableHLO's name of the op.
            pub const fn name(self) -> &'static str {
                match self { $($name::$v => $s),* }
            }
        }
    };
}

op_enum!(
    /// Elementwise unary operations.
    UnaryOp {
        Abs => "abs", Cbrt => "cbrt", Ceil => "ceil", CountLeadingZeros => "count_leading_zeros",
        Cosine => "cosine", Exponential => "exponential",
        ExponentialMinusOne => "exponential_minus_one", Floor => "floor",
        IsFinite => "is_finite", Log => "log", LogPlusOne => "log_plus_one",
        Logistic => "logistic", Negate => "negate", Not => "not", Popcnt => "popcnt",
        RoundNearestAfz => "round_nearest_afz", RoundNearestEven => "round_nearest_even",
        Rsqrt => "rsqrt", Sign => "sign", Sine => "sine", Sqrt => "sqrt", Tan => "tan",
        Tanh => "tanh",
        // CHLO's (`chlo.<name>`): the ones JAX emits for its special functions.
        Acos => "acos", Acosh => "acosh", Asin => "asin", Asinh => "asinh", Atan => "atan",
        Atanh => "atanh", BesselI1e => "bessel_i1e", Cosh => "cosh", Digamma => "digamma",
        Erf => "erf", Erfc => "erfc", ErfInv => "erf_inv", IsInf => "is_inf",
        IsNegInf => "is_neg_inf", IsPosInf => "is_pos_inf", Lgamma => "lgamma", Sinh => "sinh",
        // A complex value's parts (of a real value: itself and zero).
        Real => "real", Imag => "imag",
    }
);

op_enum!(
    /// Elementwise binary operations.
    BinaryOp {
        Add => "add", And => "and", Atan2 => "atan2", Divide => "divide",
        Maximum => "maximum", Minimum => "minimum", Multiply => "multiply", Or => "or",
        Power => "power", Remainder => "remainder", ShiftLeft => "shift_left",
        ShiftRightArithmetic => "shift_right_arithmetic",
        ShiftRightLogical => "shift_right_logical", Subtract => "subtract", Xor => "xor",
        // CHLO's.
        NextAfter => "next_after", Polygamma => "polygamma", Zeta => "zeta",
        // Two f32 (f64) parts → c64 (c128).
        Complex => "complex",
    }
);

op_enum!(
    /// `compare`'s direction.
    CompareDirection { Eq => "EQ", Ne => "NE", Ge => "GE", Gt => "GT", Le => "LE", Lt => "LT" }
);

op_enum!(
    /// `compare`'s comparison type.
    CompareType { Float => "FLOAT", TotalOrder => "TOTALORDER", Signed => "SIGNED", Unsigned => "UNSIGNED" }
);

impl UnaryOp {
    /// Whether the op takes operands of type `d`.
    pub fn accepts(self, d: DType) -> bool {
        use UnaryOp::*;
        if d.is_complex() {
            // The ones the generated kernels compute on complex values (the spec allows more).
            return matches!(
                self,
                Abs | Sign
                    | Negate
                    | Exponential
                    | ExponentialMinusOne
                    | Log
                    | LogPlusOne
                    | Logistic
                    | Sqrt
                    | Rsqrt
                    | Cosine
                    | Sine
                    | Tan
                    | Tanh
                    | Real
                    | Imag
            );
        }
        match self {
            Abs | Sign => is_signed_int(d) || is_float(d),
            Negate => is_int(d) || is_float(d),
            CountLeadingZeros | Popcnt => is_int(d),
            Not => is_int(d) || d == DType::Pred,
            // The 8-bit floats compute in f32 and round once.
            _ => is_float(d),
        }
    }

    /// The result's element type for an operand of type `d`.
    pub fn result(self, d: DType) -> DType {
        use UnaryOp::*;
        if matches!(self, IsFinite | IsInf | IsNegInf | IsPosInf) {
            DType::Pred
        } else if matches!(self, Abs | Real | Imag) {
            // Of a complex value: its part type.
            d.complex_part().unwrap_or(d)
        } else {
            d
        }
    }

    /// Whether the op is CHLO's (`chlo.<name>`) rather than StableHLO's.
    pub const fn is_chlo(self) -> bool {
        use UnaryOp::*;
        matches!(
            self,
            Acos | Acosh
                | Asin
                | Asinh
                | Atan
                | Atanh
                | BesselI1e
                | Cosh
                | Digamma
                | Erf
                | Erfc
                | ErfInv
                | IsInf
                | IsNegInf
                | IsPosInf
                | Lgamma
                | Sinh
        )
    }
}

impl BinaryOp {
    /// Whether the op takes operands of type `d`.
    pub fn accepts(self, d: DType) -> bool {
        use BinaryOp::*;
        if d.is_complex() {
            return matches!(self, Add | Subtract | Multiply | Divide | Power);
        }
        match self {
            Complex => matches!(d, DType::F32 | DType::F64),
            Add | Multiply | Maximum | Minimum => true,
            Subtract | Divide | Remainder | Power => is_int(d) || is_float(d),
            Atan2 => is_float(d),
            NextAfter | Polygamma | Zeta => d.is_float(),
            And | Or | Xor => is_int(d) || d == DType::Pred,
            ShiftLeft | ShiftRightArithmetic | ShiftRightLogical => is_int(d),
        }
    }
}

impl BinaryOp {
    /// The result's element type for operands of type `d`.
    pub fn result(self, d: DType) -> DType {
        match self {
            BinaryOp::Complex => d.complex_of().unwrap_or(d),
            _ => d,
        }
    }

    /// Whether the op is CHLO's (`chlo.<name>`) rather than StableHLO's.
    pub const fn is_chlo(self) -> bool {
        matches!(
            self,
            BinaryOp::NextAfter | BinaryOp::Polygamma | BinaryOp::Zeta
        )
    }
}

impl CompareType {
    /// The comparison types StableHLO allows for elements of type `d`.
    pub fn accepts(self, d: DType) -> bool {
        match self {
            CompareType::Float => is_float(d) || d.is_complex(),
            CompareType::TotalOrder => is_float(d),
            CompareType::Signed => is_signed_int(d),
            CompareType::Unsigned => is_unsigned_int(d) || d == DType::Pred,
        }
    }
}

/// `fft`'s transform: complex to complex forward (`Fft`, e^-2πi·jk/n) and inverse (`Ifft`,
/// e^+2πi·jk/n, divided by n per dimension); real to the non-negative frequencies (`Rfft`:
/// the last dimension n becomes n/2 + 1); those frequencies back to real (`Irfft`: the last
/// dimension n/2 + 1 becomes n, the others completed by Hermitian symmetry).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FftType {
    Fft,
    Ifft,
    Rfft,
    Irfft,
}

impl FftType {
    /// Every type, with StableHLO's name.
    pub const ALL: [(FftType, &'static str); 4] = [
        (FftType::Fft, "FFT"),
        (FftType::Ifft, "IFFT"),
        (FftType::Rfft, "RFFT"),
        (FftType::Irfft, "IRFFT"),
    ];
}

/// `dot_general`'s dimension numbers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct DotDims {
    pub lhs_batch: Vec<usize>,
    pub rhs_batch: Vec<usize>,
    pub lhs_contracting: Vec<usize>,
    pub rhs_contracting: Vec<usize>,
}

/// `gather`'s dimension numbers (StableHLO's attributes of the same names).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct GatherDims {
    pub offset_dims: Vec<usize>,
    pub collapsed_slice_dims: Vec<usize>,
    pub operand_batching_dims: Vec<usize>,
    pub start_indices_batching_dims: Vec<usize>,
    pub start_index_map: Vec<usize>,
    pub index_vector_dim: usize,
}

/// `scatter`'s dimension numbers (StableHLO's attributes of the same names).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ScatterDims {
    pub update_window_dims: Vec<usize>,
    pub inserted_window_dims: Vec<usize>,
    pub input_batching_dims: Vec<usize>,
    pub scatter_indices_batching_dims: Vec<usize>,
    pub scatter_dims_to_operand_dims: Vec<usize>,
    pub index_vector_dim: usize,
}

/// `rng_bit_generator`'s algorithm (`DEFAULT` is Philox, as on XLA:CPU and XLA:GPU).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RngAlgorithm {
    ThreeFry,
    Philox,
}

/// `rng`'s distribution.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RngDistribution {
    /// Uniform in `[a, b)`.
    Uniform,
    /// Normal with mean `a` and standard deviation `b` (floating-point types only).
    Normal,
}

/// `reduce_window`'s window (StableHLO's attributes of the same names, one entry per
/// dimension; `padding` is `(low, high)`, either may be negative).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WindowDims {
    pub dimensions: Vec<u64>,
    pub strides: Vec<u64>,
    pub base_dilations: Vec<u64>,
    pub window_dilations: Vec<u64>,
    pub padding: Vec<(i64, i64)>,
}

/// `convolution`'s dimension numbers and window (StableHLO's attributes; the lists have one
/// entry per spatial dimension, `padding` is `(low, high)`, either may be negative).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ConvDims {
    pub input_batch: usize,
    pub input_feature: usize,
    pub input_spatial: Vec<usize>,
    pub kernel_input_feature: usize,
    pub kernel_output_feature: usize,
    pub kernel_spatial: Vec<usize>,
    pub output_batch: usize,
    pub output_feature: usize,
    pub output_spatial: Vec<usize>,
    pub window_strides: Vec<u64>,
    pub padding: Vec<(i64, i64)>,
    pub lhs_dilation: Vec<u64>,
    pub rhs_dilation: Vec<u64>,
    pub window_reversal: Vec<bool>,
    pub feature_group_count: u64,
    pub batch_group_count: u64,
}

/// One node's operation; its operands are the node's operand list, in the order each
/// variant names.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// The graph's parameter `index`.
    Parameter {
        index: usize,
        name: String,
    },
    /// Little-endian element bytes, row-major.
    Constant {
        bytes: Vec<u8>,
    },
    /// Indices along `dim`.
    Iota {
        dim: usize,
    },
    Unary(UnaryOp),
    Binary(BinaryOp),
    /// `lhs`, `rhs` → pred.
    Compare {
        direction: CompareDirection,
        kind: CompareType,
    },
    /// `pred`, `on_true`, `on_false`.
    Select,
    /// `inputs…` (one shape) → `body` applied element by element: the body maps one scalar
    /// of each input to one scalar (elementwise ops only, so it fuses like them).
    Map {
        body: Box<Graph>,
    },
    /// `min`, `operand`, `max`.
    Clamp,
    Convert,
    BitcastConvert,
    /// Rounded to a float format of `exponent_bits` and `mantissa_bits` and back (XLA's
    /// bit rounding: nearest even on the raw bits, out of range to ±inf, below the format's
    /// smallest normal to ±0, NaN unchanged).
    ReducePrecision {
        exponent_bits: u32,
        mantissa_bits: u32,
    },
    /// `fft` over the trailing `lengths.len()` (1 to 3) dimensions: see [`FftType`].
    Fft {
        kind: FftType,
        lengths: Vec<u64>,
    },
    /// Cholesky factorization of the matrices in the last two dimensions (symmetric
    /// positive definite; only the `lower` or upper triangle is read). `lapack`: LAPACK's
    /// `potrf` (the other triangle kept, a second result of i32 `info` per matrix: 0, or the
    /// 1-based column where the matrix is not positive definite); otherwise StableHLO's
    /// `cholesky` as XLA gives it (the other triangle zero, the whole matrix NaN when it is
    /// not positive definite).
    Cholesky {
        lower: bool,
        lapack: bool,
    },
    /// `a`, `b` → x with op(a) x = b (`left_side`) or x op(a) = b; op(a) is a or its
    /// transpose; a triangular (`lower` or upper), its diagonal read as ones when
    /// `unit_diagonal`.
    TriangularSolve {
        left_side: bool,
        lower: bool,
        unit_diagonal: bool,
        transpose_a: bool,
    },
    /// `initial_state` (u64, 2 words; 3 for Philox) → (output state, random bits of the
    /// second result's type), bit-exact with XLA: see `lower/rng.rs`.
    RngBitGenerator {
        algorithm: RngAlgorithm,
    },
    /// `a`, `b` (scalars of the result's type) → numbers drawn from `distribution` with a
    /// generator seeded by the execution (the program's `execution_seed`); each draw of a
    /// program, a loop's trips included, gets numbers of its own: see `lower/rng.rs`.
    Rng {
        distribution: RngDistribution,
    },
    /// `operand`; its dimension `i` is the result's dimension `dims[i]`.
    BroadcastInDim {
        dims: Vec<usize>,
    },
    Reshape,
    /// The result's dimension `i` is the operand's dimension `perm[i]`.
    Transpose {
        perm: Vec<usize>,
    },
    /// Operands joined along `dim`.
    Concatenate {
        dim: usize,
    },
    Slice {
        start: Vec<u64>,
        limit: Vec<u64>,
        strides: Vec<u64>,
    },
    /// `operand`, one scalar integer start per dimension.
    DynamicSlice {
        sizes: Vec<u64>,
    },
    /// `operand`, `update`, one scalar integer start per dimension.
    DynamicUpdateSlice,
    /// `operand`, `padding_value` (a scalar).
    Pad {
        low: Vec<i64>,
        high: Vec<i64>,
        interior: Vec<u64>,
    },
    Reverse {
        dims: Vec<usize>,
    },
    /// `operand`, `start_indices`: slices of `slice_sizes` at clamped starts.
    Gather {
        dims: GatherDims,
        slice_sizes: Vec<u64>,
    },
    /// `inputs…`, `scatter_indices`, `updates…` (as many as inputs); the body maps
    /// `(current_0…, update_0…)` scalars to the new values. Updates whose element falls
    /// outside the inputs are skipped; `unique_indices` promises no two updates hit one
    /// element (they may then be applied in parallel).
    Scatter {
        dims: ScatterDims,
        body: Box<Graph>,
        unique_indices: bool,
    },
    /// `inputs…` of one shape, sorted together along `dimension`: the comparator maps
    /// `(lhs_0, rhs_0, lhs_1, rhs_1, …)` scalars to a pred scalar, true when the lhs
    /// elements go first. `is_stable`: elements the comparator finds equivalent keep their
    /// order (the lowering keeps it in either case).
    Sort {
        dimension: usize,
        is_stable: bool,
        comparator: Box<Graph>,
    },
    /// `lhs`, `rhs`.
    DotGeneral(DotDims),
    /// `inputs…`, `init_values…` (as many of each); the body maps
    /// `(acc_0…acc_n-1, x_0…x_n-1)` scalars to `n` scalars.
    Reduce {
        dims: Vec<usize>,
        body: Box<Graph>,
    },
    /// Loop-carried `operands…`; `cond` maps them to a pred scalar, `body` to new values.
    While {
        cond: Box<Graph>,
        body: Box<Graph>,
    },
    /// `index` (i32: `case`; pred: `if`, branch 0 when true), then the values the branches
    /// read (each branch's parameters, in order).
    Case {
        branches: Vec<Graph>,
    },
    /// A call of a registered handler: `operands…` → the results.
    CustomCall(Box<CustomCall>),
    /// A collective among the ranks of an SPMD program (`build_collective.rs`).
    Collective(Box<Collective>),
}

/// A collective's kind. The block-wise ones (`AllGather`, `ReduceScatter`, `AllToAll`) work
/// on the leading dimension, as the IR's collectives work on the flat buffer; an importer
/// moves another dimension to the front with transposes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CollectiveKind {
    /// The operand reduced over the group (same type).
    AllReduce(ReduceOp),
    /// The group's operands joined along dimension 0, in group order.
    AllGather,
    /// The operand's dimension 0 cut into group-size blocks; block `i` reduced over the
    /// group goes to the group's member `i`.
    ReduceScatter(ReduceOp),
    /// Dimension 0 holds group-size blocks: block `j` goes to member `j`, and block `i` of
    /// the result comes from member `i` (same type).
    AllToAll,
    /// The value of the group's member at position `root` (same type).
    Broadcast { root: u32 },
    /// Every rank sends its operand to the rank the `(source, target)` pairs map it to; a
    /// rank no one sends to gets zeros (same type).
    Permute { pairs: Vec<(u32, u32)> },
    /// No operand: this device's global rank, an i32 scalar.
    RankId,
}

impl CollectiveKind {
    /// StableHLO's name of the op (`rank_id` for the rank).
    pub fn name(&self) -> &'static str {
        match self {
            CollectiveKind::AllReduce(_) => "all_reduce",
            CollectiveKind::AllGather => "all_gather",
            CollectiveKind::ReduceScatter(_) => "reduce_scatter",
            CollectiveKind::AllToAll => "all_to_all",
            CollectiveKind::Broadcast { .. } => "collective_broadcast",
            CollectiveKind::Permute { .. } => "collective_permute",
            CollectiveKind::RankId => "rank_id",
        }
    }
}

/// A collective: its kind and its replica groups (global ranks; explicit, equal sizes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Collective {
    pub kind: CollectiveKind,
    pub groups: Vec<Vec<u32>>,
}

/// A `custom_call`'s target and what it passes besides the buffers.
#[derive(Clone, Debug, PartialEq)]
pub struct CustomCall {
    /// The target name the handler is registered under.
    pub target: String,
    /// The typed attributes the handler reads.
    pub attributes: Attributes,
    /// The call has effects beyond its results (never removed or reordered across another
    /// such call).
    pub side_effect: bool,
    /// `(result, operand)`: the result starts as a copy of the operand (StableHLO's
    /// `output_operand_aliases`; the handler may update it in place).
    pub aliases: Vec<(usize, usize)>,
}

impl Op {
    /// StableHLO's name of the op.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Parameter { .. } => "parameter",
            Op::Constant { .. } => "constant",
            Op::Iota { .. } => "iota",
            Op::Unary(u) => u.name(),
            Op::Binary(b) => b.name(),
            Op::Compare { .. } => "compare",
            Op::Select => "select",
            Op::Clamp => "clamp",
            Op::Convert => "convert",
            Op::BitcastConvert => "bitcast_convert",
            Op::ReducePrecision { .. } => "reduce_precision",
            Op::Fft { .. } => "fft",
            Op::Cholesky { .. } => "cholesky",
            Op::RngBitGenerator { .. } => "rng_bit_generator",
            Op::Rng { .. } => "rng",
            Op::TriangularSolve { .. } => "triangular_solve",
            Op::BroadcastInDim { .. } => "broadcast_in_dim",
            Op::Reshape => "reshape",
            Op::Transpose { .. } => "transpose",
            Op::Concatenate { .. } => "concatenate",
            Op::Slice { .. } => "slice",
            Op::DynamicSlice { .. } => "dynamic_slice",
            Op::DynamicUpdateSlice => "dynamic_update_slice",
            Op::Pad { .. } => "pad",
            Op::Reverse { .. } => "reverse",
            Op::Gather { .. } => "gather",
            Op::Scatter { .. } => "scatter",
            Op::Sort { .. } => "sort",
            Op::DotGeneral(_) => "dot_general",
            Op::Reduce { .. } => "reduce",
            Op::Map { .. } => "map",
            Op::While { .. } => "while",
            Op::Case { .. } => "case",
            Op::CustomCall(_) => "custom_call",
            Op::Collective(c) => c.kind.name(),
        }
    }
}
