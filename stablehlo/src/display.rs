//! Types written back in MLIR's syntax (`tensor<4x?xf32>`, `tuple<...>`, `(a) -> b`), for
//! messages that name a type (an importer's refusals); what `types.rs` reads.

use crate::ast::{ComplexOf, Dim, ElementType, NarrowFloat, Type};
use std::fmt;

impl fmt::Display for ElementType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ElementType::Int { width, signed } => {
                let prefix = match signed {
                    None => "i",
                    Some(true) => "si",
                    Some(false) => "ui",
                };
                write!(f, "{prefix}{width}")
            }
            ElementType::F16 => f.write_str("f16"),
            ElementType::BF16 => f.write_str("bf16"),
            ElementType::F32 => f.write_str("f32"),
            ElementType::F64 => f.write_str("f64"),
            ElementType::Index => f.write_str("index"),
            ElementType::Complex(ComplexOf::F32) => f.write_str("complex<f32>"),
            ElementType::Complex(ComplexOf::F64) => f.write_str("complex<f64>"),
            ElementType::Narrow(n) => f.write_str(match n {
                NarrowFloat::F8E4M3FN => "f8E4M3FN",
                NarrowFloat::F8E5M2 => "f8E5M2",
                NarrowFloat::F8E4M3FNUZ => "f8E4M3FNUZ",
                NarrowFloat::F8E5M2FNUZ => "f8E5M2FNUZ",
                NarrowFloat::F8E4M3B11FNUZ => "f8E4M3B11FNUZ",
                NarrowFloat::F8E4M3 => "f8E4M3",
                NarrowFloat::F8E3M4 => "f8E3M4",
                NarrowFloat::F8E8M0FNU => "f8E8M0FNU",
                NarrowFloat::F6E2M3FN => "f6E2M3FN",
                NarrowFloat::F6E3M2FN => "f6E3M2FN",
                NarrowFloat::F4E2M1FN => "f4E2M1FN",
            }),
        }
    }
}

fn list(f: &mut fmt::Formatter<'_>, types: &[Type]) -> fmt::Result {
    for (i, t) in types.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{t}")?;
    }
    Ok(())
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::Tensor {
                dims,
                elem,
                encoding,
            } => {
                f.write_str("tensor<")?;
                match dims {
                    None => f.write_str("*x")?,
                    Some(dims) => {
                        for d in dims {
                            match d {
                                Dim::Static(n) => write!(f, "{n}x")?,
                                Dim::Dynamic => f.write_str("?x")?,
                            }
                        }
                    }
                }
                write!(f, "{elem}")?;
                if encoding.is_some() {
                    // Encodings are kept as attributes; only their presence is shown.
                    f.write_str(", #encoding")?;
                }
                f.write_str(">")
            }
            Type::Scalar(e) => write!(f, "{e}"),
            Type::Tuple(elems) => {
                f.write_str("tuple<")?;
                list(f, elems)?;
                f.write_str(">")
            }
            Type::Function { inputs, results } => {
                f.write_str("(")?;
                list(f, inputs)?;
                f.write_str(") -> ")?;
                if results.len() == 1 && !matches!(results[0], Type::Function { .. }) {
                    write!(f, "{}", results[0])
                } else {
                    f.write_str("(")?;
                    list(f, results)?;
                    f.write_str(")")
                }
            }
            Type::Token => f.write_str("!stablehlo.token"),
            Type::Opaque(text) => f.write_str(text),
            Type::None => f.write_str("none"),
        }
    }
}
