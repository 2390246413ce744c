//! The checks.

use crate::Check;

/// Every check, grouped by area.
pub fn all() -> Vec<Check> {
    vec![]
}
