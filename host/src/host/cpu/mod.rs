//! CPU execution of portable kernels: `ModuleImage::Source` modules (and the standard
//! library's portable source) compiled with the machine's C++ compiler behind a shim that
//! plays the GPU, and run on the host. Used by the host backend (source modules) and by the
//! driver emulator (the portable source an image carries).
//!
//! - [`build`]: the compiler, the translation unit (`prelude_cpu.h`, the portable unit, the
//!   runtime, the generated entry table), the compile through core's kernel cache;
//! - `error`: [`CpuError`];
//! - [`source`]: the kernels a unit defines and the `extern __shared__` rewrite;
//! - [`program`]: the loaded library, its entries and launches over a worker pool;
//! - `runtime.cpp`: the fiber scheduler (real `__syncthreads` and lane-synchronous warp
//!   operations, without one OS thread per GPU thread).
//!
//! Programs are loaded once per process and unit ([`load`]): every module of the same source
//! shares one library and one worker pool.

pub mod build;
mod error;
pub mod program;
pub mod source;

pub use error::CpuError;
pub use program::{Entry, Param, Program, Shape};

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

/// One lock per unit being compiled, by cache key.
type Gates = HashMap<[u8; 32], Arc<Mutex<()>>>;

/// Programs loaded in this process, by cache key (at most this many are kept).
const MAX_PROGRAMS: usize = 64;

/// The program of a complete portable unit (`portable::with_prelude(code)`,
/// `portable::standard_source()`), compiled (or taken from the disk cache) and loaded once
/// per process. `module` names it in errors.
pub fn load(module: &str, portable_unit: &str) -> Result<Arc<Program>, CpuError> {
    static LOADED: Mutex<Vec<([u8; 32], Arc<Program>)>> = parking_lot::const_mutex(Vec::new());
    static BUILDING: Mutex<Option<Gates>> = parking_lot::const_mutex(None);
    let cc = build::compiler()?;
    let (tu, _) = build::translation_unit(&cc, portable_unit);
    let key = *build::cache_key(&cc, &tu).as_bytes();
    if let Some((_, p)) = LOADED.lock().iter().find(|(k, _)| *k == key) {
        return Ok(p.clone());
    }
    // One compile per unit at a time: concurrent loads of the same source wait for it.
    let gate = BUILDING
        .lock()
        .get_or_insert_with(HashMap::new)
        .entry(key)
        .or_default()
        .clone();
    let _g = gate.lock();
    if let Some((_, p)) = LOADED.lock().iter().find(|(k, _)| *k == key) {
        return Ok(p.clone());
    }
    let built = build::build(module, &tu)?;
    let program = Arc::new(Program::load(&built.image, built.log)?);
    let mut loaded = LOADED.lock();
    if loaded.len() >= MAX_PROGRAMS {
        loaded.remove(0);
    }
    loaded.push((key, program.clone()));
    Ok(program)
}
