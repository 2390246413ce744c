//! The one mechanism every vendor library opened at run time is bound through (NVRTC, cuBLAS,
//! HIP, hipRTC, comgr, rocBLAS, NCCL/RCCL): a declared symbol table, the search for a library
//! that satisfies it, and version gates.
//!
//! - [`symbol_table!`] declares a table (after IREE's dynamic symbol tables): **required**
//!   symbols, plain function pointers (a library lacking one is refused, naming every missing
//!   one), and **optional** ones, `Option`s (`None` when absent), each of which may be gated on
//!   the library version that introduced it (`#[since(...)]`: `None` below that version, even
//!   where the symbol is exported).
//! - [`Loader::load`] tries candidates in order ([`super::search`] builds them): each is
//!   opened with `dlopen`, bound, handed to the caller's probe (which reads the version and may
//!   refuse it, e.g. too new for the driver), checked against the minimum version, and gated.
//!   The first that passes wins; when none does, [`LoadError`] lists every path tried and why
//!   it failed.
//! - Feature gates that are not a symbol (NCCL's bf16) compare [`Loaded::version`] with
//!   [`Loaded::at_least`].
//!
//! A library that was bound is never unloaded: NCCL starts threads that would run unmapped
//! code, comgr registers LLVM options in the NODELETE libLLVM (unloading and reloading it
//! aborts the process), and the HIP runtime keeps global state. `dlopen`'s reference count
//! makes opening it again cheap.

use super::search::{self, Attempt, describe_attempts, file_containing};
pub use libloading::Library;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A library version, `major.minor.patch`, ordered as numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl Version {
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Version {
            major,
            minor,
            patch,
        }
    }

    /// The leading `major[.minor[.patch]]` of a version string (`4.3.0.60300-…` is 4.3.0,
    /// `2.45` is 2.45.0); `None` when it does not start with a number.
    pub fn parse_leading(s: &str) -> Option<Version> {
        let mut parts = [0u32; 3];
        let mut n = 0;
        for piece in s.trim().split('.').take(3) {
            let digits: String = piece.chars().take_while(char::is_ascii_digit).collect();
            let Ok(v) = digits.parse() else {
                break;
            };
            parts[n] = v;
            n += 1;
            if digits.len() != piece.len() {
                break;
            }
        }
        (n > 0).then(|| Version::new(parts[0], parts[1], parts[2]))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// An optional symbol of a table: its name, and the version that introduced it (when gated).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptionalSymbol {
    pub name: &'static str,
    pub since: Option<Version>,
}

/// A table of C functions bound from one library; implemented by [`symbol_table!`].
pub trait SymbolTable: Sized {
    /// Names of the required symbols, in declaration order.
    const REQUIRED: &'static [&'static str];
    /// The optional symbols, in declaration order.
    const OPTIONAL: &'static [OptionalSymbol];
    /// Looks every symbol up in `library`; the error names every missing required one
    /// (`lacks required symbols a, b`). The table keeps `library` open.
    fn bind(library: Arc<Library>) -> Result<Self, String>;
    /// Turns off every gated optional symbol that `version` is older than (all of them when
    /// the version is unknown); returns their names.
    fn gate(&mut self, version: Option<Version>) -> Vec<&'static str>;
    /// The library the symbols come from.
    fn library(&self) -> &Arc<Library>;
    /// The address of the first required symbol (to find the file it lies in).
    fn anchor(&self) -> usize;
}

/// True when a symbol introduced in `since` must be turned off for a library of `version`.
#[doc(hidden)]
pub fn gated_off(since: Option<Version>, version: Option<Version>) -> bool {
    since.is_some_and(|s| version.is_none_or(|v| v < s))
}

/// Looks up the symbol `name_nul` (NUL-terminated) in `library` as an `F`.
///
/// # Safety
/// `F` must be the symbol's exact C declaration (a function pointer type), and the value may
/// be used only while `library` is loaded.
#[doc(hidden)]
pub unsafe fn symbol<F: Copy>(library: &Library, name_nul: &str) -> Option<F> {
    // SAFETY: the caller guarantees `F` is the symbol's declaration and keeps `library` open.
    unsafe { library.get::<F>(name_nul.as_bytes()) }
        .ok()
        .map(|s| *s)
}

