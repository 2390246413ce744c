//! Independent f64 references.
