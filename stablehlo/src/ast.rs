//! The syntax tree: a module of operations in MLIR's generic shape (name, operands, attributes,
//! regions, types, location), whichever form (pretty or generic) the text used, with the
//! position of each operation. Positions take no part in equality, so two texts of one program
//! parse to equal trees.

use std::fmt;

/// A 1-based line and column (in characters) of the input. Two positions are always equal: a
/// position says where something was read, not what it is.
#[derive(Clone, Copy, Debug, Default, Eq)]
pub struct Pos {
    pub line: u32,
    pub col: u32,
}

impl PartialEq for Pos {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.col)
    }
}

/// A parsed file: the top-level operation (`builtin.module`), the location aliases
/// (`#loc3 = loc(...)`) and the `dense_resource` blobs of its trailer.
#[derive(Clone, Debug, PartialEq)]
pub struct Module {
    /// The `builtin.module` operation; its one region holds the functions.
    pub op: Op,
    /// `#name = loc(...)` definitions, in the order read.
    pub loc_aliases: Vec<(String, Location)>,
    /// `dialect_resources` blobs: name, alignment, data (without the 4 alignment bytes).
    pub resources: Vec<Resource>,
}

impl Module {
    /// The module's functions (`func.func`), in the order written.
    pub fn functions(&self) -> impl Iterator<Item = &Op> {
        self.op
            .block(0)
            .into_iter()
            .flat_map(|b| &b.ops)
            .filter(|op| op.name == "func.func")
    }

    /// The function named `name` (`main` is JAX's entry point).
    pub fn function(&self, name: &str) -> Option<&Op> {
        self.functions().find(|f| f.symbol() == Some(name))
    }

    /// What `loc` stands for: aliases (`#loc3`) followed to their definitions (at most 64
    /// steps; an undefined alias or a longer chain stays as it is).
    pub fn resolve<'m>(&'m self, mut loc: &'m Location) -> &'m Location {
        for _ in 0..64 {
            let Location::Alias(name) = loc else {
                break;
            };
            match self.loc_aliases.iter().find(|(n, _)| n == name) {
                Some((_, l)) => loc = l,
                None => break,
            }
        }
        loc
    }
}

/// One `dense_resource` blob of the file's trailer.
#[derive(Clone, Debug, PartialEq)]
pub struct Resource {
    pub name: String,
    pub alignment: u32,
    pub data: Vec<u8>,
}

/// A use of an SSA value: `%name` or `%name#index` (index 0 for a plain use).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueRef {
    pub name: String,
    pub index: u32,
}

/// A group of results defined together: `%name` (count 1) or `%name:count`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResultGroup {
    pub name: String,
    pub count: u32,
}

/// One operation, in the generic shape: `"name"(operands) <{attrs}> ({regions}) {attrs} :
/// (operand types) -> (result types) loc(...)`. Inherent and discardable attributes are
/// one list, sorted by name.
#[derive(Clone, Debug, PartialEq)]
pub struct Op {
    pub name: String,
    pub results: Vec<ResultGroup>,
    pub operands: Vec<ValueRef>,
    pub attrs: Vec<(String, Attr)>,
    pub regions: Vec<Region>,
    /// Block successors (`^bb1`), only in the generic form; StableHLO has none.
    pub successors: Vec<String>,
    pub operand_types: Vec<Type>,
    pub result_types: Vec<Type>,
    pub loc: Option<Location>,
    pub pos: Pos,
}

impl Op {
    /// The attribute `name`, if present.
    pub fn attr(&self, name: &str) -> Option<&Attr> {
        self.attrs
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()
            .map(|i| &self.attrs[i].1)
    }

    /// The `sym_name` of a module, function or mesh.
    pub fn symbol(&self) -> Option<&str> {
        match self.attr("sym_name") {
            Some(Attr::Str(s)) => Some(s),
            _ => None,
        }
    }

    /// The entry block of region `region` (a function's body, a reducer, a loop's condition).
    pub fn block(&self, region: usize) -> Option<&Block> {
        self.regions.get(region)?.blocks.first()
    }

    /// How many results the operation defines.
    pub fn result_count(&self) -> usize {
        self.results.iter().map(|g| g.count as usize).sum()
    }
}

