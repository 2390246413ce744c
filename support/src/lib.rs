//! xthunk's leaf helpers, used across the crates: stable hashing (`hash`) and atomic file
//! writes (`files`).

pub mod files;
pub mod hash;
