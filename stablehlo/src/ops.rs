//! The file and the generic op form: `#loc` alias definitions (before or after the module),
//! the one top-level module, operations (`%0:2 = "name"(%a, %b#1) <{props}> ({regions})
//! {attrs} : (types) -> types loc(...)`), regions and blocks with arguments, value uses, the
//! `{-# dialect_resources ... #-}` trailer. Pretty forms are read in `pretty*.rs` and
//! `func.rs`, into the same shape.

use crate::ast::{
    Attr, Block, BlockArg, Module, Op, Pos, Region, Resource, ResultGroup, Type, ValueRef,
};
use crate::cursor::{Cursor, MAX_INPUT, hex_bytes};
use crate::error::ParseError;

/// Reads a whole file: one module, location aliases, resources. On a thread with a stack of
/// its own ([`crate::stack::STACK`]), whatever the caller's.
pub fn parse(src: &str) -> Result<Module, ParseError> {
    crate::stack::on_big_stack("reader", || parse_here(src))
        .unwrap_or_else(|message| Err(ParseError::Thread { message }))
}

fn parse_here(src: &str) -> Result<Module, ParseError> {
    let mut c = Cursor::new(src);
    if src.len() > MAX_INPUT {
        return Err(ParseError::TooLarge {
            pos: c.pos(),
            op: crate::error::one_line(&c.op),
            what: "input size".into(),
            limit: MAX_INPUT as u64,
        });
    }
    let mut loc_aliases = Vec::new();
    let mut resources = Vec::new();
    let mut module: Option<Op> = None;
    loop {
        c.op = "module".into();
        if c.at_end() {
            break;
        }
        if c.looking_at("{-#") {
            c.resources(&mut resources)?;
        } else if c.peek() == Some(b'#') {
            let pos = c.pos();
            let name = c.sigil_name(b'#')?.unwrap_or_default();
            c.expect(b'=')?;
            if !c.looking_at_word("loc") {
                return Err(c.error_at(pos, format!("`#{name}` is not a location alias")));
            }
            loc_aliases.push((name, c.loc()?));
        } else {
            let pos = c.pos();
            let op = c.op()?;
            if module.is_some() {
                return Err(c.error_at(pos, "a second top-level operation"));
            }
            if op.name != "builtin.module" {
                return Err(c.error_at(pos, format!("expected a module, found `{}`", op.name)));
            }
            module = Some(op);
        }
    }
    let Some(op) = module else {
        return c.expected("a module");
    };
    let module = Module {
        op,
        loc_aliases,
        resources,
    };
    crate::values::check(&module)?;
    Ok(module)
}

impl<'a> Cursor<'a> {
    /// One operation, either form.
    pub fn op(&mut self) -> Result<Op, ParseError> {
        // An operation costs two levels (its frames are the largest), its region a third.
        self.enter()?;
        if let Err(e) = self.enter() {
            self.leave();
            return Err(e);
        }
        let pos = self.pos();
        let outer = self.op.clone();
        let r = self.op_inner(pos);
        self.op = outer;
        self.leave();
        self.leave();
        r
    }

    fn op_inner(&mut self, pos: Pos) -> Result<Op, ParseError> {
        let mut results = Vec::new();
        if self.peek() == Some(b'%') {
            loop {
                let name = self.sigil_name(b'%')?.unwrap_or_default();
                let count = if self.eat(b':') {
                    let p = self.pos();
                    let n = self.unsigned()?;
                    u32::try_from(n)
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or_else(|| self.error_at(p, "bad result count"))?
                } else {
                    1
                };
                results.push(ResultGroup { name, count });
                if !self.eat(b',') {
                    break;
                }
            }
            self.expect(b'=')?;
        }
        let mut op = Op {
            name: String::new(),
            results,
            operands: vec![],
            attrs: vec![],
            regions: vec![],
            successors: vec![],
            operand_types: vec![],
            result_types: vec![],
            loc: None,
            pos,
        };
        if self.peek() == Some(b'"') {
            let name_pos = self.pos();
            op.name = self.string()?;
            if op.name.is_empty() {
                return Err(self.error_at(name_pos, "an empty operation name"));
            }
            self.op = op.name.clone();
            self.generic_rest(&mut op)?;
        } else {
            let name = self.expect_ident("an operation")?;
            op.name = match name {
                "return" => "func.return".into(),
                "call" => "func.call".into(),
                "module" => "builtin.module".into(),
                _ => name.to_string(),
            };
            self.op = op.name.clone();
            // Forms with regions are dispatched here, not through `pretty`'s large frame,
            // so that nesting costs little stack.
            match op.name.as_str() {
                "builtin.module" => self.module_rest(&mut op)?,
                "func.func" => self.func_rest(&mut op)?,
                "stablehlo.reduce" => self.reduce_rest(&mut op)?,
                "stablehlo.while" => self.while_rest(&mut op)?,
                "sdy.manual_computation" => self.sdy_manual_rest(&mut op)?,
                _ => self.pretty(&mut op)?,
            }
        }
        if self.looking_at_word("loc") {
            op.loc = Some(self.loc()?);
        }
        crate::pretty::defaults(&mut op);
        self.finish(op, pos)
    }

