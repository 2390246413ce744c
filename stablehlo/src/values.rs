//! SSA value checks after reading: every use names a value defined before it in its block or
//! an enclosing region (functions and modules see nothing from outside, as MLIR isolates
//! them), with a result index below the defining group's count; no name is defined twice in
//! one scope. A failure names the using (or redefining) operation and its position.

use crate::ast::{Block, Module, Op, Pos, Region};
use crate::error::{ParseError, one_line};
use std::collections::HashMap;

/// Ops whose regions see no value from outside (MLIR's `IsolatedFromAbove`).
fn isolated(op: &Op) -> bool {
    matches!(op.name.as_str(), "builtin.module" | "func.func")
}

struct Scopes {
    /// Each scope: name → how many results its group has; `None` marks an isolated boundary.
    stack: Vec<Option<HashMap<String, u32>>>,
}

fn err(op: &Op, pos: Pos, message: String) -> ParseError {
    ParseError::Syntax {
        pos,
        op: one_line(&op.name),
        message: one_line(&message),
    }
}

impl Scopes {
    fn lookup(&self, name: &str) -> Option<u32> {
        for scope in self.stack.iter().rev() {
            match scope {
                Some(s) => {
                    if let Some(n) = s.get(name) {
                        return Some(*n);
                    }
                }
                None => return None,
            }
        }
        None
    }

    fn define(&mut self, op: &Op, name: &str, count: u32) -> Result<(), ParseError> {
        if let Some(Some(scope)) = self.stack.last_mut()
            && scope.insert(name.to_string(), count).is_some()
        {
            return Err(err(op, op.pos, format!("value `%{name}` defined twice")));
        }
        Ok(())
    }

    fn op(&mut self, op: &Op) -> Result<(), ParseError> {
        for v in &op.operands {
            match self.lookup(&v.name) {
                None => {
                    return Err(err(
                        op,
                        op.pos,
                        format!("use of undefined value `%{}`", v.name),
                    ));
                }
                Some(count) if v.index >= count => {
                    return Err(err(
                        op,
                        op.pos,
                        format!(
                            "`%{}#{}` but `%{}` has {count} result(s)",
                            v.name, v.index, v.name
                        ),
                    ));
                }
                Some(_) => {}
            }
        }
        if isolated(op) {
            self.stack.push(None);
        }
        for r in &op.regions {
            self.region(op, r)?;
        }
        if isolated(op) {
            self.stack.pop();
        }
        for g in &op.results {
            self.define(op, &g.name, g.count)?;
        }
        Ok(())
    }

    fn region(&mut self, owner: &Op, r: &Region) -> Result<(), ParseError> {
        self.stack.push(Some(HashMap::new()));
        let result = r.blocks.iter().try_for_each(|b| self.block(owner, b));
        self.stack.pop();
        result
    }

    fn block(&mut self, owner: &Op, b: &Block) -> Result<(), ParseError> {
        for a in &b.args {
            self.define(owner, &a.name, 1)?;
        }
        b.ops.iter().try_for_each(|op| self.op(op))
    }
}

/// Checks every value use and definition of the module.
pub fn check(m: &Module) -> Result<(), ParseError> {
    Scopes { stack: vec![] }.op(&m.op)
}
