//! Compiling portable source with NVRTC, with a disk cache.
//!
//! A compilation targets `sm_XX` (a cubin, what the driver loads directly) or `compute_XX`
//! (PTX, compiled by the driver's JIT at load). For a device whose architecture this NVRTC
//! does not know, [`Compiler::compile_for_device`] falls back to PTX for the newest
//! architecture NVRTC supports below it.
//!
//! Options: `--gpu-architecture=<target>` and `--fmad=false` (no contraction into fused
//! multiply-adds, so results follow the host reference's evaluation order).
//!
//! **Disk cache**: `$XDG_CACHE_HOME/xthunk/kernels/cuda/` (default `~/.cache/xthunk/...`), one
//! file per (source hash, target, NVRTC version, options, portable source version). An entry
//! is a small header (magic, format version, the full key, payload kind, length and FNV-1a
//! checksum) followed by the image. Entries are written to a temporary file and renamed into
//! place (atomic on POSIX), so readers never see half an entry; an entry whose key, length or
//! checksum does not match is reported as corrupt, recompiled and replaced. Failing to write
//! the cache only logs a warning.

use crate::nvrtc::{Compiled, Nvrtc, Output};
use crate::result::BACKEND;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use xthunk_core::Error;
use xthunk_core::kernels::portable::{PORTABLE_SOURCE_VERSION, source_hash};

/// What to compile for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// `sm_XX`: a cubin for exactly that architecture.
    Sm(u32),
    /// `compute_XX`: PTX for the driver's JIT, loadable on that architecture and newer.
    Compute(u32),
}

impl Target {
    /// Parses `sm_90`, `sm_90a`-style names are not accepted (`a` features are not portable);
    /// `compute_80`.
    pub fn parse(s: &str) -> Result<Target, Error> {
        let bad = || {
            Error::InvalidArgument(format!(
                "CUDA target `{s}`: expected sm_XX (a cubin) or compute_XX (PTX), e.g. sm_90"
            ))
        };
        let (kind, num) = if let Some(n) = s.strip_prefix("sm_") {
            (true, n)
        } else if let Some(n) = s.strip_prefix("compute_") {
            (false, n)
        } else {
            return Err(bad());
        };
        let n: u32 = num.parse().map_err(|_| bad())?;
        if !(10..=255).contains(&n) {
            return Err(bad());
        }
        Ok(if kind {
            Target::Sm(n)
        } else {
            Target::Compute(n)
        })
    }

    pub fn arch(&self) -> u32 {
        match *self {
            Target::Sm(n) | Target::Compute(n) => n,
        }
    }

    pub fn output(&self) -> Output {
        match self {
            Target::Sm(_) => Output::Cubin,
            Target::Compute(_) => Output::Ptx,
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Sm(n) => write!(f, "sm_{n}"),
            Target::Compute(n) => write!(f, "compute_{n}"),
        }
    }
}

/// What the disk cache did for one compilation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheStatus {
    /// Loaded from the cache; NVRTC was not called.
    Hit,
    /// Not in the cache: compiled and stored.
    Miss,
    /// A corrupt entry was found: compiled again and replaced.
    Rebuilt,
    /// No cache folder: compiled.
    Disabled,
}

/// A compiled image.
#[derive(Clone, Debug)]
pub struct CompileOutput {
    pub target: Target,
    /// A cubin (`Target::Sm`) or PTX text (`Target::Compute`).
    pub image: Vec<u8>,
    pub cache: CacheStatus,
    /// The cache entry's path, when there is a cache.
    pub cache_path: Option<PathBuf>,
    /// NVRTC's log (warnings), empty on a cache hit.
    pub log: String,
}

/// The default cache folder: `$XDG_CACHE_HOME/xthunk/kernels/cuda` or
/// `~/.cache/xthunk/kernels/cuda`.
pub fn default_cache_dir() -> Option<PathBuf> {
    crate::loader::user_cache_dir().map(|c| c.join("xthunk").join("kernels").join("cuda"))
}

/// An NVRTC compiler with a disk cache.
pub struct Compiler {
    nvrtc: Arc<Nvrtc>,
    cache_dir: Option<PathBuf>,
    compilations: AtomicU64,
}

/// Options every compilation gets besides the target.
const BASE_OPTIONS: [&str; 1] = ["--fmad=false"];

/// Cache entry format version.
const ENTRY_VERSION: u32 = 1;
const MAGIC: &[u8; 8] = b"XTKCACHE";

