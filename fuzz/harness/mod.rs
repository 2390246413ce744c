//! The fuzzing harness shared by the stable fuzz tests (`proto/tests/fuzz.rs`,
//! `cli-tests/fuzz_host.rs`) and the cargo-fuzz targets (`fuzz/fuzz_targets/`): a seeded
//! generator, the mutators (bytes, protobuf wire fields, program fields, thunk order and
//! nesting, text, `.npy` headers), the seed corpus, the target bodies with the properties they
//! check, the resource bounds of executed programs, and the stable loop (panics caught, hangs
//! timed, failures minimized and reported with a replay command). Each user includes it with
//! `#[path]`; it is not a crate. See `docs/fuzzing.md`.

pub mod bounds;
pub mod bytes;
pub mod corpus;
pub mod fuzzers;
pub mod known;
pub mod npy;
pub mod order;
pub mod outcome;
pub mod pool;
pub mod program;
pub mod rng;
pub mod runner;
pub mod targets;
pub mod text;
pub mod wire;
