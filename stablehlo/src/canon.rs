//! Canonical value names: every SSA value renamed `v0`, `v1`, ... in definition order, result
//! groups merged (`%a, %b = ...` and `%0:2 = ...` both become `%vN:2`, uses `%vN#i`), so the
//! pretty and generic texts of one program give equal trees.

use crate::ast::{Block, Module, Op, Region, ResultGroup, ValueRef};
use std::collections::HashMap;

struct Renamer {
    scopes: Vec<HashMap<String, (String, u32)>>,
    next: u64,
}

impl Renamer {
    fn lookup(&self, v: &ValueRef) -> ValueRef {
        for scope in self.scopes.iter().rev() {
            if let Some((name, offset)) = scope.get(&v.name) {
                return ValueRef {
                    name: name.clone(),
                    index: offset.saturating_add(v.index),
                };
            }
        }
        v.clone()
    }

    fn fresh(&mut self) -> String {
        let n = format!("v{}", self.next);
        self.next += 1;
        n
    }

    fn define(&mut self, old: &str, new: &str, offset: u32) {
        if let Some(s) = self.scopes.last_mut() {
            s.insert(old.to_string(), (new.to_string(), offset));
        }
    }

    fn op(&mut self, op: &mut Op) {
        for v in &mut op.operands {
            *v = self.lookup(v);
        }
        if !op.results.is_empty() {
            let name = self.fresh();
            let mut offset = 0u32;
            for g in &op.results {
                self.define(&g.name, &name, offset);
                offset = offset.saturating_add(g.count);
            }
            op.results = vec![ResultGroup {
                name,
                count: offset,
            }];
        }
        for r in &mut op.regions {
            self.region(r);
        }
    }

    fn region(&mut self, r: &mut Region) {
        self.scopes.push(HashMap::new());
        for b in &mut r.blocks {
            self.block(b);
        }
        self.scopes.pop();
    }

    fn block(&mut self, b: &mut Block) {
        for a in &mut b.args {
            let n = self.fresh();
            self.define(&a.name, &n, 0);
            a.name = n;
        }
        for op in &mut b.ops {
            self.op(op);
        }
    }
}

/// The module with canonical value names.
pub fn canonical(m: &Module) -> Module {
    let mut m = m.clone();
    let mut r = Renamer {
        scopes: vec![HashMap::new()],
        next: 0,
    };
    r.op(&mut m.op);
    m
}

fn strip_op(op: &mut Op) {
    op.loc = None;
    for r in &mut op.regions {
        for b in &mut r.blocks {
            for a in &mut b.args {
                a.loc = None;
            }
            b.ops.iter_mut().for_each(strip_op);
        }
    }
}

/// The module without locations (operations', block arguments' and the alias table).
pub fn without_locations(m: &Module) -> Module {
    let mut m = m.clone();
    strip_op(&mut m.op);
    m.loc_aliases.clear();
    m
}
