//! The pretty (custom assembly) forms of StableHLO and CHLO ops as JAX prints them, each read
//! into the generic shape with the attributes its generic form carries (`dims = [0]` becomes
//! `broadcast_dimensions = array<i64: 0>`, `LT, ..., FLOAT` becomes the two enum attributes,
//! ...), and the defaults the generic form prints but the pretty form leaves out. Forms with
//! regions (reduce, while, convolution's window) are in `pretty_regions.rs`.

use crate::ast::{Attr, ElementType, Literal, Op, Type};
use crate::cursor::Cursor;
use crate::error::ParseError;

pub fn i64_type() -> Type {
    Type::Scalar(ElementType::Int {
        width: 64,
        signed: None,
    })
}

pub fn int_attr(value: i64, width: u16) -> Attr {
    Attr::Int {
        value: i128::from(value),
        ty: Some(Type::Scalar(ElementType::Int {
            width,
            signed: None,
        })),
    }
}

pub fn int_literal(v: i64) -> Literal {
    Literal::Int {
        negative: v < 0,
        magnitude: u128::from(v.unsigned_abs()),
        hex: false,
    }
}

pub fn i64_array(values: &[i64]) -> Attr {
    Attr::DenseArray {
        elem: i64_type(),
        values: values.iter().map(|v| int_literal(*v)).collect(),
    }
}

pub fn enum_attr(kind: &str, value: &str) -> Attr {
    Attr::Enum {
        dialect: "stablehlo".into(),
        kind: kind.into(),
        value: value.into(),
    }
}

/// `[1, 2]` as the untyped integer array a struct field holds.
pub fn int_array(values: &[i64]) -> Attr {
    Attr::Array(
        values
            .iter()
            .map(|v| Attr::Int {
                value: i128::from(*v),
                ty: None,
            })
            .collect(),
    )
}

/// Whether `v` is an array of empty dictionaries (a function's `arg_attrs` with nothing in it).
fn all_empty_dicts(v: &Attr) -> bool {
    match v {
        Attr::Array(items) => items
            .iter()
            .all(|d| matches!(d, Attr::Dict(e) if e.is_empty())),
        _ => false,
    }
}

/// Fills in what a generic form prints and the pretty form leaves out, and drops what the
/// generic form prints empty (a function's all-empty argument attributes).
pub fn defaults(op: &mut Op) {
    let missing = |op: &Op, k: &str| op.attrs.iter().all(|(n, _)| n != k);
    match op.name.as_str() {
        "func.func" => op.attrs.retain(|(k, v)| {
            !(matches!(k.as_str(), "arg_attrs" | "res_attrs") && all_empty_dicts(v))
        }),
        "stablehlo.custom_call" => {
            for (k, v) in [
                ("api_version", int_attr(1, 32)),
                ("called_computations", Attr::Array(vec![])),
                ("has_side_effect", Attr::Bool(false)),
                ("output_operand_aliases", Attr::Array(vec![])),
                ("backend_config", Attr::Str(String::new())),
            ] {
                if missing(op, k) {
                    op.attrs.push((k.into(), v));
                }
            }
        }
        "stablehlo.composite" if missing(op, "version") => {
            op.attrs.push(("version".into(), int_attr(0, 32)));
        }
        _ => {}
    }
}

