//! The one disk cache of compiled kernel images (cubins, PTX, HSACO code objects), for every
//! vendor backend.
//!
//! - **Where**: one folder per backend, `$XDG_CACHE_HOME/xthunk/kernels/<backend>` (else
//!   `$HOME/.cache/xthunk/kernels/<backend>`), created owner-only (0700); each entry a file
//!   `<key>.bin`, owner-only (0600), written atomically ([`crate::files::StagedFile`]), so a
//!   reader never sees half an entry and no temporary file survives a failure.
//! - **Key**: a SHA-256 over everything that determines the image ([`KeyInputs`]: the backend,
//!   the compiler and its version, the target, the image kind, every option and the complete
//!   translation unit, prelude included), each field length-prefixed so that no two different
//!   inputs encode alike.
//! - **Entry**: `magic "XTKIMAGE" | format u32 | key (32 bytes) | image length u64 | SHA-256
//!   of the image (32 bytes) | image`, little-endian. Every read checks all of it: an entry
//!   that is truncated, corrupt, of another format or of another key is a miss
//!   ([`Lookup::Corrupt`]), logged and removed, and the caller's compile writes it anew.
//!
//! - **Trust**: a cache folder is used only when it is a folder owned by this process's user
//!   and not writable by group or others; an existing folder that is not (someone else could
//!   put images there, and an image is code the GPU runs) **disables the cache with a
//!   warning**: compilations go on, uncached ([`KernelCache::default_location`] gives `None`,
//!   [`KernelCache::get`] misses, [`KernelCache::put`] fails). An entry is read only when it is
//!   a regular file owned by this user (checked on the open descriptor, without following a
//!   symbolic link); another is corrupt. The folders above the cache folder are not checked.
//!
//! Writing the cache is best effort for callers: a failure to write costs a recompilation
//! next time, never a wrong image.

use crate::files::{MODE_PRIVATE, write_atomic};
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::fmt;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The entry layout's version; an entry of another is a miss.
pub const FORMAT_VERSION: u32 = 1;
const MAGIC: &[u8; 8] = b"XTKIMAGE";
/// Bytes before the image.
const HEADER_LEN: usize = 8 + 4 + 32 + 8 + 32;
/// Permission bits of the cache folders.
pub const DIR_MODE: u32 = 0o700;

/// Everything that determines a compiled image: what a cache key is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyInputs<'a> {
    /// `cuda`, `rocm`.
    pub backend: &'a str,
    /// `NVRTC`, `hipRTC`.
    pub compiler: &'a str,
    /// The compiler's version, and that of every library that shapes its output (for
    /// hipRTC: the HIP runtime's and comgr's too).
    pub compiler_version: &'a str,
    /// `sm_90`, `compute_80`, `gfx90a:xnack-`.
    pub target: &'a str,
    /// What the image is: `cubin`, `ptx`, `hsaco`.
    pub kind: &'a str,
    /// Every compiler option, in order (the target option included).
    pub options: &'a [String],
    /// The complete translation unit compiled: prelude and kernel source.
    pub source: &'a str,
}

/// A cache key: the SHA-256 of [`KeyInputs`].
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CacheKey([u8; 32]);

impl CacheKey {
    pub fn new(inputs: &KeyInputs<'_>) -> CacheKey {
        fn field(h: &mut Sha256, name: &str, value: &[u8]) {
            h.update(name.as_bytes());
            h.update((value.len() as u64).to_le_bytes());
            h.update(value);
        }
        let KeyInputs {
            backend,
            compiler,
            compiler_version,
            target,
            kind,
            options,
            source,
        } = *inputs;
        let mut h = Sha256::new();
        h.update(b"xthunk kernel cache key\0");
        h.update(FORMAT_VERSION.to_le_bytes());
        field(&mut h, "backend", backend.as_bytes());
        field(&mut h, "compiler", compiler.as_bytes());
        field(&mut h, "compiler_version", compiler_version.as_bytes());
        field(&mut h, "target", target.as_bytes());
        field(&mut h, "kind", kind.as_bytes());
        h.update((options.len() as u64).to_le_bytes());
        for o in options {
            field(&mut h, "option", o.as_bytes());
        }
        field(&mut h, "source", source.as_bytes());
        CacheKey(h.finalize().into())
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// 64 lowercase hex digits.
    pub fn hex(&self) -> String {
        hex(&self.0)
    }
}

impl fmt::Display for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.hex())
    }
}

