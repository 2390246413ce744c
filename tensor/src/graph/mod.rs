//! The tensor graph an importer fills in: typed values with static dimensions, parameters,
//! named results, and nodes in order (each node's operands are earlier values, so the node
//! list is a topological order). Every op's rule is checked when it is added (`build.rs`).
//!
//! Regions (`reduce`'s body, `sort`'s comparator, `while`'s condition and body, `case`'s
//! branches) are graphs of their own and closed: a value a StableHLO region reads from the enclosing function comes
//! in as a parameter — a `case` operand, or for a `while` an extra carried value the body
//! passes through unchanged (which costs no copy). A splat constant is best a scalar constant
//! and a `broadcast_in_dim` (fused into its readers, nothing stored).

mod build;
mod build_call;
mod build_collective;
mod build_index;
mod build_linalg;
mod build_sort;
mod build_window;
mod ops;

pub use ops::*;
use xthunk_core::ir::DType;

/// A value of a graph: an index into [`Graph::values`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Value(pub u32);

/// A value's type: element type and static dimensions (row-major).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorType {
    pub dtype: DType,
    pub dims: Vec<u64>,
}

impl TensorType {
    pub fn new(dtype: DType, dims: &[u64]) -> Self {
        TensorType {
            dtype,
            dims: dims.to_vec(),
        }
    }

    /// Number of elements (1 for a scalar; saturating: a graph refuses values of more than
    /// `i64::MAX` bytes when they are added).
    pub fn elements(&self) -> u64 {
        self.dims.iter().fold(1u64, |a, d| a.saturating_mul(*d))
    }

    /// Bytes of the row-major array (saturating).
    pub fn bytes(&self) -> u64 {
        self.elements().saturating_mul(self.dtype.size() as u64)
    }

    pub fn rank(&self) -> usize {
        self.dims.len()
    }
}

impl std::fmt::Display for TensorType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dims: Vec<String> = self.dims.iter().map(u64::to_string).collect();
        write!(
            f,
            "tensor<{}{}{}>",
            dims.join("x"),
            if dims.is_empty() { "" } else { "x" },
            self.dtype
        )
    }
}

/// One operation and the values it reads and defines.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub op: Op,
    pub operands: Vec<Value>,
    pub results: Vec<Value>,
}

/// A tensor program (or a region of one).
#[derive(Clone, Debug, PartialEq)]
pub struct Graph {
    name: String,
    values: Vec<TensorType>,
    /// The node defining each value.
    defs: Vec<usize>,
    nodes: Vec<Node>,
    params: Vec<Value>,
    results: Vec<(String, Value)>,
}

impl Graph {
    pub fn new(name: impl Into<String>) -> Self {
        Graph {
            name: name.into(),
            values: vec![],
            defs: vec![],
            nodes: vec![],
            params: vec![],
            results: vec![],
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The type of `v` (a value of this graph).
    pub fn ty(&self, v: Value) -> &TensorType {
        &self.values[v.0 as usize]
    }

    /// Every value's type, by value index.
    pub fn values(&self) -> &[TensorType] {
        &self.values
    }

    /// The nodes in order.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The node that defines `v`.
    pub fn def(&self, v: Value) -> &Node {
        &self.nodes[self.defs[v.0 as usize]]
    }

    /// The parameters in order.
    pub fn params(&self) -> &[Value] {
        &self.params
    }

    /// The named results in order.
    pub fn results(&self) -> &[(String, Value)] {
        &self.results
    }

    /// The parameters' types.
    pub fn param_types(&self) -> Vec<TensorType> {
        self.params.iter().map(|p| self.ty(*p).clone()).collect()
    }

    /// The results' types.
    pub fn result_types(&self) -> Vec<TensorType> {
        self.results
            .iter()
            .map(|(_, v)| self.ty(*v).clone())
            .collect()
    }

    /// How many times each value is read: as an operand, and as a result.
    pub fn use_counts(&self) -> Vec<usize> {
        let mut uses = vec![0; self.values.len()];
        for n in &self.nodes {
            for v in &n.operands {
                uses[v.0 as usize] += 1;
            }
        }
        for (_, v) in &self.results {
            uses[v.0 as usize] += 1;
        }
        uses
    }
}