/// A region: a list of blocks.
#[derive(Clone, Debug, PartialEq)]
pub struct Region {
    pub blocks: Vec<Block>,
}

/// A block: its label (absent for an entry block printed without one), arguments and ops.
#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    pub label: Option<String>,
    pub args: Vec<BlockArg>,
    pub ops: Vec<Op>,
}

/// A block argument `%name: type loc(...)`.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockArg {
    pub name: String,
    pub ty: Type,
    pub loc: Option<Location>,
}

/// A source location.
#[derive(Clone, Debug, PartialEq)]
pub enum Location {
    Unknown,
    /// `"file":line:col` (with ` to line:col` / ` to :col` kept as the end).
    File {
        file: String,
        line: u32,
        col: u32,
        end: Option<(Option<u32>, u32)>,
    },
    /// `"name"` or `"name"(child)`.
    Name {
        name: String,
        child: Option<Box<Location>>,
    },
    /// `callsite(callee at caller)`.
    CallSite {
        callee: Box<Location>,
        caller: Box<Location>,
    },
    /// `fused<metadata>[locs]`.
    Fused {
        metadata: Option<Box<Attr>>,
        locs: Vec<Location>,
    },
    /// `#name`: an alias defined at the end (or start) of the file.
    Alias(String),
}

/// A scalar element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ElementType {
    /// `iN` (signless), `siN`, `uiN`: width and signedness (`None`: signless).
    Int {
        width: u16,
        signed: Option<bool>,
    },
    F16,
    BF16,
    F32,
    F64,
    /// The narrow float types (`f8E4M3FN`, `f8E5M2`, `f4E2M1FN`, ...), by name; one byte
    /// per element.
    Narrow(NarrowFloat),
    Index,
    Complex(ComplexOf),
}

/// The element type of `complex<...>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ComplexOf {
    F32,
    F64,
}

/// The narrow float formats MLIR names (8, 6 and 4 bits), as JAX's `ml_dtypes` has them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NarrowFloat {
    F8E4M3FN,
    F8E5M2,
    F8E4M3FNUZ,
    F8E5M2FNUZ,
    F8E4M3B11FNUZ,
    F8E4M3,
    F8E3M4,
    /// Exponent only: powers of two, NaN 0xFF, no zero, no sign.
    F8E8M0FNU,
    F6E2M3FN,
    F6E3M2FN,
    F4E2M1FN,
}

/// One tensor dimension: a size or `?`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dim {
    Static(u64),
    Dynamic,
}

/// A type.
#[derive(Clone, Debug, PartialEq)]
pub enum Type {
    /// `tensor<dims x element [, encoding]>`; an unranked `tensor<*xf32>` has `dims: None`.
    Tensor {
        dims: Option<Vec<Dim>>,
        elem: ElementType,
        encoding: Option<Box<Attr>>,
    },
    /// A scalar type on its own (`f32`, `i64`, `index`), as in attributes.
    Scalar(ElementType),
    Tuple(Vec<Type>),
    /// `(inputs) -> results`.
    Function {
        inputs: Vec<Type>,
        results: Vec<Type>,
    },
    /// `!stablehlo.token`.
    Token,
    /// Any other `!dialect.type<...>`, as written.
    Opaque(String),
    /// `none`.
    None,
}

/// A float as written, compared by its bits (so a NaN equals itself and `-0.0` differs
/// from `0.0`: two texts of one value compare equal).
#[derive(Clone, Copy, Debug)]
pub struct Float(pub f64);