impl fmt::Debug for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CacheKey({})", self.hex())
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What the cache had for a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// An intact entry: the image.
    Hit(Vec<u8>),
    /// No entry.
    Miss,
    /// An entry that failed its checks (why): a miss. It was logged and removed; the caller
    /// compiles and writes it anew.
    Corrupt(String),
}

impl Lookup {
    /// The image of a hit.
    pub fn hit(self) -> Option<Vec<u8>> {
        match self {
            Lookup::Hit(image) => Some(image),
            Lookup::Miss | Lookup::Corrupt(_) => None,
        }
    }
}

/// What a backend's compiler did with its caches for one compilation: the same in every
/// backend (each one's `CompileOutput::cache`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CacheStatus {
    /// Compiled or read earlier by the same compiler and kept in memory (for a compiler that
    /// keeps images: the ROCm backend's).
    Memory,
    /// Read from the disk cache: the compiler was not called.
    Hit,
    /// Not in the disk cache: compiled and stored.
    Miss,
    /// An entry was there but unusable (it failed its checks, or the backend's own check of
    /// the image): compiled again and replaced.
    Rebuilt,
    /// No disk cache: compiled.
    Disabled,
}

/// A backend's kernel cache folder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelCache {
    dir: PathBuf,
}

impl KernelCache {
    /// A cache in `dir` (created, 0700, on the first write).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        KernelCache { dir: dir.into() }
    }

    /// `$XDG_CACHE_HOME/xthunk/kernels/<backend>`, else `$HOME/.cache/xthunk/kernels/<backend>`;
    /// `None` when neither variable is set.
    pub fn default_dir(backend: &str) -> Option<PathBuf> {
        Self::default_dir_from(backend, crate::backend::search::env_path)
    }

    /// [`KernelCache::default_dir`] for these variable values (`var` gives a variable's value
    /// when it is set and not empty).
    pub fn default_dir_from(
        backend: &str,
        var: impl Fn(&str) -> Option<PathBuf>,
    ) -> Option<PathBuf> {
        crate::backend::search::user_cache_dir(var)
            .map(|c| c.join("xthunk").join("kernels").join(backend))
    }

    /// The cache in [`KernelCache::default_dir`]; `None` (after a warning) when that folder
    /// exists but may not be trusted ([`check_dir`]).
    pub fn default_location(backend: &str) -> Option<KernelCache> {
        let cache = Self::default_dir(backend).map(KernelCache::new)?;
        cache.trusted().then_some(cache)
    }

    /// Whether the folder may be used (absent, or [`check_dir`] accepts it); warns, once per
    /// folder and process, when it may not.
    fn trusted(&self) -> bool {
        match check_dir(&self.dir) {
            Ok(()) => true,
            Err(why) => {
                static WARNED: Mutex<BTreeSet<PathBuf>> = parking_lot::const_mutex(BTreeSet::new());
                if WARNED.lock().insert(self.dir.clone()) {
                    tracing::warn!(
                        dir = %self.dir.display(),
                        "the kernel cache is disabled: {why}"
                    );
                }
                false
            }
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of a key's entry.
    pub fn path_for(&self, key: &CacheKey) -> PathBuf {
        self.dir.join(format!("{}.bin", key.hex()))
    }

    /// The entry for `key`, verified. A corrupt one is logged and removed. A miss when the
    /// folder may not be trusted ([`check_dir`]; warned once).
    pub fn get(&self, key: &CacheKey) -> Lookup {
        if !self.trusted() {
            return Lookup::Miss;
        }
        let path = self.path_for(key);
        let why = match read_bounded(&path) {
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                ) =>
            {
                return Lookup::Miss;
            }
            Err(e) => format!("cannot be read: {e}"),
            Ok(bytes) => match decode(&bytes, key) {
                Ok(()) => {
                    tracing::debug!(path = %path.display(), "kernel cache hit");
                    let mut bytes = bytes;
                    bytes.drain(..HEADER_LEN);
                    return Lookup::Hit(bytes);
                }
                Err(why) => why,
            },
        };
        tracing::warn!(
            path = %path.display(),
            "discarding a bad kernel cache entry ({why}): compiling again"
        );
        let _ = std::fs::remove_file(&path);
        Lookup::Corrupt(why)
    }

    /// Stores `image` under `key`, atomically, creating the folder (0700) if needed; returns
    /// the entry's path. Refused (`PermissionDenied`) when the folder may not be trusted
    /// ([`check_dir`]).
    pub fn put(&self, key: &CacheKey, image: &[u8]) -> io::Result<PathBuf> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(&self.dir)?;
        check_dir(&self.dir).map_err(|why| {
            io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("the kernel cache is disabled: {why}"),
            )
        })?;
        let path = self.path_for(key);
        write_atomic(&path, &encode(key, image), MODE_PRIVATE)?;
        Ok(path)
    }

    /// Removes a key's entry (one the caller found unusable after it was read, e.g. a code
    /// object for another target); absent is fine.
    pub fn remove(&self, key: &CacheKey) {
        let _ = std::fs::remove_file(self.path_for(key));
    }
}

