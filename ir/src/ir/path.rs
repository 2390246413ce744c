//! Paths naming a thunk inside nested sequences, used in every error, and the names of the
//! nested thunk lists they step through ([`ListName`]).

use std::fmt;

/// The name of a nested thunk list in paths: `body`, `cond`, `thunks`, or `branches[i]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListName {
    pub field: &'static str,
    pub index: Option<usize>,
}

impl ListName {
    /// A list named by a field alone (`body`, `cond`, `thunks`).
    pub const fn field(field: &'static str) -> Self {
        ListName { field, index: None }
    }
}

/// One step of a [`ThunkPath`]: the field holding a list of thunks and the index in it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PathSegment {
    pub field: &'static str,
    pub index: usize,
}

/// Location of a thunk in an executable, e.g. `entry[3].thunks[1]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ThunkPath(pub Vec<PathSegment>);

impl ThunkPath {
    /// The path of the `index`-th thunk of the entry sequence.
    pub fn entry(index: usize) -> Self {
        ThunkPath(vec![PathSegment {
            field: "entry",
            index,
        }])
    }

    /// The path of a child thunk in the list `field` of this thunk.
    pub fn child(&self, field: &'static str, index: usize) -> Self {
        let mut v = self.0.clone();
        v.push(PathSegment { field, index });
        ThunkPath(v)
    }

    /// The path of the `index`-th thunk of a nested list (see [`crate::ir::Thunk::nested`]),
    /// e.g. `entry[2].body[0]` or `entry[2].branches[1].thunks[0]`.
    pub fn in_list(&self, list: &ListName, index: usize) -> Self {
        match list.index {
            None => self.child(list.field, index),
            Some(b) => self.child(list.field, b).child("thunks", index),
        }
    }

    /// True for the empty path (the executable itself).
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for ThunkPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("<executable>");
        }
        for (i, s) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            write!(f, "{}[{}]", s.field, s.index)?;
        }
        Ok(())
    }
}
