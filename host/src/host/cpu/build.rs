//! Compiling portable source for the CPU: finding the C++ compiler (`$CXX`, `c++`,
//! `clang++`, `g++`), assembling the translation unit (CPU prelude, the portable unit, the
//! runtime, the generated entry table) and compiling it to a shared library, through core's
//! kernel cache (`kernels/cpu`), keyed by the whole unit, the options and the compiler's
//! identity.

use super::error::CpuError;
use super::source::scan;
use crate::backend::kernel_cache::{CacheKey, KernelCache, KeyInputs, Lookup};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The CPU prelude (GPU built-ins on the host compiler), prepended to the portable unit.
pub const CPU_PRELUDE: &str = include_str!("prelude_cpu.h");
/// The fiber scheduler and the C interface, appended after the portable unit.
pub const RUNTIME: &str = include_str!("runtime.cpp");

/// The options every CPU image is compiled with: optimized with the vectorizer's full cost
/// model (`-O3`: the generated kernels' `XT_FOR_EACH` loops vectorize; `-O2` left the CNN
/// forward step 1.4x slower and saved a third of the compile time), contraction off (the
/// host implementations' evaluation order), position independent, only the interface
/// exported, kernels inlinable into the runtime's thread loop (no semantic interposition),
/// and floating-point operations taken not to trap (`-fno-trapping-math`: no kernel enables
/// traps or reads the exception flags, so results are unchanged, and comparisons and
/// selects may then be made branch-free, without which no loop holding a `?:` on floats
/// vectorizes). [`options`] adds the machine's own instruction set.
pub const OPTIONS: [&str; 11] = [
    "-std=c++17",
    "-O3",
    "-fno-trapping-math",
    "-fPIC",
    "-fno-semantic-interposition",
    "-shared",
    "-fvisibility=hidden",
    "-ffp-contract=off",
    "-fno-exceptions",
    "-fno-rtti",
    "-pthread",
];

/// [`OPTIONS`], and `-march=native` on x86-64 and AArch64 (the vector width and instructions
/// of the CPU the image runs on: images are compiled where they run, and the cache key holds
/// the CPU's identity, [`host_cpu`]), unless `XTHUNK_CPU_NATIVE=0`. On x86-64 without
/// AVX-512 (`-mno-avx512f`): Debian 12's GCC 12.2 miscompiles with it — the runtime's
/// parameter table of a kernel `(float*, …, int, int)` came out with every parameter a
/// pointer (a vector store of the constant {4,4,4,4,4,4,0,0} emitted as a broadcast of 4;
/// `-O2 -march=native` and `-O3 -mavx512f` alike, `-mno-avx512f` correct), caught by the
/// conformance suite's CUDA-style layernorm. AVX2 keeps the 256-bit vectors.
pub fn options() -> Vec<&'static str> {
    let mut o = OPTIONS.to_vec();
    if native() {
        o.insert(2, "-march=native");
        if cfg!(target_arch = "x86_64") {
            o.insert(3, "-mno-avx512f");
        }
    }
    o
}

/// Whether images are compiled for the machine's CPU: read once per process, so that every
/// cache key and compile of the process agree.
fn native() -> bool {
    static NATIVE: OnceLock<bool> = OnceLock::new();
    *NATIVE.get_or_init(|| {
        let wanted = !matches!(
            std::env::var("XTHUNK_CPU_NATIVE")
                .ok()
                .as_deref()
                .map(str::trim),
            Some("0" | "off" | "no" | "false")
        );
        wanted && cfg!(any(target_arch = "x86_64", target_arch = "aarch64"))
    })
}