impl<'a> Cursor<'a> {
    /// After a pretty op's name.
    pub fn pretty(&mut self, op: &mut Op) -> Result<(), ParseError> {
        let name = op.name.clone();
        match name.as_str() {
            "builtin.module" => self.module_rest(op),
            "func.func" => self.func_rest(op),
            "func.return" | "stablehlo.return" | "sdy.return" | "chlo.return" => {
                self.return_rest(op)
            }
            "func.call" => self.call_rest(op),
            "sdy.mesh" => self.sdy_mesh_rest(op),
            "sdy.sharding_constraint" | "sdy.reshard" => self.sdy_sharding_rest(op),
            "sdy.manual_computation" => self.sdy_manual_rest(op),
            "stablehlo.reduce" => self.reduce_rest(op),
            "stablehlo.while" => self.while_rest(op),
            "stablehlo.convolution" => self.convolution_rest(op),
            "chlo.top_k" => {
                self.expect(b'(')?;
                op.operands = vec![self.value_use()?];
                self.expect(b',')?;
                self.expect_word("k")?;
                self.expect(b'=')?;
                let k = self.signed()?;
                op.attrs.push(("k".into(), int_attr(k, 64)));
                self.expect(b')')?;
                self.chlo_types(op)
            }
            n if n.starts_with("chlo.") => {
                op.operands = self.value_uses()?;
                self.opt_dict(op)?;
                self.chlo_types(op)
            }
            "stablehlo.constant" => {
                self.opt_dict(op)?;
                let pos = self.pos();
                let value = self.attr()?;
                let ty = match &value {
                    Attr::Dense { ty, .. } | Attr::DenseResource { ty, .. } => ty.clone(),
                    _ => return Err(self.error_at(pos, "expected `dense<...> : type`")),
                };
                op.attrs.push(("value".into(), value));
                op.result_types = vec![ty];
                Ok(())
            }
            "stablehlo.compare" => {
                let dir = self.expect_ident("a comparison direction")?;
                let dir = enum_attr("comparison_direction", dir);
                op.attrs.push(("comparison_direction".into(), dir));
                self.expect(b',')?;
                op.operands = self.value_uses()?;
                if self.eat(b',') {
                    let t = self.expect_ident("a comparison type")?;
                    op.attrs.push(("compare_type".into(), enum_attr("comparison_type", t)));
                }
                self.opt_dict(op)?;
                self.same_or_fn(op)
            }
            "stablehlo.select" => {
                op.operands = self.value_uses()?;
                self.opt_dict(op)?;
                self.expect(b':')?;
                if self.peek() == Some(b'(') {
                    return self.fn_types(op);
                }
                let pred = self.ty()?;
                self.expect(b',')?;
                let t = self.ty()?;
                op.operand_types = vec![pred, t.clone(), t.clone()];
                op.result_types = vec![t];
                Ok(())
            }
            "stablehlo.iota" => {
                self.keyword_int(op, "dim", "iota_dimension")?;
                self.opt_dict(op)?;
                self.expect(b':')?;
                op.result_types = vec![self.ty()?];
                Ok(())
            }
            "stablehlo.broadcast_in_dim" | "stablehlo.transpose" | "stablehlo.reverse" => {
                op.operands = self.value_uses()?;
                self.expect(b',')?;
                self.expect_word("dims")?;
                self.expect(b'=')?;
                let dims = self.int_list()?;
                let key = match name.as_str() {
                    "stablehlo.broadcast_in_dim" => "broadcast_dimensions",
                    "stablehlo.transpose" => "permutation",
                    _ => "dimensions",
                };
                op.attrs.push((key.into(), i64_array(&dims)));
                self.opt_dict(op)?;
                self.same_or_fn(op)
            }
            "stablehlo.broadcast" => {
                op.operands = self.value_uses()?;
                self.expect(b',')?;
                self.keyword_list(op, "sizes", "broadcast_sizes")?;
                self.opt_dict(op)?;
                self.same_or_fn(op)
            }
            "stablehlo.get_dimension_size" | "stablehlo.dynamic_iota" => {
                op.operands = self.value_uses()?;
                self.expect(b',')?;
                let key = if name == "stablehlo.dynamic_iota" {
                    "iota_dimension"
                } else {
                    "dimension"
                };
                self.keyword_int(op, "dim", key)?;
                self.opt_dict(op)?;
                self.same_or_fn(op)
            }
            "stablehlo.dynamic_broadcast_in_dim" => {
                op.operands = self.value_uses()?;
                self.expect(b',')?;
                self.keyword_list(op, "dims", "broadcast_dimensions")?;
                self.opt_dict(op)?;
                self.same_or_fn(op)
            }
            "stablehlo.set_dimension_size" => {
                op.operands = self.value_uses()?;
                self.expect(b',')?;
                self.keyword_int(op, "dim", "dimension")?;
                self.opt_dict(op)?;
                self.same_or_fn(op)
            }
            "stablehlo.rng" => {
                op.operands = self.value_uses()?;
                self.expect(b',')?;
                self.keyword_enum(op, "distribution", "rng_distribution", "rng_distribution")?;
                self.opt_dict(op)?;
                self.same_or_fn(op)
            }
            "stablehlo.einsum" => {
                op.operands = self.value_uses()?;
                self.expect(b',')?;
                self.expect_word("config")?;
                self.expect(b'=')?;
                let config = self.string()?;
                op.attrs.push(("einsum_config".into(), Attr::Str(config)));
                self.opt_dict(op)?;
                self.same_or_fn(op)
            }
            "stablehlo.concatenate" => {
                op.operands = self.value_uses()?;
                self.expect(b',')?;
                self.keyword_int(op, "dim", "dimension")?;
                self.opt_dict(op)?;
                self.same_or_fn(op)
            }
            "stablehlo.slice" => {
                op.operands = vec![self.value_use()?];
                let ranges = self.bracketed(b'[', b']', |c| {
                    let start = c.signed()?;
                    c.expect(b':')?;
                    let limit = c.signed()?;
                    let stride = if c.eat(b':') { c.signed()? } else { 1 };
                    Ok([start, limit, stride])
                })?;
                let [start, limit, strides] =
                    [0, 1, 2].map(|k| ranges.iter().map(|r| r[k]).collect::<Vec<i64>>());
                op.attrs.push(("start_indices".into(), i64_array(&start)));
                op.attrs.push(("limit_indices".into(), i64_array(&limit)));
                op.attrs.push(("strides".into(), i64_array(&strides)));
                self.opt_dict(op)?;
                self.same_or_fn(op)
            }
            "stablehlo.dynamic_slice" => {
                op.operands = self.value_uses()?;
                self.expect(b',')?;
                self.keyword_list(op, "sizes", "slice_sizes")?;
                self.opt_dict(op)?;
                self.same_or_fn(op)
            }
            "stablehlo.pad" => {
                op.operands = self.value_uses()?;
                for (word, key) in [
                    ("low", "edge_padding_low"),
                    ("high", "edge_padding_high"),
                    ("interior", "interior_padding"),
                ] {
                    self.expect(b',')?;
                    self.keyword_list(op, word, key)?;
                }
                self.opt_dict(op)?;
                self.same_or_fn(op)
            }
            "stablehlo.dot_general" => self.dot_general_rest(op),
            "stablehlo.dot" => {
                op.operands = self.value_uses()?;
                if self.eat(b',') {
                    self.expect_word("precision")?;
                    self.expect(b'=')?;
                    let p = self.precision_list()?;
                    op.attrs.push(("precision_config".into(), p));
                }
                self.opt_dict(op)?;
                self.same_or_fn(op)
            }
            "stablehlo.rng_bit_generator" => {
                op.operands = self.value_uses()?;
                self.expect(b',')?;
                self.keyword_enum(op, "algorithm", "rng_algorithm", "rng_algorithm")?;
                self.opt_dict(op)?;
                self.same_or_fn(op)
            }
            "stablehlo.fft" => {
                op.operands = self.value_uses()?;
                self.expect(b',')?;
                self.keyword_enum(op, "type", "fft_type", "fft_type")?;
                self.expect(b',')?;
                self.keyword_list(op, "length", "fft_length")?;
                self.opt_dict(op)?;
                self.same_or_fn(op)
            }
            "stablehlo.cholesky" => {
                op.operands = self.value_uses()?;
                if self.eat(b',') {
                    self.expect_word("lower")?;
                    self.expect(b'=')?;
                    let v = self.attr()?;
                    op.attrs.push(("lower".into(), v));
                }
                self.opt_dict(op)?;
                self.same_or_fn(op)
            }
            "stablehlo.reduce_precision" => {
                op.operands = self.value_uses()?;
                self.expect(b',')?;
                self.expect_word("format")?;
                self.expect(b'=')?;
                let pos = self.pos();
                let f = self.expect_ident("a format (`e5m10`)")?;
                let (e, m) = f
                    .strip_prefix('e')
                    .and_then(|r| r.split_once('m'))
                    .and_then(|(e, m)| Some((e.parse::<i64>().ok()?, m.parse::<i64>().ok()?)))
                    .ok_or_else(|| self.error_at(pos, format!("bad format `{f}`")))?;
                op.attrs.push(("exponent_bits".into(), int_attr(e, 32)));
                op.attrs.push(("mantissa_bits".into(), int_attr(m, 32)));
                self.opt_dict(op)?;
                self.same_or_fn(op)
            }
            "stablehlo.custom_call" => {
                let Some(target) = self.sigil_name(b'@')? else {
                    return self.expected("a call target (`@name`)");
                };
                op.attrs.push(("call_target_name".into(), Attr::Str(target)));
                self.expect(b'(')?;
                op.operands = self.value_uses_until(b')')?;
                self.opt_dict(op)?;
                self.expect(b':')?;
                self.fn_types(op)
            }
            "stablehlo.composite" => {
                let n = self.string()?;
                op.attrs.push(("name".into(), Attr::Str(n)));
                if self.peek() == Some(b'%') {
                    op.operands = self.value_uses()?;
                }
                self.opt_dict(op)?;
                self.expect(b':')?;
                self.fn_types(op)
            }
            "stablehlo.get_tuple_element" => {
                op.operands = vec![self.value_use()?];
                self.expect(b'[')?;
                let i = self.signed()?;
                self.expect(b']')?;
                op.attrs.push(("index".into(), int_attr(i, 32)));
                self.opt_dict(op)?;
                self.same_or_fn(op)
            }
            "stablehlo.tuple" => {
                if self.peek() == Some(b'%') {
                    op.operands = self.value_uses()?;
                }
                self.opt_dict(op)?;
                self.expect(b':')?;
                let pos = self.pos();
                match self.ty()? {
                    Type::Tuple(elems) => {
                        op.operand_types = elems.clone();
                        op.result_types = vec![Type::Tuple(elems)];
                        Ok(())
                    }
                    _ => Err(self.error_at(pos, "expected a tuple type")),
                }
            }
            "stablehlo.optimization_barrier" => {
                if self.peek() == Some(b'%') {
                    op.operands = self.value_uses()?;
                }
                self.opt_dict(op)?;
                self.expect(b':')?;
                if self.peek() == Some(b'(') {
                    return self.fn_types(op);
                }
                let types = self.type_list()?;
                op.operand_types = types.clone();
                op.result_types = types;
                Ok(())
            }
            "stablehlo.complex" | "stablehlo.real" | "stablehlo.imag" => {
                op.operands = self.value_uses()?;
                self.opt_dict(op)?;
                self.expect(b':')?;
                if self.peek() == Some(b'(') {
                    return self.fn_types(op);
                }
                let t = self.ty()?;
                if name == "stablehlo.complex" {
                    op.operand_types = vec![complex_part(&t); op.operands.len()];
                    op.result_types = vec![t];
                } else {
                    op.result_types = vec![complex_part(&t)];
                    op.operand_types = vec![t; op.operands.len()];
                }
                Ok(())
            }
            n if n.starts_with("stablehlo.") => {
                if self.peek() == Some(b'%') {
                    op.operands = self.value_uses()?;
                }
                self.opt_dict(op)?;
                self.same_or_fn(op)
            }
            _ => Err(self.error_at(op.pos, format!(
                "no pretty form of `{name}` is known: write it in the generic form (`\"{name}\"(...)`)"
            ))),
        }
    }

