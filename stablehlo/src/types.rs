//! Types: `tensor<4x?xf32>`, `tensor<f32>`, `tuple<...>`, `!stablehlo.token`, `complex<f32>`,
//! the integer (`i1` ... `ui64`), float (`f16`, `bf16`, `f32`, `f64`, the f8 family) and
//! `index` scalars, function types `(a, b) -> (c)`, other `!dialect` types kept as text.

use crate::ast::{ComplexOf, Dim, ElementType, NarrowFloat, Type};
use crate::cursor::Cursor;
use crate::error::ParseError;

/// The widest integer type read.
const MAX_INT_WIDTH: u16 = 128;
/// The most dimensions of a tensor type.
pub const MAX_RANK: usize = 64;

/// The element type named `name`, if it is one.
pub fn element_type(name: &str) -> Option<ElementType> {
    Some(match name {
        "f16" => ElementType::F16,
        "bf16" => ElementType::BF16,
        "f32" => ElementType::F32,
        "f64" => ElementType::F64,
        "index" => ElementType::Index,
        "f8E4M3FN" => ElementType::Narrow(NarrowFloat::F8E4M3FN),
        "f8E5M2" => ElementType::Narrow(NarrowFloat::F8E5M2),
        "f8E4M3FNUZ" => ElementType::Narrow(NarrowFloat::F8E4M3FNUZ),
        "f8E5M2FNUZ" => ElementType::Narrow(NarrowFloat::F8E5M2FNUZ),
        "f8E4M3B11FNUZ" => ElementType::Narrow(NarrowFloat::F8E4M3B11FNUZ),
        "f8E4M3" => ElementType::Narrow(NarrowFloat::F8E4M3),
        "f8E3M4" => ElementType::Narrow(NarrowFloat::F8E3M4),
        "f8E8M0FNU" => ElementType::Narrow(NarrowFloat::F8E8M0FNU),
        "f6E2M3FN" => ElementType::Narrow(NarrowFloat::F6E2M3FN),
        "f6E3M2FN" => ElementType::Narrow(NarrowFloat::F6E3M2FN),
        "f4E2M1FN" => ElementType::Narrow(NarrowFloat::F4E2M1FN),
        _ => {
            let (signed, digits) = if let Some(d) = name.strip_prefix("si") {
                (Some(true), d)
            } else if let Some(d) = name.strip_prefix("ui") {
                (Some(false), d)
            } else {
                (None, name.strip_prefix('i')?)
            };
            if digits.is_empty()
                || digits.starts_with('0')
                || !digits.bytes().all(|b| b.is_ascii_digit())
            {
                return None;
            }
            let width: u16 = digits.parse().ok()?;
            if width == 0 || width > MAX_INT_WIDTH {
                return None;
            }
            ElementType::Int { width, signed }
        }
    })
}

/// Whether `word` starts a type.
pub fn is_type_word(word: &str) -> bool {
    matches!(word, "tensor" | "tuple" | "complex" | "none") || element_type(word).is_some()
}

impl<'a> Cursor<'a> {
    /// A type.
    pub fn ty(&mut self) -> Result<Type, ParseError> {
        self.enter()?;
        let t = self.ty_inner();
        self.leave();
        t
    }

    fn ty_inner(&mut self) -> Result<Type, ParseError> {
        match self.peek() {
            Some(b'!') => {
                let start = self.offset();
                let name = self.sigil_name(b'!')?.unwrap_or_default();
                if name == "stablehlo.token" {
                    return Ok(Type::Token);
                }
                if self.looking_at("<") {
                    self.balanced()?;
                }
                Ok(Type::Opaque(self.slice(start, self.offset()).to_string()))
            }
            Some(b'(') => self.function_type(),
            _ => {
                let pos = self.pos();
                let Some(word) = self.ident() else {
                    return self.expected("a type");
                };
                match word {
                    "tensor" => self.tensor_rest(),
                    "tuple" => Ok(Type::Tuple(self.bracketed(b'<', b'>', Self::ty)?)),
                    "none" => Ok(Type::None),
                    "complex" => Ok(Type::Scalar(self.complex_rest()?)),
                    _ => match element_type(word) {
                        Some(e) => Ok(Type::Scalar(e)),
                        None => Err(self.error_at(pos, format!("unknown type `{word}`"))),
                    },
                }
            }
        }
    }