/// The CPU's identity for the cache key: its model and feature flags from `/proc/cpuinfo`
/// (the first processor's), or `unknown` where that cannot be read; read once per process.
pub fn host_cpu() -> &'static str {
    static CPU: OnceLock<String> = OnceLock::new();
    CPU.get_or_init(|| {
        let Ok(text) = std::fs::read_to_string("/proc/cpuinfo") else {
            return "unknown".into();
        };
        let mut model = None;
        let mut flags = None;
        for line in text.lines().take_while(|l| !l.trim().is_empty()) {
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            match k.trim() {
                "model name" | "CPU part" => model = model.or(Some(v.trim().to_string())),
                "flags" | "Features" => flags = flags.or(Some(v.trim().to_string())),
                _ => {}
            }
        }
        match (model, flags) {
            (None, None) => "unknown".into(),
            (m, f) => format!("{} [{}]", m.unwrap_or_default(), f.unwrap_or_default()),
        }
    })
}

/// A C++ compiler and its identity (its `--version` text).
#[derive(Clone, Debug)]
pub struct Compiler {
    pub path: PathBuf,
    pub version: String,
}

fn on_path(name: &str) -> Option<PathBuf> {
    let p = Path::new(name);
    if p.components().count() > 1 {
        return p.is_file().then(|| p.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|c| c.is_file())
}

/// The machine's C++ compiler: `$CXX` when set, else the first of `c++`, `clang++`, `g++`
/// on `PATH` that answers `--version`. Found once per process.
pub fn compiler() -> Result<Compiler, CpuError> {
    static FOUND: OnceLock<Result<Compiler, String>> = OnceLock::new();
    FOUND
        .get_or_init(find_compiler)
        .clone()
        .map_err(|reason| CpuError::Unavailable { reason })
}

fn find_compiler() -> Result<Compiler, String> {
    let candidates: Vec<String> = match std::env::var("CXX") {
        Ok(c) if !c.trim().is_empty() => vec![c.trim().to_string()],
        _ => ["c++", "clang++", "g++"].map(String::from).to_vec(),
    };
    let mut tried = vec![];
    for c in &candidates {
        let Some(path) = on_path(c) else {
            tried.push(format!("`{c}`: not found"));
            continue;
        };
        match Command::new(&path).arg("--version").output() {
            Ok(out) if out.status.success() => {
                return Ok(Compiler {
                    path,
                    version: String::from_utf8_lossy(&out.stdout).trim().to_string(),
                });
            }
            Ok(out) => tried.push(format!(
                "`{}`: --version exited with {}",
                path.display(),
                out.status
            )),
            Err(e) => tried.push(format!("`{}`: {e}", path.display())),
        }
    }
    Err(format!(
        "no C++ compiler for the CPU execution of portable kernels (set $CXX; tried {})",
        tried.join("; ")
    ))
}

/// The kernels the code defines once preprocessed as the CPU compiles it (so a kernel inside
/// `#if defined(XT_CUDA)` is not one), by `cc -E` with `XT_CPU_SCAN`; the plain scan of
/// `text` when the preprocessor fails (the compile then reports why).
fn kernels_after_preprocessing(cc: &Compiler, text: &str) -> Vec<String> {
    use std::io::Write as _;
    let run = || -> Option<String> {
        let mut child = Command::new(&cc.path)
            .args(["-std=c++17", "-E", "-P", "-DXT_CPU_SCAN", "-x", "c++", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .ok()?;
        let mut stdin = child.stdin.take()?;
        let input = format!("{CPU_PRELUDE}\n{text}");
        // Written from another thread: the preprocessor's output could fill the pipe first.
        let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
        let out = child.wait_with_output().ok()?;
        writer.join().ok()?.ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    };
    match run() {
        Some(pre) => scan(&pre).kernels,
        None => scan(text).kernels,
    }
}

/// The translation unit compiled for `portable_unit` (a complete portable unit: prelude.cuh
/// and kernels, as `portable::with_prelude` gives), and the kernels its table holds.
pub fn translation_unit(cc: &Compiler, portable_unit: &str) -> (String, Vec<String>) {
    let mut scanned = scan(portable_unit);
    scanned.kernels = kernels_after_preprocessing(cc, &scanned.text);
    let mut tu =
        String::with_capacity(CPU_PRELUDE.len() + scanned.text.len() + RUNTIME.len() + 4096);
    tu.push_str(CPU_PRELUDE);
    tu.push_str("\n#line 1 \"portable source\"\n");
    tu.push_str(&scanned.text);
    tu.push_str("\n#line 1 \"xthunk cpu runtime\"\n");
    tu.push_str(RUNTIME);
    tu.push_str("\n// ---- entry table (generated) ----\n");
    tu.push_str("extern \"C\" const xt_cpu_entry xt_cpu_entries[] = {\n");
    for k in &scanned.kernels {
        tu.push_str(&format!("  XT_CPU_ENTRY(\"{k}\", &{k}),\n"));
    }
    if scanned.kernels.is_empty() {
        tu.push_str("  {nullptr, nullptr, nullptr, nullptr, 0},\n");
    }
    tu.push_str("};\n");
    tu.push_str(&format!(
        "extern \"C\" const unsigned int xt_cpu_entry_count = {};\n",
        scanned.kernels.len()
    ));
    (tu, scanned.kernels)
}

/// A compiled image: the shared library's bytes, and the compiler's diagnostics (empty on a
/// cache hit).
pub struct Built {
    pub image: Vec<u8>,
    pub key: CacheKey,
    pub log: String,
    pub cached: bool,
}

/// The cache key of `tu` compiled by `cc` with [`options`] (and the CPU, with `-march=native`).
pub fn cache_key(cc: &Compiler, tu: &str) -> CacheKey {
    let options: Vec<String> = options().iter().map(|s| s.to_string()).collect();
    let target = if native() {
        format!("{} {}", std::env::consts::ARCH, host_cpu())
    } else {
        std::env::consts::ARCH.to_string()
    };
    CacheKey::new(&KeyInputs {
        backend: "cpu",
        compiler: &cc.path.to_string_lossy(),
        compiler_version: &cc.version,
        target: &target,
        kind: "so",
        options: &options,
        source: tu,
    })
}

/// Compiles `tu` (from [`translation_unit`]) through the cache. `module` names it in errors.
pub fn build(module: &str, tu: &str) -> Result<Built, CpuError> {
    let cc = compiler()?;
    let key = cache_key(&cc, tu);
    let cache = KernelCache::default_location("cpu");
    if let Some(c) = &cache
        && let Lookup::Hit(image) = c.get(&key)
    {
        return Ok(Built {
            image,
            key,
            log: String::new(),
            cached: true,
        });
    }
    let dir = tempfile::Builder::new()
        .prefix("xthunk-cpu-build-")
        .tempdir()
        .map_err(|e| CpuError::Io(format!("cannot make a build folder: {e}")))?;
    let src = dir.path().join("module.cpp");
    let so = dir.path().join("module.so");
    std::fs::write(&src, tu).map_err(|e| CpuError::Io(format!("cannot write the source: {e}")))?;
    let out = Command::new(&cc.path)
        .args(options())
        .arg("-o")
        .arg(&so)
        .arg(&src)
        .output()
        .map_err(|e| CpuError::Unavailable {
            reason: format!("cannot run `{}`: {e}", cc.path.display()),
        })?;
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return Err(CpuError::Compile {
            module: module.to_string(),
            compiler: cc.path.display().to_string(),
            log,
        });
    }
    if !log.trim().is_empty() {
        tracing::info!(module, "C++ compiler warnings for the CPU:\n{log}");
    }
    let image =
        std::fs::read(&so).map_err(|e| CpuError::Io(format!("cannot read the library: {e}")))?;
    if let Some(c) = &cache
        && let Err(e) = c.put(&key, &image)
    {
        tracing::debug!("the CPU kernel cache was not written: {e}");
    }
    Ok(Built {
        image,
        key,
        log,
        cached: false,
    })
}