/// Declares a [`SymbolTable`]: a struct with one field per symbol (named as the C symbol) and
/// a field `library` that keeps the library open.
///
/// ```ignore
/// symbol_table! {
///     /// The NCCL/RCCL API.
///     pub(crate) struct NcclApi {
///         required {
///             ncclGetVersion: sys::ncclGetVersion_t,
///             ncclCommInitRank: sys::ncclCommInitRank_t,
///         }
///         optional {
///             #[since(Version::new(2, 18, 0))]
///             ncclCommSplit: sys::ncclCommSplit_t,
///             hipGetErrorName: sys::hipGetErrorName_t,
///         }
///     }
/// }
/// ```
///
/// Required fields are function pointers, optional ones `Option`s. Each type must be the
/// symbol's C declaration in the vendor header (the crate's `sys` module): binding trusts it.
/// `#[since(expr)]` (a constant [`Version`] expression) gates an optional symbol on the
/// library version. The fields have the struct's visibility.
#[macro_export]
#[doc(hidden)]
macro_rules! __symbol_table {
    (@since) => { ::std::option::Option::None };
    (@since $since:expr) => { ::std::option::Option::Some($since) };
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            required {
                $req0:ident : $req0_ty:ty,
                $( $req:ident : $req_ty:ty, )*
            }
            optional {
                $( $(#[since($since:expr)])? $opt:ident : $opt_ty:ty, )*
            }
        }
    ) => {
        $(#[$meta])*
        #[allow(non_snake_case, dead_code)]
        $vis struct $name {
            $vis $req0: $req0_ty,
            $( $vis $req: $req_ty, )*
            $( $vis $opt: ::std::option::Option<$opt_ty>, )*
            /// The library the symbols come from, kept open by the table.
            $vis library: ::std::sync::Arc<$crate::backend::dylib::Library>,
        }

        #[allow(non_snake_case)]
        impl $crate::backend::dylib::SymbolTable for $name {
            const REQUIRED: &'static [&'static str] =
                &[stringify!($req0), $(stringify!($req)),*];
            const OPTIONAL: &'static [$crate::backend::dylib::OptionalSymbol] = &[$(
                $crate::backend::dylib::OptionalSymbol {
                    name: stringify!($opt),
                    since: $crate::__symbol_table!(@since $($since)?),
                }
            ),*];

            fn bind(
                library: ::std::sync::Arc<$crate::backend::dylib::Library>,
            ) -> ::std::result::Result<Self, ::std::string::String> {
                let mut missing: ::std::vec::Vec<&'static str> = ::std::vec::Vec::new();
                // SAFETY: `$req0_ty` is this symbol's C declaration (the table's contract);
                // the pointer lives in the table, which keeps `library` open.
                let $req0: ::std::option::Option<$req0_ty> = unsafe {
                    $crate::backend::dylib::symbol(&library, concat!(stringify!($req0), "\0"))
                };
                if $req0.is_none() {
                    missing.push(stringify!($req0));
                }
                $(
                    // SAFETY: as for the first required symbol.
                    let $req: ::std::option::Option<$req_ty> = unsafe {
                        $crate::backend::dylib::symbol(&library, concat!(stringify!($req), "\0"))
                    };
                    if $req.is_none() {
                        missing.push(stringify!($req));
                    }
                )*
                $(
                    // SAFETY: as for the required symbols.
                    let $opt: ::std::option::Option<$opt_ty> = unsafe {
                        $crate::backend::dylib::symbol(&library, concat!(stringify!($opt), "\0"))
                    };
                )*
                let (Some($req0), $(Some($req),)*) = ($req0, $($req,)*) else {
                    return Err($crate::backend::search::lacks_symbols(&missing));
                };
                Ok($name { $req0, $($req,)* $($opt,)* library })
            }

            fn gate(
                &mut self,
                version: ::std::option::Option<$crate::backend::dylib::Version>,
            ) -> ::std::vec::Vec<&'static str> {
                #[allow(unused_mut)]
                let mut off: ::std::vec::Vec<&'static str> = ::std::vec::Vec::new();
                $(
                    if self.$opt.is_some()
                        && $crate::backend::dylib::gated_off(
                            $crate::__symbol_table!(@since $($since)?),
                            version,
                        )
                    {
                        self.$opt = None;
                        off.push(stringify!($opt));
                    }
                )*
                let _ = version;
                off
            }

            fn library(&self) -> &::std::sync::Arc<$crate::backend::dylib::Library> {
                &self.library
            }

            fn anchor(&self) -> usize {
                self.$req0 as usize
            }
        }
    };
}
pub use crate::__symbol_table as symbol_table;