    fn complex_rest(&mut self) -> Result<ElementType, ParseError> {
        self.expect(b'<')?;
        let pos = self.pos();
        let part = match self.ident() {
            Some("f32") => ComplexOf::F32,
            Some("f64") => ComplexOf::F64,
            _ => return Err(self.error_at(pos, "expected `f32` or `f64` in `complex<...>`")),
        };
        self.expect(b'>')?;
        Ok(ElementType::Complex(part))
    }

    /// After `tensor`: `<4x?xf32>`, `<f32>`, `<*xf32>`, `<4xf32, #encoding>`.
    fn tensor_rest(&mut self) -> Result<Type, ParseError> {
        self.expect(b'<')?;
        let mut dims = Some(Vec::new());
        if self.eat(b'*') {
            dims = None;
            self.dim_x()?;
        } else {
            loop {
                self.ws();
                let pos = self.pos();
                match self.peek() {
                    Some(b'?') => {
                        self.eat(b'?');
                        push_dim(self, &mut dims, Dim::Dynamic, pos)?;
                        self.dim_x()?;
                    }
                    Some(c) if c.is_ascii_digit() => {
                        let digits = self.digits_here();
                        let n: u64 = digits
                            .parse()
                            .map_err(|_| self.error_at(pos, "tensor dimension out of range"))?;
                        push_dim(self, &mut dims, Dim::Static(n), pos)?;
                        self.dim_x()?;
                    }
                    _ => break,
                }
            }
        }
        let pos = self.pos();
        let elem = match self.ident_chars_here() {
            "" => return self.expected("an element type"),
            "complex" => self.complex_rest()?,
            word => element_type(word)
                .ok_or_else(|| self.error_at(pos, format!("unknown element type `{word}`")))?,
        };
        let encoding = if self.eat(b',') {
            Some(Box::new(self.attr()?))
        } else {
            None
        };
        self.expect(b'>')?;
        Ok(Type::Tensor {
            dims,
            elem,
            encoding,
        })
    }

    fn dim_x(&mut self) -> Result<(), ParseError> {
        if self.ident_x_here() {
            Ok(())
        } else {
            self.expected("`x` after a tensor dimension")
        }
    }

    /// `(inputs) -> result` or `(inputs) -> (results)`.
    pub fn function_type(&mut self) -> Result<Type, ParseError> {
        let inputs = self.type_list_parens()?;
        self.expect_str("->")?;
        let results = if self.peek() == Some(b'(') {
            self.type_list_parens()?
        } else {
            vec![self.ty()?]
        };
        Ok(Type::Function { inputs, results })
    }

    /// `(t, t, ...)`, possibly empty.
    pub fn type_list_parens(&mut self) -> Result<Vec<Type>, ParseError> {
        self.bracketed(b'(', b')', Self::ty)
    }

    /// `t, t, ...` (at least one).
    pub fn type_list(&mut self) -> Result<Vec<Type>, ParseError> {
        let mut out = vec![self.ty()?];
        while self.eat(b',') {
            out.push(self.ty()?);
        }
        Ok(out)
    }
}

fn push_dim(
    c: &Cursor<'_>,
    dims: &mut Option<Vec<Dim>>,
    d: Dim,
    pos: crate::ast::Pos,
) -> Result<(), ParseError> {
    if let Some(v) = dims {
        if v.len() >= MAX_RANK {
            return Err(ParseError::TooLarge {
                pos,
                op: crate::error::one_line(&c.op),
                what: "tensor rank".into(),
                limit: MAX_RANK as u64,
            });
        }
        v.push(d);
    }
    Ok(())
}
