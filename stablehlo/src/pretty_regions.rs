//! The pretty forms of ops with regions or compound syntax: `stablehlo.reduce` (the compact
//! `applies stablehlo.add` form and the `reducer(...) (...) {...}` form of multi-operand
//! reductions, as argmax emits), `stablehlo.while` (`cond { } do { }` over named iteration
//! arguments) and `stablehlo.convolution` (`dim_numbers = [b, 0, 1, f]x[...]->[...]`,
//! `window = {...}`).

use crate::ast::{
    Attr, Block, BlockArg, DenseData, ElementType, Literal, Op, Region, Type, ValueRef,
};
use crate::cursor::Cursor;
use crate::error::ParseError;
use crate::pretty::{i64_array, int_literal};

impl<'a> Cursor<'a> {
    /// After `stablehlo.reduce`: `(%a init: %b), ... [applies OP] across dimensions = [..]
    /// [attrs] : fn-type [reducer(%x: T, %y: T) ... { body }]`.
    pub fn reduce_rest(&mut self, op: &mut Op) -> Result<(), ParseError> {
        let (mut inputs, mut inits) = (Vec::new(), Vec::new());
        loop {
            self.expect(b'(')?;
            inputs.push(self.value_use()?);
            self.expect_word("init")?;
            self.expect(b':')?;
            inits.push(self.value_use()?);
            self.expect(b')')?;
            if !self.eat(b',') {
                break;
            }
        }
        let n = inputs.len();
        op.operands = inputs.into_iter().chain(inits).collect();
        self.ws();
        let pos = self.pos();
        let applies = if self.eat_word("applies") {
            Some((self.expect_ident("the reducing op")?.to_string(), pos))
        } else {
            None
        };
        self.expect_word("across")?;
        self.expect_word("dimensions")?;
        self.expect(b'=')?;
        let dims = self.int_list()?;
        op.attrs.push(("dimensions".into(), i64_array(&dims)));
        self.opt_dict(op)?;
        self.expect(b':')?;
        self.fn_types(op)?;
        let init_types: Vec<Type> = op.operand_types.iter().skip(n).cloned().collect();
        if let Some((body_op, pos)) = applies {
            if n != 1 || init_types.len() != 1 {
                return Err(self.error_at(pos, "`applies` needs exactly one operand and one init"));
            }
            op.regions
                .push(applies_region(&body_op, &init_types[0], op.pos));
            return Ok(());
        }
        self.expect_word("reducer")?;
        let (mut lhs, mut rhs) = (Vec::new(), Vec::new());
        for _ in 0..n {
            let pair = self.block_args()?;
            let [a, b]: [BlockArg; 2] = pair
                .try_into()
                .map_err(|_| self.error_at(self.pos(), "a reducer pair needs two arguments"))?;
            lhs.push(a);
            rhs.push(b);
        }
        let args = lhs.into_iter().chain(rhs).collect();
        op.regions.push(self.region_with_args(args)?);
        Ok(())
    }

    /// After `stablehlo.while`: `(%iterArg = %a, ...) : T, ... [attributes {...}] cond {...}
    /// do {...}`.
    pub fn while_rest(&mut self, op: &mut Op) -> Result<(), ParseError> {
        let (names, operands): (Vec<String>, Vec<_>) = self
            .bracketed(b'(', b')', |c| {
                let Some(name) = c.sigil_name(b'%')? else {
                    return c.expected("an iteration argument (`%name = %value`)");
                };
                c.expect(b'=')?;
                Ok((name, c.value_use()?))
            })?
            .into_iter()
            .unzip();
        op.operands = operands;
        let mut types_pos = self.pos();
        let types = if self.eat(b':') {
            self.ws();
            types_pos = self.pos();
            self.type_list()?
        } else {
            vec![]
        };
        if types.len() != names.len() {
            return Err(self.error_at(
                types_pos,
                format!(
                    "{} iteration arguments but {} types",
                    names.len(),
                    types.len()
                ),
            ));
        }
        self.opt_dict(op)?;
        for word in ["cond", "do"] {
            self.expect_word(word)?;
            let args: Vec<BlockArg> = names
                .iter()
                .zip(&types)
                .map(|(name, ty)| BlockArg {
                    name: name.clone(),
                    ty: ty.clone(),
                    loc: None,
                })
                .collect();
            op.regions.push(self.region_with_args(args)?);
        }
        op.operand_types = types.clone();
        op.result_types = types;
        Ok(())
    }

