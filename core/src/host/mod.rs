//! Host backend.
