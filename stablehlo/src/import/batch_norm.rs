//! `batch_norm_inference`, `batch_norm_training` and `batch_norm_grad`, decomposed into
//! reductions, broadcasts and elementwise ops as the StableHLO spec defines them: means over
//! every dimension but `feature_index`, the biased variance, `epsilon` added to the variance
//! before the square root, all in the operand's element type. The lowering fuses the
//! elementwise parts into the kernels that read them.

use super::ops::{R, int_attr, result, tensors};
use super::{Env, ImportError, Importer, Item, check_attrs};
use crate::ast::{Attr, Op};
use xthunk_core::ir::DType;
use xthunk_tensor::graph::{BinaryOp, Graph, TensorType, UnaryOp, Value};

/// Which of the three ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BatchNorm {
    Inference,
    Training,
    Grad,
}

impl BatchNorm {
    fn name(self) -> &'static str {
        match self {
            BatchNorm::Inference => "batch_norm_inference",
            BatchNorm::Training => "batch_norm_training",
            BatchNorm::Grad => "batch_norm_grad",
        }
    }

    /// Operands: (operand, scale, offset, mean, variance) for inference; (operand, scale,
    /// offset) for training; (operand, scale, mean, variance, grad_output) for the gradient.
    fn operands(self) -> usize {
        match self {
            BatchNorm::Inference => 5,
            BatchNorm::Training => 3,
            BatchNorm::Grad => 5,
        }
    }
}

/// The graph ops of one batch norm, with the operand's type and the feature dimension.
struct Norm<'g> {
    g: &'g mut Graph,
    op: &'g Op,
    t: TensorType,
    feature: usize,
}

impl Norm<'_> {
    fn err(&self, e: xthunk_tensor::GraphError) -> ImportError {
        ImportError::graph(self.op, e)
    }

    /// A scalar of the operand's type (from f64, converted by the kernel that reads it),
    /// broadcast to the operand's shape.
    fn scalar(&mut self, v: f64) -> R<Value> {
        let dims = self.t.dims.clone();
        self.scalar_of(v, &dims)
    }

    fn scalar_of(&mut self, v: f64, dims: &[u64]) -> R<Value> {
        let c = self
            .g
            .constant(DType::F64, &[], v.to_le_bytes().to_vec())
            .map_err(|e| ImportError::graph(self.op, e))?;
        let c = if self.t.dtype == DType::F64 {
            c
        } else {
            self.g
                .convert(c, self.t.dtype)
                .map_err(|e| ImportError::graph(self.op, e))?
        };
        self.g
            .broadcast_in_dim(c, dims, &[])
            .map_err(|e| ImportError::graph(self.op, e))
    }

    /// A feature vector broadcast along the feature dimension.
    fn feature(&mut self, v: Value) -> R<Value> {
        self.g
            .broadcast_in_dim(v, &self.t.dims, &[self.feature])
            .map_err(|e| ImportError::graph(self.op, e))
    }

    fn bin(&mut self, op: BinaryOp, a: Value, b: Value) -> R<Value> {
        self.g.binary(op, a, b).map_err(|e| self.err(e))
    }

    /// The sum over every dimension but the feature one (a feature vector).
    fn sum(&mut self, x: Value) -> R<Value> {
        let d = self.t.dtype;
        let mut body = Graph::new(format!("{}_sum", self.op.name));
        let a = body.parameter("a", d, &[]).map_err(|e| self.err(e))?;
        let b = body.parameter("b", d, &[]).map_err(|e| self.err(e))?;
        let s = body.binary(BinaryOp::Add, a, b).map_err(|e| self.err(e))?;
        body.result("sum", s).map_err(|e| self.err(e))?;
        let zero = self
            .g
            .constant(DType::F64, &[], 0f64.to_le_bytes().to_vec())
            .map_err(|e| self.err(e))?;
        let zero = if d == DType::F64 {
            zero
        } else {
            self.g.convert(zero, d).map_err(|e| self.err(e))?
        };
        let dims: Vec<usize> = (0..self.t.rank()).filter(|&i| i != self.feature).collect();
        let r = self
            .g
            .reduce(&[x], &[zero], &dims, body)
            .map_err(|e| self.err(e))?;
        r.into_iter()
            .next()
            .ok_or_else(|| ImportError::invalid(self.op, "reduce gave no result"))
    }

    /// The elements per feature (an f64 holds every count up to 2^53 exactly; the
    /// conversion to the element type rounds it once).
    fn per_feature(&self) -> f64 {
        (self.t.elements() / self.t.dims[self.feature].max(1)) as f64
    }

    /// The elements per feature, as a tensor of the operand's shape.
    fn count(&mut self) -> R<Value> {
        let n = self.per_feature();
        self.scalar(n)
    }

    /// The elements per feature, as a feature vector.
    fn feature_count(&mut self) -> R<Value> {
        let n = self.per_feature();
        let dims = [self.t.dims[self.feature]];
        self.scalar_of(n, &dims)
    }
}