    /// An optional `{attr-dict}` (also `attributes {...}`).
    pub fn opt_dict(&mut self, op: &mut Op) -> Result<(), ParseError> {
        self.eat_word("attributes");
        if self.peek() == Some(b'{') {
            op.attrs.extend(self.dict()?);
        }
        Ok(())
    }

    /// `: T` (every operand and the result of type T) or `: (T, T) -> T`.
    pub fn same_or_fn(&mut self, op: &mut Op) -> Result<(), ParseError> {
        self.expect(b':')?;
        if self.peek() == Some(b'(') {
            return self.fn_types(op);
        }
        let t = self.ty()?;
        op.operand_types = vec![t.clone(); op.operands.len()];
        op.result_types = vec![t];
        Ok(())
    }

    /// CHLO's `: T, T -> T` or `: T -> (T, T)`.
    fn chlo_types(&mut self, op: &mut Op) -> Result<(), ParseError> {
        self.expect(b':')?;
        if self.peek() == Some(b'(') {
            return self.fn_types(op);
        }
        op.operand_types = self.type_list()?;
        self.expect_str("->")?;
        op.result_types = if self.peek() == Some(b'(') {
            self.type_list_parens()?
        } else {
            vec![self.ty()?]
        };
        Ok(())
    }

    /// `[1, -2, 3]`.
    pub fn int_list(&mut self) -> Result<Vec<i64>, ParseError> {
        self.bracketed(b'[', b']', Self::signed)
    }

