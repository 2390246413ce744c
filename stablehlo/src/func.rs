//! The pretty forms of the builtin and func dialects: `module @name attributes {...} {...}`,
//! `func.func public @f(%arg0: T {attrs} loc(...)) -> (T {attrs}) attributes {...} {...}`,
//! `return` / `func.return`, `call @f(%a) : (T) -> T` / `func.call`; the `sdy.mesh`,
//! `sdy.sharding_constraint` (and `sdy.reshard`) and `sdy.manual_computation` forms Shardy
//! prints inside JAX modules; and a block's `return`.

use crate::ast::{Attr, BlockArg, Op, Type};
use crate::cursor::Cursor;
use crate::error::ParseError;

impl<'a> Cursor<'a> {
    /// After `module`: `[@name] [attributes {dict}] { ops }`.
    pub fn module_rest(&mut self, op: &mut Op) -> Result<(), ParseError> {
        if let Some(name) = self.sigil_name(b'@')? {
            op.attrs.push(("sym_name".into(), Attr::Str(name)));
        }
        if self.eat_word("attributes") {
            op.attrs.extend(self.dict()?);
        }
        op.regions.push(self.region()?);
        Ok(())
    }

    /// After `func.func`: visibility, name, arguments, results, attributes, body.
    pub fn func_rest(&mut self, op: &mut Op) -> Result<(), ParseError> {
        for vis in ["public", "private", "nested"] {
            if self.eat_word(vis) {
                op.attrs
                    .push(("sym_visibility".into(), Attr::Str(vis.into())));
                break;
            }
        }
        let Some(name) = self.sigil_name(b'@')? else {
            return self.expected("a function name (`@name`)");
        };
        op.attrs.push(("sym_name".into(), Attr::Str(name)));
        let (args, arg_attrs): (Vec<BlockArg>, Vec<_>) = self
            .bracketed(b'(', b')', |c| c.argument(true))?
            .into_iter()
            .unzip();
        let (mut results, mut res_attrs) = (Vec::new(), Vec::new());
        if self.eat_str("->") {
            if self.peek() == Some(b'(') {
                (results, res_attrs) = self
                    .bracketed(b'(', b')', |c| {
                        let ty = c.ty()?;
                        let dict = if c.peek() == Some(b'{') {
                            c.dict()?
                        } else {
                            vec![]
                        };
                        Ok((ty, dict))
                    })?
                    .into_iter()
                    .unzip();
            } else {
                results.push(self.ty()?);
                res_attrs.push(vec![]);
            }
        }
        if self.eat_word("attributes") {
            op.attrs.extend(self.dict()?);
        }
        let inputs = args.iter().map(|a| a.ty.clone()).collect();
        op.attrs.push((
            "function_type".into(),
            Attr::Type(Type::Function { inputs, results }),
        ));
        for (key, list) in [("arg_attrs", arg_attrs), ("res_attrs", res_attrs)] {
            if list.iter().any(|d| !d.is_empty()) {
                let dicts = list.into_iter().map(Attr::Dict).collect();
                op.attrs.push((key.into(), Attr::Array(dicts)));
            }
        }
        if self.peek() == Some(b'{') {
            op.regions.push(self.region_with_args(args)?);
        }
        Ok(())
    }

    /// After `return` (any dialect's): `[%a, %b : T, T]`.
    pub fn return_rest(&mut self, op: &mut Op) -> Result<(), ParseError> {
        if self.peek() == Some(b'%') {
            op.operands = self.value_uses()?;
            self.expect(b':')?;
            op.operand_types = self.type_list()?;
        }
        Ok(())
    }

    /// After `call`: `@f(%a, %b) [{attrs}] : (T, T) -> T`.
    pub fn call_rest(&mut self, op: &mut Op) -> Result<(), ParseError> {
        let Some(callee) = self.sigil_name(b'@')? else {
            return self.expected("a callee (`@name`)");
        };
        op.attrs.push(("callee".into(), Attr::Symbol(vec![callee])));
        self.expect(b'(')?;
        op.operands = self.value_uses_until(b')')?;
        if self.peek() == Some(b'{') {
            op.attrs.extend(self.dict()?);
        }
        self.expect(b':')?;
        self.fn_types(op)
    }

    /// `: (T, T) -> T` into the op's operand and result types.
    pub fn fn_types(&mut self, op: &mut Op) -> Result<(), ParseError> {
        match self.function_type()? {
            Type::Function { inputs, results } => {
                op.operand_types = inputs;
                op.result_types = results;
                Ok(())
            }
            _ => self.expected("a function type"),
        }
    }

    /// After `sdy.mesh`: `@name = <axes> [{attrs}]`.
    pub fn sdy_mesh_rest(&mut self, op: &mut Op) -> Result<(), ParseError> {
        let Some(name) = self.sigil_name(b'@')? else {
            return self.expected("a mesh name (`@name`)");
        };
        op.attrs.push(("sym_name".into(), Attr::Str(name)));
        self.expect(b'=')?;
        if self.peek() != Some(b'<') {
            return self.expected("`<` opening a mesh");
        }
        let body = self.balanced()?;
        op.attrs
            .push(("mesh".into(), Attr::Opaque(format!("#sdy.mesh{body}"))));
        if self.peek() == Some(b'{') {
            op.attrs.extend(self.dict()?);
        }
        Ok(())
    }

    /// After `sdy.sharding_constraint` or `sdy.reshard`: `%x <@mesh, [...]> [{attrs}] : T`.
    pub fn sdy_sharding_rest(&mut self, op: &mut Op) -> Result<(), ParseError> {
        op.operands = vec![self.value_use()?];
        if self.peek() != Some(b'<') {
            return self.expected("`<` opening a sharding");
        }
        let body = self.balanced()?;
        op.attrs.push((
            "sharding".into(),
            Attr::Opaque(format!("#sdy.sharding{body}")),
        ));
        if self.peek() == Some(b'{') {
            op.attrs.extend(self.dict()?);
        }
        self.same_or_fn(op)
    }

    /// After `sdy.manual_computation`: `(%a) in_shardings=[...] out_shardings=[...]
    /// manual_axes={...} (%arg: T) { body } : (T) -> T`.
    pub fn sdy_manual_rest(&mut self, op: &mut Op) -> Result<(), ParseError> {
        self.expect(b'(')?;
        op.operands = self.value_uses_until(b')')?;
        for (word, key) in [
            ("in_shardings", "in_shardings"),
            ("out_shardings", "out_shardings"),
        ] {
            self.expect_word(word)?;
            self.expect(b'=')?;
            if self.peek() != Some(b'[') {
                return self.expected("`[` opening shardings");
            }
            let body = self.balanced()?;
            op.attrs.push((
                key.into(),
                Attr::Opaque(format!("#sdy.sharding_per_value<{body}>")),
            ));
        }
        self.expect_word("manual_axes")?;
        self.expect(b'=')?;
        if self.peek() != Some(b'{') {
            return self.expected("`{` opening manual axes");
        }
        let body = self.balanced()?;
        op.attrs.push((
            "manual_axes".into(),
            Attr::Opaque(format!("#sdy<manual_axes{body}>")),
        ));
        let args = self.block_args()?;
        op.regions.push(self.region_with_args(args)?);
        if self.peek() == Some(b'{') {
            op.attrs.extend(self.dict()?);
        }
        self.expect(b':')?;
        self.fn_types(op)
    }
}
