//! Attributes: integers and floats (typed or not), strings, booleans, `unit`, types, symbol
//! references, arrays, dictionaries, `array<i64: ...>`, `dense<...>` in every form,
//! `dense_resource<...>`, dialect attributes (`#stablehlo<comparison_direction LT>` enums,
//! `#stablehlo.dot<...>` structs, anything else kept as its text) and locations.

use crate::ast::{Attr, DenseData, ElementType, Float, Literal, Location, Type};
use crate::cursor::{Cursor, Number, hex_bytes};
use crate::error::ParseError;
use crate::types::is_type_word;

/// Dialect attributes read as structs of `key = value` fields.
const STRUCTS: &[&str] = &[
    "stablehlo.dot",
    "stablehlo.dot_algorithm",
    "stablehlo.gather",
    "stablehlo.scatter",
    "stablehlo.channel_handle",
    "stablehlo.output_operand_alias",
    "stablehlo.type_extensions",
    "stablehlo.result_accuracy",
];

fn literal_of(n: Number) -> Literal {
    match n {
        Number::Int {
            negative,
            magnitude,
            hex,
        } => Literal::Int {
            negative,
            magnitude,
            hex,
        },
        Number::Float(f) => Literal::Float(Float(f)),
    }
}

impl<'a> Cursor<'a> {
    /// An attribute value.
    pub fn attr(&mut self) -> Result<Attr, ParseError> {
        self.enter()?;
        let a = self.attr_inner();
        self.leave();
        a
    }

    fn attr_inner(&mut self) -> Result<Attr, ParseError> {
        // Only the recursive arms live in this frame; the rest are calls, so that nested
        // attributes cost little stack.
        match self.peek() {
            Some(b'[') => Ok(Attr::Array(self.bracketed(b'[', b']', Self::attr)?)),
            Some(b'{') => Ok(Attr::Dict(self.dict()?)),
            _ => self.attr_leaf(),
        }
    }

    #[inline(never)]
    fn attr_leaf(&mut self) -> Result<Attr, ParseError> {
        match self.peek() {
            Some(b'"') => Ok(Attr::Str(self.string()?)),
            Some(b'@') => {
                let mut path = vec![self.sigil_name(b'@')?.unwrap_or_default()];
                while self.looking_at("::@") {
                    self.eat_str("::");
                    path.push(self.sigil_name(b'@')?.unwrap_or_default());
                }
                Ok(Attr::Symbol(path))
            }
            Some(b'#') => self.dialect_attr(),
            Some(b'(') | Some(b'!') => Ok(Attr::Type(self.ty()?)),
            _ if self.at_number() => {
                let n = self.number()?;
                let ty = self.opt_colon_type()?;
                Ok(number_attr(n, ty))
            }
            _ => self.attr_word(),
        }
    }

    #[inline(never)]
    fn attr_word(&mut self) -> Result<Attr, ParseError> {
        let save = self.clone();
        let pos = self.pos();
        let Some(word) = self.ident() else {
            return self.expected("an attribute");
        };
        match word {
            "true" => Ok(Attr::Bool(true)),
            "false" => Ok(Attr::Bool(false)),
            "unit" => Ok(Attr::Unit),
            "dense" => self.dense_rest(pos),
            "dense_resource" => {
                self.expect(b'<')?;
                let name = self.resource_key()?;
                self.expect(b'>')?;
                self.expect(b':')?;
                let ty = self.ty()?;
                Ok(Attr::DenseResource { name, ty, pos })
            }
            "array" => self.dense_array_rest(),
            "loc" => {
                *self = save;
                Ok(Attr::Loc(Box::new(self.loc()?)))
            }
            "inf" | "nan" => {
                let v = if word == "inf" {
                    f64::INFINITY
                } else {
                    f64::NAN
                };
                let ty = self.opt_colon_type()?;
                Ok(Attr::Float {
                    value: Float(v),
                    ty,
                })
            }
            w if is_type_word(w) => {
                *self = save;
                Ok(Attr::Type(self.ty()?))
            }
            "affine_map" | "affine_set" | "strided" | "distinct" | "sparse" => {
                if self.here() != Some(b'<') {
                    return self.expected(&format!("`<` after `{word}`"));
                }
                let body = self.balanced()?;
                Ok(Attr::Opaque(format!("{word}{body}")))
            }
            _ => Err(self.error_at(pos, format!("unknown attribute `{word}`"))),
        }
    }