    /// Sorts the attributes, refuses duplicates and counts that disagree with the types.
    fn finish(&self, mut op: Op, pos: Pos) -> Result<Op, ParseError> {
        op.attrs.sort_by(|a, b| a.0.cmp(&b.0));
        if let Some(w) = op.attrs.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(self.error_at(pos, format!("attribute `{}` given twice", w[0].0)));
        }
        if op.operands.len() != op.operand_types.len() {
            return Err(self.error_at(
                pos,
                format!(
                    "{} operands but {} operand types",
                    op.operands.len(),
                    op.operand_types.len()
                ),
            ));
        }
        if op.result_count() != op.result_types.len() {
            return Err(self.error_at(
                pos,
                format!(
                    "{} results but {} result types",
                    op.result_count(),
                    op.result_types.len()
                ),
            ));
        }
        Ok(op)
    }

    /// After the quoted name: `(operands) [successors] <{props}> ({regions}) {attrs} : fn-type`.
    fn generic_rest(&mut self, op: &mut Op) -> Result<(), ParseError> {
        self.expect(b'(')?;
        op.operands = self.value_uses_until(b')')?;
        if self.eat(b'[') {
            op.successors = self.list_until(b']', |c| match c.sigil_name(b'^')? {
                Some(s) => Ok(s),
                None => c.expected("a block successor"),
            })?;
        }
        if self.eat_str("<{") {
            // The properties dictionary: `<{` entries `}>`.
            if !self.eat_str("}>") {
                loop {
                    let k = self.key()?;
                    let v = if self.eat(b'=') {
                        self.attr()?
                    } else {
                        Attr::Unit
                    };
                    op.attrs.push((k, v));
                    if !self.eat(b',') {
                        break;
                    }
                }
                self.expect_str("}>")?;
            }
        }
        if self.eat(b'(') {
            op.regions = self.list_until(b')', Self::region)?;
        }
        if self.peek() == Some(b'{') {
            op.attrs.extend(self.dict()?);
        }
        self.expect(b':')?;
        match self.function_type()? {
            Type::Function { inputs, results } => {
                op.operand_types = inputs;
                op.result_types = results;
            }
            _ => return self.expected("a function type"),
        }
        Ok(())
    }

    /// A use: `%name` or `%name#index`.
    pub fn value_use(&mut self) -> Result<ValueRef, ParseError> {
        let Some(name) = self.sigil_name(b'%')? else {
            return self.expected("a value (`%name`)");
        };
        let index = if self.here() == Some(b'#') {
            self.eat(b'#');
            let p = self.pos();
            let n = self.unsigned()?;
            u32::try_from(n).map_err(|_| self.error_at(p, "result index out of range"))?
        } else {
            0
        };
        Ok(ValueRef { name, index })
    }

    /// Uses separated by commas up to (and including) `close`.
    pub fn value_uses_until(&mut self, close: u8) -> Result<Vec<ValueRef>, ParseError> {
        self.list_until(close, Self::value_use)
    }

    /// Uses separated by commas (at least one).
    pub fn value_uses(&mut self) -> Result<Vec<ValueRef>, ParseError> {
        let mut out = vec![self.value_use()?];
        while self.comma_then_value() {
            self.eat(b',');
            out.push(self.value_use()?);
        }
        Ok(out)
    }

    /// Whether `, %` follows (a further operand rather than a keyword).
    pub fn comma_then_value(&mut self) -> bool {
        let mut probe = self.clone();
        probe.eat(b',') && probe.peek() == Some(b'%')
    }

    /// `(%a: type loc(...), ...)`: block arguments.
    pub fn block_args(&mut self) -> Result<Vec<BlockArg>, ParseError> {
        self.bracketed(b'(', b')', |c| Ok(c.argument(false)?.0))
    }

    /// `%a: type [{attrs}] [loc(...)]`: a block's or (with `attrs`) a function's argument.
    pub fn argument(&mut self, attrs: bool) -> Result<(BlockArg, Vec<(String, Attr)>), ParseError> {
        let Some(name) = self.sigil_name(b'%')? else {
            return self.expected("an argument (`%name: type`)");
        };
        self.expect(b':')?;
        let ty = self.ty()?;
        let dict = if attrs && self.peek() == Some(b'{') {
            self.dict()?
        } else {
            vec![]
        };
        let loc = if self.looking_at_word("loc") {
            Some(self.loc()?)
        } else {
            None
        };
        Ok((BlockArg { name, ty, loc }, dict))
    }

    /// A region whose entry block's arguments the pretty form gave before it (a function's
    /// arguments, a loop's iteration arguments, a reducer's pairs); an empty region gets an
    /// empty entry block to hold them.
    pub fn region_with_args(&mut self, args: Vec<BlockArg>) -> Result<Region, ParseError> {
        let mut region = self.region()?;
        match region.blocks.first_mut() {
            Some(entry) => entry.args = args,
            None => region.blocks.push(Block {
                label: None,
                args,
                ops: vec![],
            }),
        }
        Ok(region)
    }

    /// `{ blocks }`; the entry block's label is dropped (nothing can branch to it).
    pub fn region(&mut self) -> Result<Region, ParseError> {
        self.enter()?;
        let r = self.region_inner();
        self.leave();
        r
    }

    fn region_inner(&mut self) -> Result<Region, ParseError> {
        self.expect(b'{')?;
        let mut blocks = Vec::new();
        loop {
            if self.eat(b'}') {
                break;
            }
            let mut block = Block {
                label: None,
                args: vec![],
                ops: vec![],
            };
            if let Some(label) = self.sigil_name(b'^')? {
                if self.peek() == Some(b'(') {
                    block.args = self.block_args()?;
                }
                self.expect(b':')?;
                if !blocks.is_empty() {
                    block.label = Some(label);
                }
            } else if !blocks.is_empty() {
                return self.expected("`^label` of a block");
            }
            while !matches!(self.peek(), Some(b'}') | Some(b'^') | None) {
                block.ops.push(self.op()?);
            }
            if self.peek().is_none() {
                return self.expected("`}` closing a region");
            }
            blocks.push(block);
        }
        Ok(Region { blocks })
    }

    /// `{-# dialect_resources: { builtin: { name: "0x...", ... } } #-}`.
    fn resources(&mut self, out: &mut Vec<Resource>) -> Result<(), ParseError> {
        self.expect_str("{-#")?;
        loop {
            let section = self.key()?;
            self.expect(b':')?;
            self.expect(b'{')?;
            if !self.eat(b'}') {
                loop {
                    let _dialect = self.key()?;
                    self.expect(b':')?;
                    self.expect(b'{')?;
                    if !self.eat(b'}') {
                        loop {
                            let name = self.key()?;
                            self.expect(b':')?;
                            let pos = self.pos();
                            let blob = self.string()?;
                            if section == "dialect_resources" {
                                out.push(resource(self, pos, name, &blob)?);
                            }
                            if !self.eat(b',') {
                                break;
                            }
                        }
                        self.expect(b'}')?;
                    }
                    if !self.eat(b',') {
                        break;
                    }
                }
                self.expect(b'}')?;
            }
            if !self.eat(b',') {
                break;
            }
        }
        self.expect_str("#-}")
    }
}

fn resource(c: &Cursor<'_>, pos: Pos, name: String, blob: &str) -> Result<Resource, ParseError> {
    let bytes = blob.strip_prefix("0x").and_then(hex_bytes).ok_or_else(|| {
        c.error_at(
            pos,
            format!("resource `{name}` is not a `\"0x...\"` hex blob"),
        )
    })?;
    if bytes.len() < 4 {
        return Err(c.error_at(
            pos,
            format!("resource `{name}` lacks its 4 alignment bytes"),
        ));
    }
    let alignment = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    Ok(Resource {
        name,
        alignment,
        data: bytes[4..].to_vec(),
    })
}
