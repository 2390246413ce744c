//! The xthunk program format: the protobuf schema (`xthunk.proto`, package `xthunk.v1`), its
//! binary (`.pb`) and text (`.txtpb`) encodings, and the conversion to and from the core IR.
//!
//! Loading a program ([`from_proto`], [`decode`], [`parse_text`], [`load_file`]) converts it
//! and validates it completely: every error is a [`ProtoError`] naming the thunk (by its
//! [`ThunkPath`], e.g. `entry[3].thunks[1]`) and the field.
//!
//! ```
//! use xthunk_core::ir::{ABI_VERSION, Executable, Signature};
//! let exe = Executable {
//!     abi_version: ABI_VERSION,
//!     name: "empty".into(),
//!     allocations: vec![],
//!     modules: vec![],
//!     entry: vec![],
//!     signature: Signature::default(),
//!     aliases: vec![],
//! };
//! let text = xthunk_proto::to_text(&exe);
//! assert_eq!(xthunk_proto::parse_text(&text).unwrap(), exe);
//! let bytes = xthunk_proto::encode(&exe);
//! assert_eq!(xthunk_proto::decode(&bytes).unwrap(), exe);
//! ```

mod convert;
mod error;
mod file;
mod text;

use prost::Message;
use prost_reflect::{DescriptorPool, MessageDescriptor};
use std::sync::OnceLock;
use xthunk_core::ir::Executable;

pub use convert::{from_proto, program_from_proto, to_proto};
pub use error::ProtoError;
pub use file::{Format, load_file, load_program, save_file};
pub use text::{parse_program, parse_text, to_text};

/// The Rust types generated from `xthunk.proto` (package `xthunk.v1`).
#[allow(
    missing_docs,
    clippy::all,
    clippy::pedantic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]
pub mod pb {
    include!(concat!(env!("OUT_DIR"), "/xthunk.v1.rs"));
}

/// The schema source, as shipped (for tools that want to show or save it).
pub const SCHEMA: &str = include_str!("../xthunk.proto");

/// Full name of the top-level message of a program file.
pub const EXECUTABLE_MESSAGE: &str = "xthunk.v1.Executable";

static DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/xthunk_descriptor.bin"));

/// The descriptors of `xthunk.proto`, for reflection (text format, generic tools).
pub fn descriptor_pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        // The descriptor set is produced from `xthunk.proto` by build.rs and embedded in this
        // binary; it does not depend on any input. A failure here is a build defect, caught by
        // this crate's tests.
        #[allow(clippy::expect_used)]
        DescriptorPool::decode(DESCRIPTOR_SET).expect("embedded xthunk descriptor set is valid")
    })
}

/// The descriptor of `xthunk.v1.Executable`.
pub(crate) fn executable_descriptor() -> MessageDescriptor {
    #[allow(clippy::expect_used)]
    descriptor_pool()
        .get_message_by_name(EXECUTABLE_MESSAGE)
        .expect("xthunk.v1.Executable is in the embedded descriptor set")
}

/// Decodes a binary (`.pb`) program, converts and validates it.
pub fn decode(bytes: &[u8]) -> Result<Executable, ProtoError> {
    from_proto(&decode_message(bytes)?)
}

/// [`decode`] as a [`Program`](xthunk_core::Program), what the executor loads
/// (verified once, here).
pub fn decode_program(bytes: &[u8]) -> Result<xthunk_core::Program, ProtoError> {
    program_from_proto(&decode_message(bytes)?)
}

/// The message of a binary (`.pb`) program.
fn decode_message(bytes: &[u8]) -> Result<pb::Executable, ProtoError> {
    if bytes.is_empty() {
        return Err(ProtoError::Empty { what: "0 bytes" });
    }
    pb::Executable::decode(bytes).map_err(|source| ProtoError::Decode { source })
}

/// Encodes a program in the binary (`.pb`) format. Does not validate.
pub fn encode(exe: &Executable) -> Vec<u8> {
    to_proto(exe).encode_to_vec()
}