fn fnv(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Why a cache entry is not usable (it is corrupt, stale or of another key).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum EntryError {
    Corrupt(String),
}

/// Serializes a cache entry.
pub(crate) fn encode_entry(key: &str, kind: Output, image: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(image.len() + key.len() + 48);
    v.extend_from_slice(MAGIC);
    v.extend_from_slice(&ENTRY_VERSION.to_le_bytes());
    v.extend_from_slice(&(kind as u32).to_le_bytes());
    v.extend_from_slice(&(image.len() as u64).to_le_bytes());
    v.extend_from_slice(&fnv(image).to_le_bytes());
    v.extend_from_slice(&(key.len() as u32).to_le_bytes());
    v.extend_from_slice(key.as_bytes());
    v.extend_from_slice(image);
    v
}

/// Parses and verifies a cache entry for `key`.
pub(crate) fn decode_entry(bytes: &[u8], key: &str, kind: Output) -> Result<Vec<u8>, EntryError> {
    let corrupt = |why: &str| EntryError::Corrupt(why.to_string());
    let take = |o: usize, n: usize| bytes.get(o..o + n).ok_or_else(|| corrupt("truncated"));
    if take(0, 8)? != MAGIC {
        return Err(corrupt("bad magic"));
    }
    let u32_at = |o| -> Result<u32, EntryError> {
        Ok(u32::from_le_bytes(
            take(o, 4)?.try_into().map_err(|_| corrupt("truncated"))?,
        ))
    };
    let u64_at = |o| -> Result<u64, EntryError> {
        Ok(u64::from_le_bytes(
            take(o, 8)?.try_into().map_err(|_| corrupt("truncated"))?,
        ))
    };
    if u32_at(8)? != ENTRY_VERSION {
        return Err(corrupt("other format version"));
    }
    if u32_at(12)? != kind as u32 {
        return Err(corrupt("other image kind"));
    }
    let len = u64_at(16)? as usize;
    let sum = u64_at(24)?;
    let key_len = u32_at(32)? as usize;
    if take(36, key_len)? != key.as_bytes() {
        return Err(corrupt("key mismatch"));
    }
    let start = 36 + key_len;
    if bytes.len() != start.saturating_add(len) {
        return Err(corrupt("length mismatch"));
    }
    let image = &bytes[start..];
    if fnv(image) != sum {
        return Err(corrupt("checksum mismatch"));
    }
    Ok(image.to_vec())
}

/// Writes `bytes` to `path` atomically: a temporary file in the same folder, synced, then
/// renamed over `path`.
fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}-{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("entry"),
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

impl Compiler {
    /// A compiler using `nvrtc`, caching in [`default_cache_dir`].
    pub fn new(nvrtc: Arc<Nvrtc>) -> Self {
        Compiler {
            nvrtc,
            cache_dir: default_cache_dir(),
            compilations: AtomicU64::new(0),
        }
    }

    /// Uses `dir` as the cache folder (`None`: no disk cache).
    pub fn with_cache_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.cache_dir = dir;
        self
    }

    pub fn nvrtc(&self) -> &Arc<Nvrtc> {
        &self.nvrtc
    }

    pub fn cache_dir(&self) -> Option<&Path> {
        self.cache_dir.as_deref()
    }

    /// How many times this compiler called NVRTC (cache hits do not count).
    pub fn nvrtc_compilations(&self) -> u64 {
        self.compilations.load(Ordering::Relaxed)
    }

    fn options(target: Target) -> Vec<String> {
        let mut o = vec![format!("--gpu-architecture={target}")];
        o.extend(BASE_OPTIONS.iter().map(|s| s.to_string()));
        o
    }

    /// The cache key of `source` for `target`: everything that changes the output.
    fn key(&self, source: &str, target: Target) -> String {
        let (maj, min) = self.nvrtc.version();
        format!(
            "xthunk-portable-v{PORTABLE_SOURCE_VERSION};src={:016x};len={};target={target};nvrtc={maj}.{min};opts={}",
            source_hash(source),
            source.len(),
            BASE_OPTIONS.join(" ")
        )
    }

    /// The target to compile for a device of architecture `sm`: a cubin when NVRTC knows the
    /// architecture (or cannot list what it knows), else PTX for the newest architecture it
    /// supports below `sm` (the driver JIT-compiles that PTX for the device).
    pub fn target_for_device(&self, sm: u32) -> Result<Target, Error> {
        let archs = self.nvrtc.supported_archs();
        if archs.is_empty() || archs.contains(&sm) {
            return Ok(Target::Sm(sm));
        }
        match archs.iter().copied().filter(|&a| a <= sm).max() {
            Some(a) => Ok(Target::Compute(a)),
            None => Err(Error::Unsupported {
                backend: BACKEND.into(),
                feature: format!(
                    "compiling for sm_{sm} with NVRTC {}.{} (it supports sm_{})",
                    self.nvrtc.version().0,
                    self.nvrtc.version().1,
                    archs
                        .iter()
                        .map(|a| a.to_string())
                        .collect::<Vec<_>>()
                        .join(", sm_")
                ),
            }),
        }
    }

    /// Compiles for a device of architecture `sm` (see [`Compiler::target_for_device`]).
    pub fn compile_for_device(&self, source: &str, sm: u32) -> Result<CompileOutput, Error> {
        let t = self.target_for_device(sm)?;
        if let Target::Compute(a) = t {
            tracing::info!("NVRTC cannot compile for sm_{sm}: using PTX for compute_{a}");
        }
        self.compile(source, t)
    }

    /// Compiles a complete translation unit (prelude included) for `target`, through the
    /// disk cache. A compile error is `Error::Module` carrying NVRTC's log.
    pub fn compile(&self, source: &str, target: Target) -> Result<CompileOutput, Error> {
        let key = self.key(source, target);
        let path = self
            .cache_dir
            .as_ref()
            .map(|d| d.join(format!("{:016x}-{target}.bin", fnv(key.as_bytes()))));
        let mut status = CacheStatus::Disabled;
        if let Some(p) = &path {
            status = match std::fs::read(p) {
                Err(_) => CacheStatus::Miss,
                Ok(bytes) => match decode_entry(&bytes, &key, target.output()) {
                    Ok(image) => {
                        tracing::debug!(path = %p.display(), "kernel cache hit");
                        return Ok(CompileOutput {
                            target,
                            image,
                            cache: CacheStatus::Hit,
                            cache_path: path,
                            log: String::new(),
                        });
                    }
                    Err(EntryError::Corrupt(why)) => {
                        tracing::warn!(
                            path = %p.display(),
                            "corrupt kernel cache entry ({why}): compiling again"
                        );
                        CacheStatus::Rebuilt
                    }
                },
            };
        }
        self.compilations.fetch_add(1, Ordering::Relaxed);
        let started = std::time::Instant::now();
        let compiled = self.nvrtc.compile(
            source,
            "xthunk_portable.cu",
            &Self::options(target),
            target.output(),
        )?;
        let (image, log) = match compiled {
            Compiled::Ok { image, log } => (image, log),
            Compiled::Failed { status, log } => {
                return Err(Error::Module {
                    module: "portable source".into(),
                    message: format!(
                        "NVRTC {}.{} failed to compile for {target}: {status}\nNVRTC log:\n{log}",
                        self.nvrtc.version().0,
                        self.nvrtc.version().1
                    ),
                });
            }
        };
        tracing::info!(
            "NVRTC compiled {} bytes of source for {target} in {:.2?} ({} bytes)",
            source.len(),
            started.elapsed(),
            image.len()
        );
        if let Some(p) = &path {
            if let Err(e) = write_atomic(p, &encode_entry(&key, target.output(), &image)) {
                tracing::warn!(path = %p.display(), "could not write the kernel cache: {e}");
            }
        }
        Ok(CompileOutput {
            target,
            image,
            cache: status,
            cache_path: path,
            log,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse() {
        assert_eq!(Target::parse("sm_90").ok(), Some(Target::Sm(90)));
        assert_eq!(Target::parse("compute_80").ok(), Some(Target::Compute(80)));
        for bad in ["sm90", "sm_", "gfx90a", "sm_90a", "sm_1000"] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Target::Sm(90).to_string(), "sm_90");
    }

    #[test]
    fn entries_round_trip_and_detect_corruption() {
        let img = b"\x7fELF some cubin bytes".to_vec();
        let e = encode_entry("k1", Output::Cubin, &img);
        assert_eq!(decode_entry(&e, "k1", Output::Cubin), Ok(img.clone()));
        assert!(matches!(
            decode_entry(&e, "k2", Output::Cubin),
            Err(EntryError::Corrupt(_))
        ));
        assert!(matches!(
            decode_entry(&e, "k1", Output::Ptx),
            Err(EntryError::Corrupt(_))
        ));
        let mut flipped = e.clone();
        if let Some(b) = flipped.last_mut() {
            *b ^= 1;
        }
        assert_eq!(
            decode_entry(&flipped, "k1", Output::Cubin),
            Err(EntryError::Corrupt("checksum mismatch".into()))
        );
        assert!(matches!(
            decode_entry(&e[..e.len() - 1], "k1", Output::Cubin),
            Err(EntryError::Corrupt(_))
        ));
        assert!(matches!(
            decode_entry(&e[..10], "k1", Output::Cubin),
            Err(EntryError::Corrupt(_))
        ));
    }

    #[test]
    fn atomic_write_replaces() {
        let dir = std::env::temp_dir().join(format!("xthunk-cache-{}", std::process::id()));
        let p = dir.join("a.bin");
        assert!(write_atomic(&p, b"one").is_ok());
        assert!(write_atomic(&p, b"two").is_ok());
        assert_eq!(std::fs::read(&p).ok(), Some(b"two".to_vec()));
        let leftovers = std::fs::read_dir(&dir).map(|r| r.count()).unwrap_or(0);
        assert_eq!(leftovers, 1);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