/// What a probe learnt about a bound candidate: the version it reports (`None` when it cannot
/// say) and anything else the caller wants back (comgr's ISA list; `()` for most).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe<X = ()> {
    pub version: Option<Version>,
    pub extra: X,
}

impl Probe<()> {
    /// Only a version.
    pub fn version(version: Option<Version>) -> Self {
        Probe { version, extra: () }
    }
}

impl<X> Probe<X> {
    pub fn with(version: Option<Version>, extra: X) -> Self {
        Probe { version, extra }
    }
}

/// A bound library: its table, where it came from, and its version.
pub struct Loaded<T, X = ()> {
    pub table: T,
    /// The file the symbols come from: for a candidate found by bare name, where the dynamic
    /// loader found it (from `/proc/self/maps`); else the candidate.
    pub path: PathBuf,
    /// What the probe reported.
    pub version: Option<Version>,
    pub extra: X,
    /// Optional symbols turned off by their version gate although the library exports them.
    pub gated_off: Vec<&'static str>,
}

impl<T, X> Loaded<T, X> {
    /// True when the library's version is known and at least `v` (a feature gate).
    pub fn at_least(&self, v: Version) -> bool {
        self.version.is_some_and(|have| have >= v)
    }
}

impl<T, X: fmt::Debug> fmt::Debug for Loaded<T, X> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Loaded")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("extra", &self.extra)
            .field("gated_off", &self.gated_off)
            .finish_non_exhaustive()
    }
}

/// No candidate was usable: every place tried, and why each failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct LoadError {
    /// What was looked for (`NCCL`, `hipRTC`, `libnccl.so.2`).
    pub library: String,
    /// Each candidate in order, with its outcome.
    pub tried: Vec<Attempt>,
}

impl LoadError {
    /// `no usable X found; tried: /a/x.so, /b/x.so (no such file); x.so (dynamic loader: …)`,
    /// or `no usable X found: no folder to search` when there was no candidate.
    pub fn describe(&self) -> String {
        if self.tried.is_empty() {
            format!("no usable {} found: no folder to search", self.library)
        } else {
            format!(
                "no usable {} found; tried: {}",
                self.library,
                describe_attempts(&self.tried)
            )
        }
    }
}

/// How to choose a library: what it is called in messages and the oldest version accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loader {
    what: String,
    min_version: Option<Version>,
}

impl Loader {
    /// A loader for the library called `what` in messages (`NCCL`, `hipRTC`).
    pub fn new(what: impl Into<String>) -> Self {
        Loader {
            what: what.into(),
            min_version: None,
        }
    }

    /// Refuses a candidate whose probe reports a version older than `min` (a candidate whose
    /// version is unknown is not refused: there is nothing to compare).
    pub fn min_version(mut self, min: Version) -> Self {
        self.min_version = Some(min);
        self
    }

    /// Opens the first of `candidates` that `dlopen` accepts, that has every required symbol
    /// of `T`, that `probe` accepts and that is recent enough; gates its optional symbols on
    /// the version. A candidate in a folder that does not exist is not opened (`no such
    /// file`); a bare name is left to the dynamic loader's own search.
    pub fn load<T: SymbolTable, X>(
        &self,
        candidates: &[PathBuf],
        mut probe: impl FnMut(&T) -> Result<Probe<X>, String>,
    ) -> Result<Loaded<T, X>, LoadError> {
        search::open_first(candidates, |c, bare| {
            let library = open(c, bare)?;
            self.accept(library, c, &mut probe)
        })
        .map(|(loaded, _)| loaded)
        .map_err(|tried| LoadError {
            library: self.what.clone(),
            tried,
        })
    }