/// Checks that `dir`, when it exists, is a folder (a symbolic link to one is followed) owned
/// by this process's user and not writable by group or others; the error says what it is
/// instead. An absent folder is fine (it is created 0700 on the first write).
pub fn check_dir(dir: &Path) -> Result<(), String> {
    let meta = match std::fs::metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("{} cannot be examined: {e}", dir.display())),
    };
    // SAFETY: no preconditions.
    let me = unsafe { libc::geteuid() };
    let mode = meta.mode() & 0o7777;
    if !meta.is_dir() {
        Err(format!("{} is not a folder", dir.display()))
    } else if meta.uid() != me {
        Err(format!(
            "{} is owned by uid {}, not by this user (uid {me}): its images could be anybody's",
            dir.display(),
            meta.uid()
        ))
    } else if mode & 0o022 != 0 {
        Err(format!(
            "{} is writable by its group or others (mode {mode:04o}): its images could be \
             anybody's (chmod 700 it, or remove it)",
            dir.display()
        ))
    } else {
        Ok(())
    }
}

/// An entry's bytes.
fn encode(key: &CacheKey, image: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER_LEN + image.len());
    v.extend_from_slice(MAGIC);
    v.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    v.extend_from_slice(key.as_bytes());
    v.extend_from_slice(&(image.len() as u64).to_le_bytes());
    v.extend_from_slice(&Sha256::digest(image));
    v.extend_from_slice(image);
    v
}

/// Checks an entry's bytes for `key`; the error says what is wrong.
fn decode(bytes: &[u8], key: &CacheKey) -> Result<(), String> {
    let Some((header, image)) = bytes.split_at_checked(HEADER_LEN) else {
        return Err(format!("truncated: {} bytes", bytes.len()));
    };
    let (magic, rest) = header.split_at(8);
    if magic != MAGIC {
        return Err("not a kernel cache entry".into());
    }
    let (format, rest) = rest.split_at(4);
    let format = u32::from_le_bytes([format[0], format[1], format[2], format[3]]);
    if format != FORMAT_VERSION {
        return Err(format!("format {format}, not {FORMAT_VERSION}"));
    }
    let (entry_key, rest) = rest.split_at(32);
    if entry_key != key.as_bytes() {
        return Err("the entry belongs to another key".into());
    }
    let (len, sum) = rest.split_at(8);
    let mut len8 = [0u8; 8];
    len8.copy_from_slice(len);
    let len = u64::from_le_bytes(len8);
    if image.len() as u64 != len {
        return Err(format!(
            "length mismatch: the header says {len} bytes, the file has {}",
            image.len()
        ));
    }
    if Sha256::digest(image).as_slice() != sum {
        return Err("checksum mismatch".into());
    }
    Ok(())
}

/// The largest entry read back (a device image plus the header); a bigger file at an entry's
/// name is treated as corrupt rather than read into memory.
const MAX_ENTRY: u64 = 1 << 30;

