//! Conversion between the prost types and the core IR.
//!
//! [`from_proto`] checks everything the IR's types cannot express (missing oneofs and
//! messages, unspecified or unknown enums, out-of-range values), then runs
//! [`xthunk_core::verify`]. The thunk path of an error is built only when the error
//! happens, so converting a large program costs O(number of thunks).

mod fields;
mod from_proto;
mod thunk;
mod to_proto;

pub use from_proto::{from_proto, program_from_proto};
pub use to_proto::to_proto;
