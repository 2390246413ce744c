//! Diagnostics: every error the emulator detects is recorded here with the call that caused it,
//! printed on stderr as a line starting with `xthunk-emulator:` (unless `XTHUNK_EMU_QUIET` is
//! set), appended to the file named by `XTHUNK_EMU_REPORT` (if any), and kept for tests, which
//! take them with [`take`] (Rust) or `xthunk_emu_take_diagnostics` (C).

use parking_lot::Mutex;
use std::fmt;
use std::io::Write as _;

/// What kind of problem a diagnostic reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// An access that starts inside a live allocation and runs past its end (or starts just
    /// past it).
    OutOfBounds,
    /// An access to memory that was freed.
    UseAfterFree,
    /// A second free of the same allocation.
    DoubleFree,
    /// A free of something that is not the start of a live allocation (or with the wrong free
    /// function).
    InvalidFree,
    /// An access to an address that no allocation (live or recently freed) contains.
    NotDeviceMemory,
    /// A kernel buffer whose address is not aligned to its element type.
    Misaligned,
    /// A kernel access to device memory of another context (or device).
    ForeignMemory,
    /// Allocations (or other objects) still live when their context was destroyed or the
    /// process exited.
    Leak,
    /// A destroyed or foreign handle, or a handle of the wrong kind.
    InvalidHandle,
    /// A bad argument (sizes, flags, enum values, null pointers).
    InvalidValue,
    /// A call that is not allowed in the current state (no context, capture rules, …).
    InvalidState,
    /// A kernel the emulator cannot run, an image it cannot read, a feature it lacks.
    Unsupported,
    /// More memory requested than the emulated device has left.
    OutOfMemory,
    /// A failure injected on purpose (`XTHUNK_EMU_FAIL_*`): informational.
    Injected,
}

impl Kind {
    /// True for the memory-checker findings (the kinds `ci/with-emulator.sh` fails a run on).
    pub fn is_memory_error(self) -> bool {
        matches!(
            self,
            Kind::OutOfBounds
                | Kind::UseAfterFree
                | Kind::DoubleFree
                | Kind::InvalidFree
                | Kind::NotDeviceMemory
                | Kind::Misaligned
                | Kind::ForeignMemory
                | Kind::Leak
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::OutOfBounds => "out-of-bounds",
            Kind::UseAfterFree => "use-after-free",
            Kind::DoubleFree => "double-free",
            Kind::InvalidFree => "invalid-free",
            Kind::NotDeviceMemory => "not-device-memory",
            Kind::Misaligned => "misaligned",
            Kind::ForeignMemory => "foreign-memory",
            Kind::Leak => "leak",
            Kind::InvalidHandle => "invalid-handle",
            Kind::InvalidValue => "invalid-value",
            Kind::InvalidState => "invalid-state",
            Kind::Unsupported => "unsupported",
            Kind::OutOfMemory => "out-of-memory",
            Kind::Injected => "injected",
        }
    }
}

/// One recorded problem.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    pub kind: Kind,
    /// The API call that did it (`cuMemcpyAsync`, `hipFree`, `cuLaunchKernel(add_f32)`, …).
    pub call: String,
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} in {}: {}", self.kind.name(), self.call, self.message)
    }
}

/// At most this many diagnostics are kept for [`take`] (older ones are dropped; the count of
/// dropped ones is kept).
const KEEP: usize = 10_000;

struct Store {
    list: Vec<Diagnostic>,
    dropped: u64,
    total_memory_errors: u64,
}

static STORE: Mutex<Store> = Mutex::new(Store {
    list: Vec::new(),
    dropped: 0,
    total_memory_errors: 0,
});

/// Records a diagnostic (and prints / appends it as configured).
pub fn record(kind: Kind, call: impl Into<String>, message: impl Into<String>) {
    let d = Diagnostic {
        kind,
        call: call.into(),
        message: message.into(),
    };
    let line = format!("xthunk-emulator: {d}");
    let cfg = crate::config::get();
    if !cfg.quiet {
        // One write for the whole line: the host program's own stderr writes (another
        // standard library's lock) cannot land inside it.
        let _ = std::io::stderr()
            .lock()
            .write_all(format!("{line}\n").as_bytes());
    }
    if let Some(path) = &cfg.report
        && let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
    {
        let _ = writeln!(f, "{line}");
    }
    let mut s = STORE.lock();
    if kind.is_memory_error() {
        s.total_memory_errors += 1;
    }
    if s.list.len() >= KEEP {
        s.list.remove(0);
        s.dropped += 1;
    }
    s.list.push(d);
}

/// Takes (and clears) every diagnostic recorded so far.
pub fn take() -> Vec<Diagnostic> {
    std::mem::take(&mut STORE.lock().list)
}

/// Puts a taken diagnostic back (without printing it again).
pub fn restore(d: Diagnostic) {
    STORE.lock().list.push(d);
}

/// Memory-checker findings since the process started (never reset by [`take`]).
pub fn memory_error_count() -> u64 {
    STORE.lock().total_memory_errors
}
