//! Helpers: random inputs, poisoned outputs, comparisons at explicit tolerances.
