//! Paths naming a thunk inside nested sequences, used in every error.

use std::fmt;

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
