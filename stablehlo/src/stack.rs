//! The reader and the importer recurse once per nesting level (regions, attributes, types,
//! calls), so their depth limits are what the stack can take. They run on a thread of their
//! own with [`STACK`] bytes of stack (reserved, not committed: untouched pages cost no
//! memory), whatever the caller's thread has, so that programs as deep as real ones get
//! (a hundred nested `while`/`case` levels) read the same from a main thread, a 2 MiB worker
//! or Python.

/// The stack of the reader's and the importer's thread.
pub const STACK: usize = 256 << 20;

/// Runs `f` on a thread with [`STACK`] bytes of stack; `Err` names why it could not run.
pub(crate) fn on_big_stack<T: Send>(what: &str, f: impl FnOnce() -> T + Send) -> Result<T, String> {
    std::thread::scope(|s| {
        let handle = std::thread::Builder::new()
            .name(format!("xthunk-{what}"))
            .stack_size(STACK)
            .spawn_scoped(s, f)
            .map_err(|e| {
                format!("could not start the {what} thread ({STACK} bytes of stack): {e}")
            })?;
        handle
            .join()
            .map_err(|_| format!("the {what} thread panicked (a bug: please report it)"))
    })
}
