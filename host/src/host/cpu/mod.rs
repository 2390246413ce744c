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
//! shares one library and one worker pool, and a second load of a unit already loaded runs
//! no compiler at all (not even the preprocessor that finds its kernels); [`load_counts`]
//! says what the loads of the calling thread did (compiles, disk-cache hits, process hits).

pub mod build;
mod error;
pub mod program;
pub mod source;

pub use error::CpuError;
pub use program::{Entry, Param, Program, Shape};

use crate::backend::kernel_cache::{CacheKey, KeyInputs};
use parking_lot::Mutex;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::Arc;

/// One lock per unit being compiled, by unit key.
type Gates = HashMap<[u8; 32], Arc<Mutex<()>>>;

/// Programs loaded in this process, by unit key (at most this many are kept).
const MAX_PROGRAMS: usize = 64;

/// What the [`load`] calls of one thread did, counted since the thread started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadCounts {
    /// Calls of [`load`].
    pub loads: u64,
    /// Loads answered by a program this process had loaded (no compiler run).
    pub process_hits: u64,
    /// Loads whose library came from the disk cache (the preprocessor ran, the compiler not).
    pub disk_hits: u64,
    /// Loads that ran the C++ compiler.
    pub compiles: u64,
}

thread_local! {
    static COUNTS: Cell<LoadCounts> = const { Cell::new(LoadCounts {
        loads: 0,
        process_hits: 0,
        disk_hits: 0,
        compiles: 0,
    }) };
}

/// What the [`load`] calls of the calling thread did so far.
pub fn load_counts() -> LoadCounts {
    COUNTS.with(Cell::get)
}

fn count(f: impl FnOnce(&mut LoadCounts)) {
    COUNTS.with(|c| {
        let mut v = c.get();
        f(&mut v);
        c.set(v);
    });
}

/// The in-process key of a portable unit: the unit and the compiler's identity (what
/// determines its translation unit, and so its library), without running the preprocessor.
fn unit_key(cc: &build::Compiler, portable_unit: &str) -> [u8; 32] {
    *CacheKey::new(&KeyInputs {
        backend: "cpu-unit",
        compiler: &cc.path.to_string_lossy(),
        compiler_version: &cc.version,
        target: std::env::consts::ARCH,
        kind: "portable unit",
        options: &[],
        source: portable_unit,
    })
    .as_bytes()
}

/// The program of a complete portable unit (`portable::with_prelude(code)`,
/// `portable::standard_source()`), compiled (or taken from the disk cache) and loaded once
/// per process. `module` names it in errors.
pub fn load(module: &str, portable_unit: &str) -> Result<Arc<Program>, CpuError> {
    static LOADED: Mutex<Vec<([u8; 32], Arc<Program>)>> = parking_lot::const_mutex(Vec::new());
    static BUILDING: Mutex<Option<Gates>> = parking_lot::const_mutex(None);
    count(|c| c.loads += 1);
    let cc = build::compiler()?;
    let key = unit_key(&cc, portable_unit);
    let loaded = |key: &[u8; 32]| {
        let hit = LOADED
            .lock()
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, p)| p.clone());
        if hit.is_some() {
            count(|c| c.process_hits += 1);
        }
        hit
    };
    if let Some(p) = loaded(&key) {
        return Ok(p);
    }
    // One compile per unit at a time: concurrent loads of the same source wait for it.
    let gate = BUILDING
        .lock()
        .get_or_insert_with(HashMap::new)
        .entry(key)
        .or_default()
        .clone();
    let _g = gate.lock();
    if let Some(p) = loaded(&key) {
        return Ok(p);
    }
    let (tu, _) = build::translation_unit(&cc, portable_unit);
    let built = build::build(module, &tu)?;
    count(|c| {
        if built.cached {
            c.disk_hits += 1;
        } else {
            c.compiles += 1;
        }
    });
    let program = Arc::new(Program::load(&built.image, built.log)?);
    let mut loaded = LOADED.lock();
    if loaded.len() >= MAX_PROGRAMS {
        loaded.remove(0);
    }
    loaded.push((key, program.clone()));
    Ok(program)
}

/// The host backend's portable unit of a source module (what [`load`] is given for it).
pub fn module_unit(module: &crate::ir::Module, code: &str) -> String {
    crate::kernels::portable::module_unit(&module.name, code, &module.options)
}