impl Importer<'_> {
    /// `stablehlo.batch_norm_inference`, `_training` or `_grad` (by the op's name).
    pub(super) fn batch_norm(&mut self, g: &mut Graph, op: &Op, env: &Env) -> R<Vec<Item>> {
        let kind = match op.name.as_str() {
            "stablehlo.batch_norm_inference" => BatchNorm::Inference,
            "stablehlo.batch_norm_training" => BatchNorm::Training,
            "stablehlo.batch_norm_grad" => BatchNorm::Grad,
            other => return Err(ImportError::unsupported(op, format!("op `{other}`"))),
        };
        batch_norm(g, op, env, kind)
    }
}

fn batch_norm(g: &mut Graph, op: &Op, env: &Env, kind: BatchNorm) -> R<Vec<Item>> {
    check_attrs(op, &["epsilon", "feature_index"])?;
    let x = tensors(env, op)?;
    if x.len() != kind.operands() {
        return Err(ImportError::invalid(
            op,
            format!("{} operands, {} expected", x.len(), kind.operands()),
        ));
    }
    let t = g.ty(x[0]).clone();
    if !t.dtype.is_float() {
        return Err(ImportError::invalid(
            op,
            format!("{}: elements of type {}", kind.name(), t.dtype),
        ));
    }
    let fi = int_attr(op, "feature_index")?;
    let feature = usize::try_from(fi)
        .ok()
        .filter(|&f| f < t.rank())
        .ok_or_else(|| {
            ImportError::invalid(op, format!("`feature_index` {fi} of rank {}", t.rank()))
        })?;
    let epsilon = match op.attr("epsilon") {
        // An f32 attribute (the spec's type; untyped too): its value rounded to f32.
        Some(Attr::Float { value, ty }) => match ty {
            Some(crate::ast::Type::Scalar(crate::ast::ElementType::F64)) => value.0,
            _ => value.0 as f32 as f64,
        },
        _ => return Err(ImportError::invalid(op, "no float `epsilon`")),
    };
    let features = TensorType::new(t.dtype, &[t.dims[feature]]);
    let operand_types: Vec<TensorType> = match kind {
        BatchNorm::Inference => vec![
            t.clone(),
            features.clone(),
            features.clone(),
            features.clone(),
            features.clone(),
        ],
        BatchNorm::Training => vec![t.clone(), features.clone(), features.clone()],
        BatchNorm::Grad => vec![
            t.clone(),
            features.clone(),
            features.clone(),
            features.clone(),
            t.clone(),
        ],
    };
    for (i, (v, want)) in x.iter().zip(&operand_types).enumerate() {
        if g.ty(*v) != want {
            return Err(ImportError::invalid(
                op,
                format!("operand {i} {}, {want} expected", g.ty(*v)),
            ));
        }
    }
    let mut n = Norm { g, op, t, feature };
    let eps = n.scalar(epsilon)?;
    let results = match kind {
        BatchNorm::Inference => {
            let (scale, offset) = (n.feature(x[1])?, n.feature(x[2])?);
            let (mean, var) = (n.feature(x[3])?, n.feature(x[4])?);
            let centered = n.bin(BinaryOp::Subtract, x[0], mean)?;
            let v = n.bin(BinaryOp::Add, var, eps)?;
            let sd = n.g.unary(UnaryOp::Sqrt, v).map_err(|e| n.err(e))?;
            let normalized = n.bin(BinaryOp::Divide, centered, sd)?;
            let scaled = n.bin(BinaryOp::Multiply, scale, normalized)?;
            vec![n.bin(BinaryOp::Add, scaled, offset)?]
        }
        BatchNorm::Training => {
            // The batch mean and (biased) variance per feature, then the inference formula.
            let cnt = n.feature_count()?;
            let s = n.sum(x[0])?;
            let mean = n.bin(BinaryOp::Divide, s, cnt)?;
            let mean_b = n.feature(mean)?;
            let centered = n.bin(BinaryOp::Subtract, x[0], mean_b)?;
            let sq = n.bin(BinaryOp::Multiply, centered, centered)?;
            let s2 = n.sum(sq)?;
            let var = n.bin(BinaryOp::Divide, s2, cnt)?;
            let var_b = n.feature(var)?;
            let v = n.bin(BinaryOp::Add, var_b, eps)?;
            let sd = n.g.unary(UnaryOp::Sqrt, v).map_err(|e| n.err(e))?;
            let normalized = n.bin(BinaryOp::Divide, centered, sd)?;
            let (scale, offset) = (n.feature(x[1])?, n.feature(x[2])?);
            let scaled = n.bin(BinaryOp::Multiply, scale, normalized)?;
            let out = n.bin(BinaryOp::Add, scaled, offset)?;
            vec![out, mean, var]
        }
        BatchNorm::Grad => {
            let (scale, mean, var, dy) =
                (n.feature(x[1])?, n.feature(x[2])?, n.feature(x[3])?, x[4]);
            let centered = n.bin(BinaryOp::Subtract, x[0], mean)?;
            let ve = n.bin(BinaryOp::Add, var, eps)?;
            let sd = n.g.unary(UnaryOp::Sqrt, ve).map_err(|e| n.err(e))?;
            let normalized = n.bin(BinaryOp::Divide, centered, sd)?;
            let count = n.count()?;
            let i1 = n.bin(BinaryOp::Multiply, dy, count)?;
            let sum_dy = n.sum(dy)?;
            let i2 = n.feature(sum_dy)?;
            let dyc = n.bin(BinaryOp::Multiply, dy, centered)?;
            let sum_dyc = n.sum(dyc)?;
            let i3 = n.feature(sum_dyc)?;
            let i4 = n.bin(BinaryOp::Multiply, i3, centered)?;
            let i5 = n.bin(BinaryOp::Divide, i4, ve)?;
            let i6 = n.bin(BinaryOp::Subtract, i1, i2)?;
            let i6 = n.bin(BinaryOp::Subtract, i6, i5)?;
            let f = n.bin(BinaryOp::Divide, scale, sd)?;
            let f = n.bin(BinaryOp::Divide, f, count)?;
            let grad_operand = n.bin(BinaryOp::Multiply, f, i6)?;
            let dyn_ = n.bin(BinaryOp::Multiply, dy, normalized)?;
            let grad_scale = n.sum(dyn_)?;
            vec![grad_operand, grad_scale, sum_dy]
        }
    };
    for (i, v) in results.iter().enumerate() {
        let want = result(op, i)?;
        if *n.g.ty(*v) != want {
            return Err(ImportError::invalid(
                op,
                format!("result {i} {want}, {} computed", n.g.ty(*v)),
            ));
        }
    }
    Ok(results.into_iter().map(Item::Tensor).collect())
}
