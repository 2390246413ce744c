//! The custom-call lines of `xthunk inspect`: a call's target, buffers and attributes, and,
//! for every backend with a handler registered for it (built in or from `--plugin`), whether
//! the handler is captured into its command buffer or splits it.

use xthunk::core::custom_call::registry;
use xthunk::ir::{CustomCallThunk, ThunkKind};

/// One line for `c`; `in_command_buffer` when it sits in a command buffer's body.
pub fn describe(c: &CustomCallThunk, in_command_buffer: bool) -> String {
    let mut handlers = vec![];
    for (backend, target, traits, _) in registry().list() {
        if target != c.target {
            continue;
        }
        let how = match (in_command_buffer, traits.command_buffer_compatible) {
            (true, true) => "captured into the command buffer",
            (true, false) => "splits the command buffer",
            (false, true) => "command-buffer compatible",
            (false, false) => "not command-buffer compatible",
        };
        handlers.push(format!("{backend}: {how}"));
    }
    let handlers = if handlers.is_empty() {
        "no handler for this target is registered (plugins register handlers: --plugin PATH)"
            .to_string()
    } else {
        handlers.join("; ")
    };
    format!("{} [{handlers}]", c.describe())
}