    /// `word = N` as an i64 attribute `key`.
    fn keyword_int(&mut self, op: &mut Op, word: &str, key: &str) -> Result<(), ParseError> {
        self.expect_word(word)?;
        self.expect(b'=')?;
        let v = self.signed()?;
        op.attrs.push((key.into(), int_attr(v, 64)));
        Ok(())
    }

    /// `word = [..]` as an `array<i64: ...>` attribute `key`.
    fn keyword_list(&mut self, op: &mut Op, word: &str, key: &str) -> Result<(), ParseError> {
        self.expect_word(word)?;
        self.expect(b'=')?;
        let v = self.int_list()?;
        op.attrs.push((key.into(), i64_array(&v)));
        Ok(())
    }

    /// `word = VALUE` as the enum attribute `#stablehlo<kind VALUE>` named `key`.
    fn keyword_enum(
        &mut self,
        op: &mut Op,
        word: &str,
        key: &str,
        kind: &str,
    ) -> Result<(), ParseError> {
        self.expect_word(word)?;
        self.expect(b'=')?;
        let v = self.expect_ident("a value")?;
        op.attrs.push((key.into(), enum_attr(kind, v)));
        Ok(())
    }

    /// `[DEFAULT, HIGHEST]`.
    pub fn precision_list(&mut self) -> Result<Attr, ParseError> {
        let list = self.bracketed(b'[', b']', |c| {
            Ok(enum_attr("precision", c.expect_ident("a precision")?))
        })?;
        Ok(Attr::Array(list))
    }

