//! The global execution lock: every operation that touches emulated memory holds it (kernels,
//! copies, gemms, collectives run one at a time). A leaf, so the modules that run work can take
//! it without naming the stream machinery.

use parking_lot::Mutex;

/// The global execution lock: every operation that touches emulated memory holds it.
pub static EXEC: Mutex<()> = Mutex::new(());