/// Removes `portable_unit`'s library from the disk cache of compiled kernels, if there;
/// returns whether an entry was there. For benchmarks and tests that compile salted units
/// (each one of a kind), so that they leave no entries behind.
pub fn forget_on_disk(portable_unit: &str) -> Result<bool, CpuError> {
    let cc = build::compiler()?;
    let (tu, _) = build::translation_unit(&cc, portable_unit);
    let key = build::cache_key(&cc, &tu);
    let Some(cache) = crate::backend::kernel_cache::KernelCache::default_location("cpu") else {
        return Ok(false);
    };
    let there = matches!(
        cache.get(&key),
        crate::backend::kernel_cache::Lookup::Hit(_)
    );
    cache.remove(&key);
    Ok(there)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A unit no cache holds: a kernel whose body carries a fresh random value.
    fn fresh_unit() -> (String, u64) {
        let salt: u64 = rand::random();
        let code = format!(
            "extern \"C\" __global__ void salted(unsigned long long* out) {{\n  \
             out[threadIdx.x] = {salt}ull + threadIdx.x;\n}}\n"
        );
        (crate::kernels::portable::with_prelude(&code), salt)
    }

    /// Whether the machine has a C++ compiler; without one the test is reported skipped,
    /// and fails when `XTHUNK_REQUIRE_CXX=1` (as CI sets).
    fn compiler_or_skip(test: &str) -> bool {
        match build::compiler() {
            Ok(_) => true,
            Err(e) => {
                assert!(
                    !std::env::var("XTHUNK_REQUIRE_CXX").is_ok_and(|v| v == "1"),
                    "{test}: XTHUNK_REQUIRE_CXX=1 but {e}"
                );
                eprintln!("{test}: skipped, no C++ compiler ({e})");
                false
            }
        }
    }

    /// Entry `name` of `p`, or an error listing the table.
    fn entry(p: &Program, name: &str) -> Result<Entry, CpuError> {
        p.entry(name).cloned().ok_or_else(|| {
            CpuError::Load(format!("no kernel {name} in the table: {:?}", p.entries()))
        })
    }

    /// `XT_FOR_EACH` runs each iteration exactly once whatever the launch's shape: a marked
    /// kernel (launched on a few one-thread blocks by `Program::launch`) and the same loop
    /// unmarked (run with every thread of the shape asked, all but each block's first
    /// without iterations), for lengths around the 16-element rounding of the runs.
    #[test]
    fn for_each_kernels_run_every_iteration_once_whatever_the_shape() -> Result<(), CpuError> {
        if !compiler_or_skip("for_each_kernels_run_every_iteration_once_whatever_the_shape") {
            return Ok(());
        }
        let code = "__global__ void each_count(unsigned int* o, long long n) {\n  \
                    XT_FOR_EACH(i, n) { o[i] += (unsigned int)i + 1u; }\n}\n\
                    XT_EACH_KERNEL(each_count)\n\
                    __global__ void plain_count(unsigned int* o, long long n) {\n  \
                    XT_FOR_EACH(i, n) { o[i] += (unsigned int)i + 1u; }\n}\n";
        let unit = crate::kernels::portable::with_prelude(code);
        let p = load("each_test", &unit)?;
        let (each, plain) = (entry(&p, "each_count")?, entry(&p, "plain_count")?);
        assert!(each.each, "XT_EACH_KERNEL marks the entry");
        assert!(!plain.each, "an unmarked kernel is launched as asked");
        for n in [1usize, 15, 16, 17, 255, 1000, 100_003] {
            for (grid, block) in [(1u32, 1u32), (3, 256), (391, 256), (65535, 32), (7, 1000)] {
                for entry in [&each, &plain] {
                    let mut o = vec![0u32; n];
                    let slots = [o.as_mut_ptr() as u64, n as u64];
                    let shape = Shape {
                        grid: [grid, 1, 1],
                        block: [block, 1, 1],
                        shared_bytes: 0,
                        warp_size: 32,
                    };
                    // SAFETY: `o` holds the n elements the kernel writes, and lives across
                    // the launch, which returns when every block has run.
                    unsafe { p.launch(entry, shape, &slots)? };
                    let wrong = (0..n).find(|&i| o[i] != i as u32 + 1);
                    assert_eq!(
                        wrong,
                        None,
                        "{} n={n} grid={grid} block={block}: element {:?} is {:?}",
                        entry.name,
                        wrong,
                        wrong.map(|i| o[i])
                    );
                }
            }
        }
        Ok(())
    }

    /// `XT_BLOCK_PHASE` / `XT_BLOCK_SYNC`: a block's tree sum written as phases gives the
    /// same values in the CPU's form (every thread's phase run by the block's first thread,
    /// no barrier) and in the GPUs' form (`XT_CPU_GPU_FORMS`: a thread each, `__syncthreads`
    /// between phases, as the emulator runs it), for several block sizes and grid shapes.
    /// Floats in an order-sensitive mix (1e8 and small values), so a different order of the
    /// additions shows.
    #[test]
    fn block_phases_give_the_gpu_forms_values() -> Result<(), CpuError> {
        if !compiler_or_skip("block_phases_give_the_gpu_forms_values") {
            return Ok(());
        }
        let code = "__global__ void tree(float* o, const float* x, long long rows, long long len) {\n\
                    __shared__ float sh[1024];\n\
                    for (long long r = xt_block_id(); r < rows; r += xt_num_blocks()) {\n\
                      XT_BLOCK_PHASE(t) {\n\
                        float acc = 0.0f;\n\
                        for (long long i = t; i < len; i += xt_block_threads()) acc += x[r * len + i];\n\
                        sh[t] = acc;\n\
                      }\n\
                      XT_BLOCK_SYNC();\n\
                      for (long long st = 1; st < xt_block_threads(); st *= 2) {\n\
                        XT_BLOCK_PHASE(t) {\n\
                          if (t % (2 * st) == 0 && t + st < xt_block_threads()) sh[t] += sh[t + st];\n\
                        }\n\
                        XT_BLOCK_SYNC();\n\
                      }\n\
                      XT_BLOCK_PHASE(t) { if (t == 0) o[r] = sh[0]; }\n\
                      XT_BLOCK_SYNC();\n\
                    }\n\
                    }\n";
        let cpu_unit = crate::kernels::portable::with_prelude(code);
        let gpu_unit = format!("#define XT_CPU_GPU_FORMS 1\n{cpu_unit}");
        let (rows, len) = (5usize, 3001usize);
        let x: Vec<f32> = (0..rows * len)
            .map(|i| match i % 7 {
                0 => 1e8,
                3 => -1e8,
                _ => (i % 13) as f32 * 0.37 + 0.01,
            })
            .collect();
        for (threads, grid) in [(256u32, 5u32), (96, 2), (1, 3), (1024, 1)] {
            let mut got = vec![];
            for unit in [&cpu_unit, &gpu_unit] {
                let p = load("phase_test", unit)?;
                let e = entry(&p, "tree")?;
                let mut o = vec![f32::NAN; rows];
                let slots = [
                    o.as_mut_ptr() as u64,
                    x.as_ptr() as u64,
                    rows as u64,
                    len as u64,
                ];
                let shape = Shape {
                    grid: [grid, 1, 1],
                    block: [threads, 1, 1],
                    shared_bytes: 0,
                    warp_size: 32,
                };
                // SAFETY: `o` holds `rows` floats and `x` rows * len; both outlive the launch.
                unsafe { p.launch(&e, shape, &slots)? };
                got.push(o);
            }
            assert!(got[0].iter().all(|v| v.is_finite()), "{:?}", got[0]);
            let bits = |v: &Vec<f32>| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&got[0]),
                bits(&got[1]),
                "{threads} threads, {grid} blocks"
            );
        }
        Ok(())
    }

    /// The runtime's table says which parameters are pointers, and their sizes, exactly: a
    /// kernel of six pointers and two ints (GCC 12.2 with AVX-512 once turned the ints into
    /// pointers in the table: build::options).
    #[test]
    fn the_table_gives_each_parameter_as_declared() -> Result<(), CpuError> {
        if !compiler_or_skip("the_table_gives_each_parameter_as_declared") {
            return Ok(());
        }
        let code = "__global__ void six_and_two(float* a, float* b, float* c, const float* d, \
                    const float* e, const float* f, int n, int m) {}\n\
                    __global__ void mixed(long long a, unsigned short* b, char c, float d, \
                    const double* e, const void* f) {}\n";
        let p = load("table_test", &crate::kernels::portable::with_prelude(code))?;
        let params = |name: &str| {
            p.entry(name).map(|e| {
                e.params
                    .iter()
                    .map(|q| (q.size, q.pointer, q.align))
                    .collect::<Vec<_>>()
            })
        };
        let f4 = (8, true, 4);
        assert_eq!(
            params("six_and_two"),
            Some(vec![f4, f4, f4, f4, f4, f4, (4, false, 1), (4, false, 1)])
        );
        assert_eq!(
            params("mixed"),
            Some(vec![
                (8, false, 1),
                (8, true, 2),
                (1, false, 1),
                (4, false, 1),
                (8, true, 8),
                (8, true, 1)
            ])
        );
        Ok(())
    }

    #[test]
    fn a_second_load_of_a_unit_runs_no_compiler() -> Result<(), CpuError> {
        if !compiler_or_skip("a_second_load_of_a_unit_runs_no_compiler") {
            return Ok(());
        }
        let (unit, _) = fresh_unit();
        let before = load_counts();
        let first = load("salted", &unit)?;
        let after_first = load_counts();
        assert_eq!(after_first.loads, before.loads + 1);
        // A fresh unit: the disk cache has no entry unless this very salt was drawn before.
        assert_eq!(
            after_first.compiles + after_first.disk_hits,
            before.compiles + before.disk_hits + 1,
            "{after_first:?}"
        );
        assert_eq!(after_first.process_hits, before.process_hits);
        let second = load("salted", &unit)?;
        let after_second = load_counts();
        assert!(Arc::ptr_eq(&first, &second));
        assert_eq!(after_second.loads, after_first.loads + 1);
        assert_eq!(after_second.process_hits, after_first.process_hits + 1);
        assert_eq!(after_second.compiles, after_first.compiles);
        assert_eq!(after_second.disk_hits, after_first.disk_hits);
        // Another unit is another program.
        let (other, _) = fresh_unit();
        let third = load("salted", &other)?;
        assert!(!Arc::ptr_eq(&first, &third));
        assert_eq!(load_counts().process_hits, after_second.process_hits);
        // The salted entries leave the disk cache (written where it is usable).
        for u in [&unit, &other] {
            let cached = forget_on_disk(u)?;
            assert!(!forget_on_disk(u)?, "removed");
            eprintln!("salted unit was in the disk cache: {cached}");
        }
        Ok(())
    }
}