/// Reads an entry file: a regular file owned by this user of at most [`MAX_ENTRY`] bytes,
/// checked on the open descriptor (anything else, e.g. a FIFO or a symbolic link someone put
/// there, is an error instead of a read that could block, exhaust memory or load an image of
/// theirs).
fn read_bounded(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    // Not following a link; not blocking on a FIFO (O_NONBLOCK does nothing to the reads of
    // a regular file).
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                io::Error::other("not a regular file (a symbolic link)")
            } else {
                e
            }
        })?;
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    // SAFETY: no preconditions.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(io::Error::other(format!(
            "owned by uid {}, not by this user (uid {me})",
            meta.uid()
        )));
    }
    if meta.len() > MAX_ENTRY {
        return Err(io::Error::other(format!(
            "{} bytes, more than the {MAX_ENTRY} an entry may have",
            meta.len()
        )));
    }
    let mut bytes = Vec::new();
    f.take(MAX_ENTRY + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_ENTRY {
        return Err(io::Error::other("grew past the entry limit while read"));
    }
    Ok(bytes)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn opts(o: &[&str]) -> Vec<String> {
        o.iter().map(|s| s.to_string()).collect()
    }

    fn key_of(options: &[String], f: impl FnOnce(&mut KeyInputs<'_>)) -> CacheKey {
        let mut k = KeyInputs {
            backend: "cuda",
            compiler: "NVRTC",
            compiler_version: "12.9",
            target: "sm_90",
            kind: "cubin",
            options,
            source: "prelude\nextern \"C\" __global__ void k() {}",
        };
        f(&mut k);
        CacheKey::new(&k)
    }

    #[test]
    fn the_key_changes_with_every_input() {
        let o = opts(&["--gpu-architecture=sm_90", "--fmad=false"]);
        let base = key_of(&o, |_| {});
        assert_eq!(base, key_of(&o, |_| {}), "deterministic");
        let other_opts = opts(&["--gpu-architecture=sm_90"]);
        let joined = opts(&["--gpu-architecture=sm_90 --fmad=false"]);
        let variants = [
            key_of(&o, |k| k.backend = "rocm"),
            key_of(&o, |k| k.compiler = "hipRTC"),
            key_of(&o, |k| k.compiler_version = "12.8"),
            key_of(&o, |k| k.target = "sm_80"),
            key_of(&o, |k| k.kind = "ptx"),
            key_of(&other_opts, |_| {}),
            key_of(&joined, |_| {}),
            key_of(&o, |k| {
                k.source = "prelude\nextern \"C\" __global__ void j() {}"
            }),
            key_of(&o, |k| {
                k.source = "prelude2\nextern \"C\" __global__ void k() {}"
            }),
            // A byte moved between two fields.
            key_of(&o, |k| {
                k.compiler = "NVRTC1";
                k.compiler_version = "2.9";
            }),
        ];
        for (i, v) in variants.iter().enumerate() {
            assert_ne!(*v, base, "variant {i}");
            for w in &variants[i + 1..] {
                assert_ne!(v, w);
            }
        }
        assert_eq!(base.hex().len(), 64);
        assert!(base.hex().bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(base.to_string(), base.hex());
    }

    #[test]
    fn a_miss_then_a_hit() {
        let dir = tempfile::tempdir().unwrap();
        let cache = KernelCache::new(dir.path().join("kernels").join("cuda"));
        let key = key_of(&[], |_| {});
        assert_eq!(cache.get(&key), Lookup::Miss);
        let path = cache.put(&key, b"\x7fELF image").unwrap();
        assert_eq!(path, cache.path_for(&key));
        assert_eq!(cache.get(&key), Lookup::Hit(b"\x7fELF image".to_vec()));
        // Another key misses; an empty image is an image.
        let other = key_of(&[], |k| k.target = "sm_80");
        assert_eq!(cache.get(&other), Lookup::Miss);
        cache.put(&other, b"").unwrap();
        assert_eq!(cache.get(&other).hit(), Some(vec![]));
        // Rewriting replaces; only entries are left in the folder.
        cache.put(&key, b"second").unwrap();
        assert_eq!(cache.get(&key).hit(), Some(b"second".to_vec()));
        let names: Vec<String> = std::fs::read_dir(cache.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(names.iter().all(|n| n.ends_with(".bin")), "{names:?}");
        cache.remove(&key);
        assert_eq!(cache.get(&key), Lookup::Miss);
        cache.remove(&key);
    }

    #[test]
    fn an_entry_that_is_not_a_regular_file_is_corrupt_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let cache = KernelCache::new(dir.path());
        let key = key_of(&[], |_| {});
        let path = cache.path_for(&key);
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo only creates a file system entry.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // Opening a FIFO with no writer would block this test forever.
        match cache.get(&key) {
            Lookup::Corrupt(reason) => assert!(reason.contains("not a regular file"), "{reason}"),
            other => panic!("{other:?}"),
        }
        assert!(!path.exists(), "the FIFO is removed");
    }

    #[test]
    fn corrupt_or_truncated_entries_are_misses_removed_and_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let cache = KernelCache::new(dir.path());
        let key = key_of(&[], |_| {});
        let image = b"some cubin bytes, long enough to cut".to_vec();
        let path = cache.put(&key, &image).unwrap();
        let good = std::fs::read(&path).unwrap();

        let mut flipped = good.clone();
        let mid = HEADER_LEN + image.len() / 2;
        flipped[mid] ^= 0x5a;
        let truncated = good[..good.len() - 3].to_vec();
        let mut longer = good.clone();
        longer.push(0);
        let mut bad_magic = good.clone();
        bad_magic[0] ^= 1;
        let mut bad_format = good.clone();
        bad_format[8] ^= 1;
        let mut bad_sum = good.clone();
        bad_sum[8 + 4 + 32 + 8] ^= 1;
        let cases: [(&[u8], &str); 8] = [
            (&flipped, "checksum mismatch"),
            (&truncated, "length mismatch"),
            (&longer, "length mismatch"),
            (&good[..10], "truncated"),
            (b"", "truncated"),
            (&bad_magic, "not a kernel cache entry"),
            (&bad_format, "format"),
            (&bad_sum, "checksum mismatch"),
        ];
        for (bytes, why) in cases {
            std::fs::write(&path, bytes).unwrap();
            match cache.get(&key) {
                Lookup::Corrupt(reason) => assert!(reason.contains(why), "{why}: {reason}"),
                other => panic!("{why}: {other:?}"),
            }
            assert!(!path.exists(), "{why}: the bad entry is removed");
            assert_eq!(cache.get(&key), Lookup::Miss);
            cache.put(&key, &image).unwrap();
            assert_eq!(cache.get(&key).hit(), Some(image.clone()), "{why}");
        }

        // An intact entry copied under another key's name belongs to that other key.
        let other = key_of(&[], |k| k.kind = "ptx");
        std::fs::copy(&path, cache.path_for(&other)).unwrap();
        assert_eq!(
            cache.get(&other),
            Lookup::Corrupt("the entry belongs to another key".into())
        );
    }

    #[test]
    fn the_folder_is_owner_only_and_so_are_the_entries() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("cache");
        let cache = KernelCache::new(root.join("xthunk").join("kernels").join("rocm"));
        let key = key_of(&[], |_| {});
        let path = cache.put(&key, b"x").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        for d in [cache.dir().to_path_buf(), root.join("xthunk"), root.clone()] {
            assert_eq!(mode(&d), 0o700, "{}", d.display());
        }
        assert_eq!(mode(&path), 0o600);
        // No temporary file is left beside the entry.
        let n = std::fs::read_dir(cache.dir()).unwrap().count();
        assert_eq!(n, 1);
    }

    fn is_root() -> bool {
        // SAFETY: no preconditions.
        unsafe { libc::geteuid() == 0 }
    }

    fn chown(p: &Path, uid: u32) {
        std::os::unix::fs::chown(p, Some(uid), Some(uid)).unwrap();
    }

    #[test]
    fn a_folder_of_another_user_or_writable_by_others_disables_the_cache() {
        let dir = tempfile::tempdir().unwrap();
        let cache = KernelCache::new(dir.path().join("kernels"));
        assert_eq!(check_dir(cache.dir()), Ok(()), "an absent folder is fine");
        let key = key_of(&[], |_| {});
        let path = cache.put(&key, b"image").unwrap();
        assert_eq!(check_dir(cache.dir()), Ok(()));
        let chmod = |mode: u32| {
            std::fs::set_permissions(cache.dir(), std::fs::Permissions::from_mode(mode)).unwrap()
        };
        for mode in [0o777, 0o770, 0o720, 0o702, 0o1777] {
            chmod(mode);
            let why = check_dir(cache.dir()).unwrap_err();
            assert!(
                why.contains(&format!(
                    "writable by its group or others (mode {mode:04o})"
                )),
                "{why}"
            );
            // Disabled: the entry is not read (nor removed), nothing is written.
            assert_eq!(cache.get(&key), Lookup::Miss, "{mode:o}");
            assert!(path.exists());
            let e = cache.put(&key, b"other").unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
            assert!(
                e.to_string().contains("the kernel cache is disabled"),
                "{e}"
            );
        }
        // Readable by others is not a risk to the images.
        for mode in [0o700, 0o750, 0o755, 0o500] {
            chmod(mode);
            assert_eq!(check_dir(cache.dir()), Ok(()), "{mode:o}");
            assert_eq!(cache.get(&key).hit(), Some(b"image".to_vec()), "{mode:o}");
        }
        chmod(0o700);
        if is_root() {
            chown(cache.dir(), 65534);
            let why = check_dir(cache.dir()).unwrap_err();
            assert!(
                why.contains("is owned by uid 65534, not by this user (uid 0)"),
                "{why}"
            );
            assert_eq!(cache.get(&key), Lookup::Miss);
            assert!(cache.put(&key, b"other").is_err());
            chown(cache.dir(), 0);
            assert_eq!(cache.get(&key).hit(), Some(b"image".to_vec()));
        } else {
            eprintln!("not root: the owner case of this test needs root to give a folder away");
        }
        let file = dir.path().join("file");
        std::fs::write(&file, b"").unwrap();
        assert!(check_dir(&file).unwrap_err().contains("is not a folder"));
    }

    #[test]
    fn an_entry_that_is_a_link_or_another_user_s_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let cache = KernelCache::new(dir.path().join("kernels"));
        let (key, other) = (key_of(&[], |_| {}), key_of(&[], |k| k.kind = "ptx"));
        let path = cache.put(&key, b"image").unwrap();
        // An intact entry of the right key, reached through a link, is still refused.
        let elsewhere = dir.path().join("elsewhere.bin");
        std::fs::copy(&path, &elsewhere).unwrap();
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        match cache.get(&key) {
            Lookup::Corrupt(why) => assert!(why.contains("symbolic link"), "{why}"),
            l => panic!("{l:?}"),
        }
        assert!(
            !path.exists() && elsewhere.exists(),
            "the link went, not its target"
        );
        if is_root() {
            let path = cache.put(&other, b"image").unwrap();
            chown(&path, 65534);
            match cache.get(&other) {
                Lookup::Corrupt(why) => {
                    assert!(
                        why.contains("owned by uid 65534, not by this user"),
                        "{why}"
                    )
                }
                l => panic!("{l:?}"),
            }
        } else {
            eprintln!("not root: the owner case of this test needs root to give a file away");
        }
    }

    #[test]
    fn a_write_into_an_impossible_folder_fails_cleanly() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a-file");
        std::fs::write(&file, b"").unwrap();
        let cache = KernelCache::new(file.join("kernels"));
        let key = key_of(&[], |_| {});
        assert!(cache.put(&key, b"x").is_err());
        assert_eq!(cache.get(&key), Lookup::Miss);
    }

    #[test]
    fn the_default_folder_is_per_backend_under_the_user_cache() {
        let vars = |xdg: Option<&'static str>, home: Option<&'static str>| {
            move |k: &str| match k {
                "XDG_CACHE_HOME" => xdg.map(PathBuf::from),
                "HOME" => home.map(PathBuf::from),
                _ => None,
            }
        };
        assert_eq!(
            KernelCache::default_dir_from("cuda", vars(Some("/x"), Some("/h"))),
            Some(PathBuf::from("/x/xthunk/kernels/cuda"))
        );
        assert_eq!(
            KernelCache::default_dir_from("rocm", vars(None, Some("/h"))),
            Some(PathBuf::from("/h/.cache/xthunk/kernels/rocm"))
        );
        assert_eq!(
            KernelCache::default_dir_from("rocm", vars(None, None)),
            None
        );
    }
}