    /// After `stablehlo.dot_general`: operands, dimension numbers, precision, algorithm.
    fn dot_general_rest(&mut self, op: &mut Op) -> Result<(), ParseError> {
        op.operands = self.value_uses()?;
        let mut fields = Vec::new();
        while self.eat(b',') {
            let pos = self.pos();
            let word = self
                .expect_ident("`batching_dims`, `contracting_dims`, `precision` or `algorithm`")?;
            self.expect(b'=')?;
            match word {
                "batching_dims" | "contracting_dims" => {
                    let lhs = self.int_list()?;
                    self.expect_word("x")?;
                    let rhs = self.int_list()?;
                    let kind = if word == "batching_dims" {
                        "batching"
                    } else {
                        "contracting"
                    };
                    if !lhs.is_empty() {
                        fields.push((format!("lhs_{kind}_dimensions"), int_array(&lhs)));
                    }
                    if !rhs.is_empty() {
                        fields.push((format!("rhs_{kind}_dimensions"), int_array(&rhs)));
                    }
                }
                "precision" => {
                    let p = self.precision_list()?;
                    op.attrs.push(("precision_config".into(), p));
                }
                "algorithm" => {
                    self.expect(b'<')?;
                    let f = self.struct_fields()?;
                    op.attrs.push((
                        "algorithm".into(),
                        Attr::Struct {
                            name: "stablehlo.dot_algorithm".into(),
                            fields: f,
                        },
                    ));
                }
                _ => {
                    return Err(self.error_at(pos, format!("unknown dot_general keyword `{word}`")));
                }
            }
        }
        op.attrs.push((
            "dot_dimension_numbers".into(),
            Attr::Struct {
                name: "stablehlo.dot".into(),
                fields,
            },
        ));
        self.opt_dict(op)?;
        self.same_or_fn(op)
    }
}

/// The real type of a complex tensor type (`tensor<4xcomplex<f32>>` → `tensor<4xf32>`).
fn complex_part(t: &Type) -> Type {
    match t {
        Type::Tensor {
            dims,
            elem: ElementType::Complex(part),
            encoding,
        } => Type::Tensor {
            dims: dims.clone(),
            elem: match part {
                crate::ast::ComplexOf::F32 => ElementType::F32,
                crate::ast::ComplexOf::F64 => ElementType::F64,
            },
            encoding: encoding.clone(),
        },
        other => other.clone(),
    }
}