impl PartialEq for Float {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

/// A literal inside `dense<...>`.
#[derive(Clone, Debug, PartialEq)]
pub enum Literal {
    /// An integer (decimal or `0x` hex: for a float element type, hex is its bit pattern).
    Int {
        negative: bool,
        magnitude: u128,
        hex: bool,
    },
    Float(Float),
    Bool(bool),
    /// `(re, im)`.
    Complex(Box<Literal>, Box<Literal>),
    List(Vec<Literal>),
}

/// The contents of `dense<...>`.
#[derive(Clone, Debug, PartialEq)]
pub enum DenseData {
    /// Literals: one (a splat) or nested lists.
    Literals(Literal),
    /// `dense<"0x...">`: raw little-endian bytes.
    Hex(Vec<u8>),
    /// `dense<>`: no elements.
    Empty,
}

/// An attribute value.
#[derive(Clone, Debug, PartialEq)]
pub enum Attr {
    /// `5`, `5 : i32` (no type: i64 by MLIR's rule, kept absent here).
    Int {
        value: i128,
        ty: Option<Type>,
    },
    /// `1.5`, `1.5 : f32`, or a hex bit pattern of `f32`/`f64` (`0x7FC00000 : f32`); a bit
    /// pattern of a narrower float type stays an `Int` with that type.
    Float {
        value: Float,
        ty: Option<Type>,
    },
    Bool(bool),
    Str(String),
    /// `unit` (and a name without `= value` in a dictionary).
    Unit,
    Type(Type),
    /// `@name` or `@a::@b`.
    Symbol(Vec<String>),
    Array(Vec<Attr>),
    /// `array<i64: 1, 2>` (the element type, the values).
    DenseArray {
        elem: Type,
        values: Vec<Literal>,
    },
    Dict(Vec<(String, Attr)>),
    /// `dense<...> : type`.
    Dense {
        data: DenseData,
        ty: Type,
        pos: Pos,
    },
    /// `dense_resource<name> : type`.
    DenseResource {
        name: String,
        ty: Type,
        pos: Pos,
    },
    /// `#dialect<name VALUE>`: an enum value, such as `#stablehlo<comparison_direction LT>`.
    Enum {
        dialect: String,
        kind: String,
        value: String,
    },
    /// `#dialect.name<key = value, ...>`: a struct of fields, such as `#stablehlo.dot<...>`.
    Struct {
        name: String,
        fields: Vec<(String, Attr)>,
    },
    /// Any other dialect attribute (`#sdy...`, `#stablehlo.conv<...>`), its text kept with
    /// the whitespace as printed.
    Opaque(String),
    /// `loc(...)` used as an attribute value.
    Loc(Box<Location>),
}

impl Attr {
    /// An integer attribute's value.
    pub fn as_int(&self) -> Option<i128> {
        match self {
            Attr::Int { value, .. } => Some(*value),
            _ => None,
        }
    }

    /// A list of integers: `array<i64: ...>` or `[1, 2]` (as struct fields hold them).
    pub fn as_ints(&self) -> Option<Vec<i64>> {
        match self {
            Attr::DenseArray { values, .. } => values
                .iter()
                .map(|v| match v {
                    Literal::Int {
                        negative,
                        magnitude,
                        ..
                    } => {
                        let m = i64::try_from(*magnitude).ok();
                        if *negative { m.map(|m| -m) } else { m }
                    }
                    Literal::Bool(b) => Some(i64::from(*b)),
                    _ => None,
                })
                .collect(),
            Attr::Array(items) => items
                .iter()
                .map(|a| a.as_int().and_then(|v| i64::try_from(v).ok()))
                .collect(),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Attr::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Attr::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// An enum attribute's value (`LT` of `#stablehlo<comparison_direction LT>`).
    pub fn enum_value(&self) -> Option<&str> {
        match self {
            Attr::Enum { value, .. } => Some(value),
            _ => None,
        }
    }

    /// A field of a struct attribute (`#stablehlo.dot<lhs_contracting_dimensions = [1]>`) or
    /// an entry of a dictionary.
    pub fn field(&self, name: &str) -> Option<&Attr> {
        match self {
            Attr::Struct { fields: f, .. } | Attr::Dict(f) => {
                f.iter().find(|(k, _)| k == name).map(|(_, v)| v)
            }
            _ => None,
        }
    }
}

impl Type {
    /// The extents of a ranked tensor type with a static shape.
    pub fn static_shape(&self) -> Option<Vec<u64>> {
        match self {
            Type::Tensor {
                dims: Some(dims), ..
            } => dims
                .iter()
                .map(|d| match d {
                    Dim::Static(n) => Some(*n),
                    Dim::Dynamic => None,
                })
                .collect(),
            _ => None,
        }
    }

    /// The element type of a tensor type, or the scalar type itself.
    pub fn element(&self) -> Option<ElementType> {
        match self {
            Type::Tensor { elem, .. } | Type::Scalar(elem) => Some(*elem),
            _ => None,
        }
    }
}