    /// Binds `T` from a library that is already open (found at `path`), with the same checks
    /// as [`Loader::load`]: for symbols that live in another library (ROCm 5's hipRTC inside
    /// the HIP runtime). The error is the reason it was refused.
    pub fn bind<T: SymbolTable, X>(
        &self,
        library: &Arc<Library>,
        path: &Path,
        mut probe: impl FnMut(&T) -> Result<Probe<X>, String>,
    ) -> Result<Loaded<T, X>, String> {
        self.accept(library.clone(), path, &mut probe)
    }

    fn accept<T: SymbolTable, X>(
        &self,
        library: Arc<Library>,
        path: &Path,
        probe: &mut impl FnMut(&T) -> Result<Probe<X>, String>,
    ) -> Result<Loaded<T, X>, String> {
        let mut table = T::bind(library.clone())?;
        let Probe { version, extra } = probe(&table)?;
        if let (Some(min), Some(v)) = (self.min_version, version)
            && v < min
        {
            return Err(format!(
                "{} {v} is older than the minimum {min} xthunk supports",
                self.what
            ));
        }
        let gated_off = table.gate(version);
        if !gated_off.is_empty() {
            tracing::debug!(
                library = %self.what,
                version = %version.map(|v| v.to_string()).unwrap_or_else(|| "unknown".into()),
                symbols = %gated_off.join(", "),
                "optional symbols off: the library is older than they need"
            );
        }
        // Pinned: never unloaded (see the module documentation).
        std::mem::forget(library);
        let path = file_containing(table.anchor()).unwrap_or_else(|| path.to_path_buf());
        Ok(Loaded {
            table,
            path,
            version,
            extra,
            gated_off,
        })
    }
}