    fn opt_colon_type(&mut self) -> Result<Option<Type>, ParseError> {
        // `:` followed by a type; a `:` that starts something else (none in attributes) is left.
        if self.peek() == Some(b':') && self.peek_at(1) != Some(b':') {
            self.eat(b':');
            Ok(Some(self.ty()?))
        } else {
            Ok(None)
        }
    }

    /// A key of a dictionary or resource: a bare identifier or a string.
    pub fn key(&mut self) -> Result<String, ParseError> {
        if self.peek() == Some(b'"') {
            return self.string();
        }
        match self.ident() {
            Some(k) => Ok(k.to_string()),
            None => self.expected("a name"),
        }
    }

    fn resource_key(&mut self) -> Result<String, ParseError> {
        if self.peek() == Some(b'"') {
            return self.string();
        }
        self.ws();
        let k = self.take_while_here(|c| {
            c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'$' | b'-')
        });
        if k.is_empty() {
            return self.expected("a resource name");
        }
        Ok(k.to_string())
    }

    /// `{key = value, key, ...}`: entries in the order written.
    pub fn dict(&mut self) -> Result<Vec<(String, Attr)>, ParseError> {
        self.bracketed(b'{', b'}', |c| {
            let k = c.key()?;
            let v = if c.eat(b'=') { c.attr()? } else { Attr::Unit };
            Ok((k, v))
        })
    }

    fn dialect_attr(&mut self) -> Result<Attr, ParseError> {
        let start = self.offset();
        let name = self.sigil_name(b'#')?.unwrap_or_default();
        if self.here() != Some(b'<') {
            return Ok(Attr::Opaque(format!("#{name}")));
        }
        if STRUCTS.contains(&name.as_str()) {
            self.expect(b'<')?;
            let fields = self.struct_fields()?;
            return Ok(Attr::Struct { name, fields });
        }
        if !name.contains('.') {
            let save = self.clone();
            self.expect(b'<')?;
            if let Some(kind) = self.ident()
                && let Some(value) = self.ident()
                && self.eat(b'>')
            {
                return Ok(Attr::Enum {
                    dialect: name,
                    kind: kind.to_string(),
                    value: value.to_string(),
                });
            }
            *self = save;
        }
        self.balanced()?;
        Ok(Attr::Opaque(self.slice(start, self.offset()).to_string()))
    }

    /// After `<`: `key = value, ...>` (values may be bare `[1, 2]` lists or types).
    pub fn struct_fields(&mut self) -> Result<Vec<(String, Attr)>, ParseError> {
        self.list_until(b'>', |c| {
            let k = c.key()?;
            c.expect(b'=')?;
            Ok((k, c.attr()?))
        })
    }

    /// After `array`: `<i64: 1, 2>` or `<i64>`.
    fn dense_array_rest(&mut self) -> Result<Attr, ParseError> {
        self.expect(b'<')?;
        let elem = self.ty()?;
        let values = if self.eat(b':') {
            self.list_until(b'>', Self::scalar_literal)?
        } else {
            self.expect(b'>')?;
            vec![]
        };
        Ok(Attr::DenseArray { elem, values })
    }

    fn scalar_literal(&mut self) -> Result<Literal, ParseError> {
        if self.eat_word("true") {
            return Ok(Literal::Bool(true));
        }
        if self.eat_word("false") {
            return Ok(Literal::Bool(false));
        }
        if self.eat_word("inf") {
            return Ok(Literal::Float(Float(f64::INFINITY)));
        }
        if self.eat_word("nan") {
            return Ok(Literal::Float(Float(f64::NAN)));
        }
        Ok(literal_of(self.number()?))
    }

    /// After `dense`: `<...> : type`.
    fn dense_rest(&mut self, pos: crate::ast::Pos) -> Result<Attr, ParseError> {
        self.expect(b'<')?;
        let data = if self.eat(b'>') {
            DenseData::Empty
        } else {
            let data = if self.peek() == Some(b'"') {
                let spos = self.pos();
                let s = self.string()?;
                let bytes = s.strip_prefix("0x").and_then(hex_bytes).ok_or_else(|| {
                    self.error_at(spos, "expected a `\"0x...\"` hex blob in `dense<...>`")
                })?;
                DenseData::Hex(bytes)
            } else {
                DenseData::Literals(self.literal()?)
            };
            self.expect(b'>')?;
            data
        };
        self.expect(b':')?;
        let ty = self.ty()?;
        Ok(Attr::Dense { data, ty, pos })
    }

    /// A literal of `dense<...>`: a scalar, `(re, im)`, or a nested list.
    fn literal(&mut self) -> Result<Literal, ParseError> {
        self.enter()?;
        let l = self.literal_inner();
        self.leave();
        l
    }

    fn literal_inner(&mut self) -> Result<Literal, ParseError> {
        if self.eat(b'[') {
            return Ok(Literal::List(self.list_until(b']', Self::literal)?));
        }
        if self.eat(b'(') {
            let re = self.scalar_literal()?;
            self.expect(b',')?;
            let im = self.scalar_literal()?;
            self.expect(b')')?;
            return Ok(Literal::Complex(Box::new(re), Box::new(im)));
        }
        self.scalar_literal()
    }

    /// `loc(...)`.
    pub fn loc(&mut self) -> Result<Location, ParseError> {
        self.expect_word("loc")?;
        self.expect(b'(')?;
        let l = self.loc_inner()?;
        self.expect(b')')?;
        Ok(l)
    }

    /// The inside of `loc(...)`.
    pub fn loc_inner(&mut self) -> Result<Location, ParseError> {
        self.enter()?;
        let l = self.loc_inner2();
        self.leave();
        l
    }

    fn loc_inner2(&mut self) -> Result<Location, ParseError> {
        match self.peek() {
            Some(b'#') => Ok(Location::Alias(self.sigil_name(b'#')?.unwrap_or_default())),
            Some(b'"') => {
                let s = self.string()?;
                if self.peek() == Some(b':') {
                    self.eat(b':');
                    let line = self.loc_u32()?;
                    self.expect(b':')?;
                    let col = self.loc_u32()?;
                    let end = if self.eat_word("to") {
                        if self.eat(b':') {
                            Some((None, self.loc_u32()?))
                        } else {
                            let l = self.loc_u32()?;
                            self.expect(b':')?;
                            Some((Some(l), self.loc_u32()?))
                        }
                    } else {
                        None
                    };
                    Ok(Location::File {
                        file: s,
                        line,
                        col,
                        end,
                    })
                } else if self.eat(b'(') {
                    let child = self.loc_inner()?;
                    self.expect(b')')?;
                    Ok(Location::Name {
                        name: s,
                        child: Some(Box::new(child)),
                    })
                } else {
                    Ok(Location::Name {
                        name: s,
                        child: None,
                    })
                }
            }
            _ => {
                if self.eat_word("unknown") {
                    Ok(Location::Unknown)
                } else if self.eat_word("callsite") {
                    self.expect(b'(')?;
                    let callee = self.loc_inner()?;
                    self.expect_word("at")?;
                    let caller = self.loc_inner()?;
                    self.expect(b')')?;
                    Ok(Location::CallSite {
                        callee: Box::new(callee),
                        caller: Box::new(caller),
                    })
                } else if self.eat_word("fused") {
                    let metadata = if self.eat(b'<') {
                        let a = self.attr()?;
                        self.expect(b'>')?;
                        Some(Box::new(a))
                    } else {
                        None
                    };
                    let locs = self.bracketed(b'[', b']', Self::loc_inner)?;
                    Ok(Location::Fused { metadata, locs })
                } else {
                    self.expected("a location")
                }
            }
        }
    }

    fn loc_u32(&mut self) -> Result<u32, ParseError> {
        let pos = self.pos();
        let v = self.unsigned()?;
        u32::try_from(v).map_err(|_| self.error_at(pos, "location number out of range"))
    }
}

/// An integer or float attribute; a hex integer with a float type is that float's bits.
fn number_attr(n: Number, ty: Option<Type>) -> Attr {
    match n {
        Number::Float(value) => Attr::Float {
            value: Float(value),
            ty,
        },
        Number::Int {
            negative,
            magnitude,
            hex,
        } => {
            if hex && !negative {
                match ty {
                    Some(Type::Scalar(ElementType::F32)) => {
                        let value = f64::from(f32::from_bits(magnitude as u32));
                        return Attr::Float {
                            value: Float(value),
                            ty,
                        };
                    }
                    Some(Type::Scalar(ElementType::F64)) => {
                        let value = f64::from_bits(magnitude as u64);
                        return Attr::Float {
                            value: Float(value),
                            ty,
                        };
                    }
                    _ => {}
                }
            }
            let v = i128::try_from(magnitude).unwrap_or(i128::MAX);
            Attr::Int {
                value: if negative { -v } else { v },
                ty,
            }
        }
    }
}
