//! [`CpuError`]: what can go wrong compiling, loading or running portable kernels on the CPU.

/// Errors of the CPU execution.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CpuError {
    #[error("{reason}")]
    Unavailable { reason: String },
    #[error("module `{module}`: `{compiler}` failed to compile the portable source:\n{log}")]
    Compile {
        module: String,
        compiler: String,
        log: String,
    },
    #[error("cannot load the CPU program: {0}")]
    Load(String),
    #[error("{0}")]
    Io(String),
    #[error("kernel `{kernel}` on the CPU: {message}")]
    Launch { kernel: String, message: String },
}