/// Opens one candidate (`bare`: a name for the dynamic loader's search); the error is the
/// loader's reason.
fn open(path: &Path, bare: bool) -> Result<Arc<Library>, String> {
    // SAFETY: opening a library runs its initializers. The candidates are the vendor's
    // libraries (or a stand-in with the same API, such as the driver emulator) chosen by the
    // backend's search; they are opened RTLD_LAZY | RTLD_LOCAL (libloading's default) and
    // never unloaded while a pointer from them is reachable (the table keeps them open, and
    // an accepted one is pinned).
    match unsafe { Library::new(path) } {
        Ok(l) => Ok(Arc::new(l)),
        // libloading's message is "dlopen failed"; the loader's reason is its source.
        Err(e) => Err(search::open_failure(&e, bare)),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    //! Against the C math library (every Linux machine has `libm.so.6`), with versions the
    //! probe makes up.

    use super::*;

    type UnaryFn = unsafe extern "C" fn(f64) -> f64;

    symbol_table! {
        /// Functions every C math library has, and some it has not.
        struct MathApi {
            required {
                cos: UnaryFn,
                sin: UnaryFn,
            }
            optional {
                exp2: UnaryFn,
                #[since(Version::new(2, 0, 0))]
                sqrt: UnaryFn,
                #[since(NINE)]
                cbrt: UnaryFn,
                xthunk_no_such_function: UnaryFn,
            }
        }
    }

    const NINE: Version = Version::new(9, 0, 0);

    symbol_table! {
        /// A table the math library does not satisfy.
        struct NotMath {
            required {
                cos: UnaryFn,
                xthunk_missing_a: UnaryFn,
                xthunk_missing_b: UnaryFn,
            }
            optional {}
        }
    }

    const LIBM: &str = "libm.so.6";

    fn libm() -> Vec<PathBuf> {
        vec![PathBuf::from(LIBM)]
    }

    fn at(v: (u32, u32, u32)) -> impl FnMut(&MathApi) -> Result<Probe, String> {
        move |_| Ok(Probe::version(Some(Version::new(v.0, v.1, v.2))))
    }

    #[test]
    fn the_table_lists_its_symbols() {
        assert_eq!(MathApi::REQUIRED, &["cos", "sin"]);
        let names: Vec<_> = MathApi::OPTIONAL.iter().map(|o| o.name).collect();
        assert_eq!(names, ["exp2", "sqrt", "cbrt", "xthunk_no_such_function"]);
        assert_eq!(MathApi::OPTIONAL[0].since, None);
        assert_eq!(MathApi::OPTIONAL[1].since, Some(Version::new(2, 0, 0)));
        assert_eq!(MathApi::OPTIONAL[2].since, Some(NINE));
        assert!(NotMath::OPTIONAL.is_empty());
    }

    #[test]
    fn required_and_optional_symbols_bind_and_an_absent_optional_is_none() {
        let m = Loader::new("libm")
            .load::<MathApi, ()>(&libm(), at((2, 5, 0)))
            .unwrap();
        // SAFETY: `cos` and `exp2` are `double f(double)` in <math.h>; the table keeps libm
        // open.
        unsafe {
            assert_eq!((m.table.cos)(0.0), 1.0);
            assert_eq!(m.table.exp2.map(|f| f(3.0)), Some(8.0));
        }
        assert!(m.table.xthunk_no_such_function.is_none());
        // Found by bare name: the path is where the dynamic loader found it.
        assert!(m.path.is_absolute(), "{}", m.path.display());
        assert!(
            m.path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("libm")),
            "{}",
            m.path.display()
        );
        assert_eq!(m.version, Some(Version::new(2, 5, 0)));
    }

    #[test]
    fn optional_symbols_are_gated_on_the_version() {
        let m = Loader::new("libm")
            .load::<MathApi, ()>(&libm(), at((2, 5, 0)))
            .unwrap();
        assert!(m.table.sqrt.is_some(), "2.5 has what 2.0 introduced");
        assert!(m.table.cbrt.is_none(), "2.5 lacks what 9.0 introduced");
        assert_eq!(m.gated_off, ["cbrt"]);
        assert!(m.at_least(Version::new(2, 5, 0)) && !m.at_least(Version::new(2, 6, 0)));

        let m = Loader::new("libm")
            .load::<MathApi, ()>(&libm(), at((9, 1, 0)))
            .unwrap();
        assert!(m.table.sqrt.is_some() && m.table.cbrt.is_some());
        assert!(m.gated_off.is_empty());

        // An unknown version turns every gated symbol off, and no feature gate passes.
        let m = Loader::new("libm")
            .load::<MathApi, ()>(&libm(), |_| Ok(Probe::version(None)))
            .unwrap();
        assert!(m.table.sqrt.is_none() && m.table.cbrt.is_none());
        assert!(m.table.exp2.is_some(), "an ungated symbol stays");
        assert_eq!(m.gated_off, ["sqrt", "cbrt"]);
        assert!(!m.at_least(Version::new(0, 0, 0)));
    }

    #[test]
    fn a_library_older_than_the_minimum_is_refused() {
        let e = Loader::new("libm")
            .min_version(Version::new(3, 0, 0))
            .load::<MathApi, ()>(&libm(), at((2, 5, 0)))
            .unwrap_err();
        assert_eq!(
            e.tried,
            [Attempt::new(
                LIBM,
                "libm 2.5.0 is older than the minimum 3.0.0 xthunk supports"
            )]
        );
        assert!(
            Loader::new("libm")
                .min_version(Version::new(3, 0, 0))
                .load::<MathApi, ()>(&libm(), at((3, 0, 0)))
                .is_ok()
        );
        // Nothing to compare: not refused.
        assert!(
            Loader::new("libm")
                .min_version(Version::new(3, 0, 0))
                .load::<MathApi, ()>(&libm(), |_| Ok(Probe::version(None)))
                .is_ok()
        );
    }

    #[test]
    fn a_missing_required_symbol_refuses_the_library_naming_every_missing_one() {
        let e = Loader::new("not-math")
            .load::<NotMath, ()>(&libm(), |_| Ok(Probe::version(None)))
            .unwrap_err();
        assert_eq!(
            e.tried,
            [Attempt::new(
                LIBM,
                "lacks required symbols xthunk_missing_a, xthunk_missing_b"
            )]
        );
    }

    #[test]
    fn the_error_names_every_path_tried() {
        let dir = tempfile::tempdir().unwrap();
        let not_elf = dir.path().join("libnot-elf.so");
        std::fs::write(&not_elf, b"not a shared object").unwrap();
        let absent = dir.path().join("no-such-folder").join("libx.so");
        let bare = PathBuf::from("libxthunk-surely-absent.so.7");
        let cands = vec![
            absent.clone(),
            not_elf.clone(),
            bare.clone(),
            libm()[0].clone(),
        ];
        let e = Loader::new("not-math")
            .load::<NotMath, ()>(&cands, |_| Ok(Probe::version(None)))
            .unwrap_err();
        assert_eq!(e.library, "not-math");
        let places: Vec<_> = e.tried.iter().map(|a| a.place.clone()).collect();
        assert_eq!(
            places,
            cands
                .iter()
                .map(|c| c.display().to_string())
                .collect::<Vec<_>>()
        );
        assert_eq!(e.tried[0].outcome, "no such file");
        assert!(
            e.tried[1].outcome.contains("libnot-elf.so") && e.tried[1].outcome != "no such file",
            "{:?}",
            e.tried[1]
        );
        assert!(
            e.tried[2].outcome.starts_with("dynamic loader: "),
            "{:?}",
            e.tried[2]
        );
        assert!(e.tried[3].outcome.starts_with("lacks required symbols"));
        let msg = e.to_string();
        assert!(
            msg.starts_with("no usable not-math found; tried: "),
            "{msg}"
        );
        for c in &cands {
            assert!(msg.contains(&c.display().to_string()), "{c:?} not in {msg}");
        }
        let none = Loader::new("x")
            .load::<NotMath, ()>(&[], |_| Ok(Probe::version(None)))
            .unwrap_err();
        assert_eq!(none.to_string(), "no usable x found: no folder to search");
    }

    #[test]
    fn the_probe_may_refuse_and_the_first_accepted_candidate_wins() {
        let dir = tempfile::tempdir().unwrap();
        let not_elf = dir.path().join("libm.so.6");
        std::fs::write(&not_elf, b"junk").unwrap();
        let mut calls = 0;
        let e = Loader::new("libm")
            .load::<MathApi, ()>(&libm(), |_| {
                calls += 1;
                Err("newer than the driver".into())
            })
            .unwrap_err();
        assert_eq!(calls, 1);
        assert_eq!(e.tried, [Attempt::new(LIBM, "newer than the driver")]);

        // The probe sees the bound table and hands back what it computed.
        let m = Loader::new("libm")
            .load(&[not_elf, libm()[0].clone()], |t: &MathApi| {
                // SAFETY: `sin` is `double sin(double)`.
                let zero = unsafe { (t.sin)(0.0) };
                Ok(Probe::with(None, zero))
            })
            .unwrap();
        assert_eq!(m.extra, 0.0);
    }

    #[test]
    fn a_table_binds_from_a_library_already_open() {
        let m = Loader::new("libm")
            .load::<MathApi, ()>(&libm(), |_| Ok(Probe::version(None)))
            .unwrap();
        let lib = m.table.library().clone();
        let again = Loader::new("libm")
            .bind::<MathApi, ()>(&lib, &m.path, at((9, 0, 0)))
            .unwrap();
        assert!(again.table.cbrt.is_some());
        assert_eq!(again.path, m.path);
        assert_eq!(again.table.anchor(), m.table.anchor());
        let e = Loader::new("not-math")
            .bind::<NotMath, ()>(&lib, &m.path, |_| Ok(Probe::version(None)))
            .err();
        assert_eq!(
            e.as_deref(),
            Some("lacks required symbols xthunk_missing_a, xthunk_missing_b")
        );
    }

    #[test]
    fn versions_order_print_and_parse() {
        assert!(Version::new(2, 9, 9) < Version::new(2, 10, 0));
        assert_eq!(Version::new(2, 18, 3).to_string(), "2.18.3");
        for (s, v) in [
            ("4.3.0.60300-65~22.04", Some((4, 3, 0))),
            ("2.45", Some((2, 45, 0))),
            ("7", Some((7, 0, 0))),
            (" 3.1.4\n", Some((3, 1, 4))),
            ("12.9rc1.5", Some((12, 9, 0))),
            ("unknown", None),
            ("", None),
        ] {
            assert_eq!(
                Version::parse_leading(s),
                v.map(|(a, b, c)| Version::new(a, b, c)),
                "{s:?}"
            );
        }
        let v2 = Some(Version::new(2, 0, 0));
        assert!(!gated_off(None, None));
        assert!(gated_off(v2, None));
        assert!(gated_off(v2, Some(Version::new(1, 9, 9))));
        assert!(!gated_off(v2, v2));
    }
}