    /// After `stablehlo.convolution`: `(%lhs, %rhs) dim_numbers = ..., window = {...}
    /// {attrs} : fn-type`.
    pub fn convolution_rest(&mut self, op: &mut Op) -> Result<(), ParseError> {
        self.expect(b'(')?;
        op.operands = self.value_uses_until(b')')?;
        self.expect_word("dim_numbers")?;
        self.expect(b'=')?;
        self.ws();
        let start = self.offset();
        for i in 0..3 {
            if self.peek() != Some(b'[') {
                return self.expected("`[` of convolution dimension numbers");
            }
            self.balanced()?;
            if i == 0 {
                self.expect_word("x")?;
            } else if i == 1 {
                self.expect_str("->")?;
            }
        }
        let text = self.slice(start, self.offset());
        op.attrs.push((
            "dimension_numbers".into(),
            Attr::Opaque(format!("#stablehlo.conv<{text}>")),
        ));
        if self.eat(b',') {
            self.expect_word("window")?;
            self.expect(b'=')?;
            self.expect(b'{')?;
            if !self.eat(b'}') {
                loop {
                    let pos = self.pos();
                    let key = self.expect_ident("a window field")?;
                    self.expect(b'=')?;
                    match key {
                        "stride" => self.window_list(op, "window_strides")?,
                        "lhs_dilate" => self.window_list(op, "lhs_dilation")?,
                        "rhs_dilate" => self.window_list(op, "rhs_dilation")?,
                        "pad" => {
                            let p = self.padding()?;
                            op.attrs.push(("padding".into(), p));
                        }
                        "reverse" => {
                            let values = self.bracketed(b'[', b']', |c| match c.attr()? {
                                Attr::Bool(b) => Ok(Literal::Bool(b)),
                                Attr::Int { value, .. } => Ok(Literal::Bool(value != 0)),
                                _ => c.expected("`true` or `false`"),
                            })?;
                            let elem = Type::Scalar(ElementType::Int {
                                width: 1,
                                signed: None,
                            });
                            op.attrs.push((
                                "window_reversal".into(),
                                Attr::DenseArray { elem, values },
                            ));
                        }
                        _ => {
                            return Err(self.error_at(pos, format!("unknown window field `{key}`")));
                        }
                    }
                    if !self.eat(b',') {
                        break;
                    }
                }
                self.expect(b'}')?;
            }
        }
        self.opt_dict(op)?;
        self.expect(b':')?;
        self.fn_types(op)
    }

    fn window_list(&mut self, op: &mut Op, key: &str) -> Result<(), ParseError> {
        let v = self.int_list()?;
        op.attrs.push((key.into(), i64_array(&v)));
        Ok(())
    }

    /// `[[lo, hi], ...]` as the `dense<...> : tensor<Nx2xi64>` the generic form prints (a
    /// splat when every value is the same).
    fn padding(&mut self) -> Result<Attr, ParseError> {
        let pos = self.pos();
        let rows = self.bracketed(b'[', b']', |c| {
            let row = c.int_list()?;
            if row.len() != 2 {
                return Err(c.error_at(pos, "each padding entry is `[low, high]`"));
            }
            Ok(row)
        })?;
        let flat: Vec<i64> = rows.iter().flatten().copied().collect();
        let data = match flat.first() {
            None => DenseData::Empty,
            Some(first) if flat.iter().all(|v| v == first) => {
                DenseData::Literals(int_literal(*first))
            }
            _ => DenseData::Literals(Literal::List(
                rows.iter()
                    .map(|r| Literal::List(r.iter().map(|v| int_literal(*v)).collect()))
                    .collect(),
            )),
        };
        let ty = Type::Tensor {
            dims: Some(vec![
                crate::ast::Dim::Static(rows.len() as u64),
                crate::ast::Dim::Static(2),
            ]),
            elem: ElementType::Int {
                width: 64,
                signed: None,
            },
            encoding: None,
        };
        Ok(Attr::Dense { data, ty, pos })
    }
}

/// The body `applies OP` stands for: `^bb0(%lhs: T, %rhs: T): %r = OP %lhs, %rhs : T;
/// stablehlo.return %r : T`.
fn applies_region(body_op: &str, t: &Type, pos: crate::ast::Pos) -> Region {
    let v = |n: &str| ValueRef {
        name: n.into(),
        index: 0,
    };
    let arg = |n: &str| BlockArg {
        name: n.into(),
        ty: t.clone(),
        loc: None,
    };
    let op = |name: &str,
              results: Vec<crate::ast::ResultGroup>,
              operands: Vec<ValueRef>,
              rt: Vec<Type>| Op {
        name: name.into(),
        results,
        operand_types: vec![t.clone(); operands.len()],
        operands,
        attrs: vec![],
        regions: vec![],
        successors: vec![],
        result_types: rt,
        loc: None,
        pos,
    };
    let body = op(
        body_op,
        vec![crate::ast::ResultGroup {
            name: "__applies".into(),
            count: 1,
        }],
        vec![v("__lhs"), v("__rhs")],
        vec![t.clone()],
    );
    let ret = op("stablehlo.return", vec![], vec![v("__applies")], vec![]);
    Region {
        blocks: vec![Block {
            label: None,
            args: vec![arg("__lhs"), arg("__rhs")],
            ops: vec![body, ret],
        }],
    }
}
