//! Which vendor API a context belongs to (CUDA or HIP), what each calls its devices and
//! their owner in messages, and how many devices each has. A leaf: `context`, `limits` and the
//! shims name it; it names nothing above it.

/// Which vendor API a context belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Api {
    Cuda,
    Hip,
}

impl Api {
    pub fn device_name(self) -> &'static str {
        match self {
            Api::Cuda => "xthunk emulated NVIDIA device",
            Api::Hip => "xthunk emulated AMD device",
        }
    }

    /// The name device `dev` reports: [`device_name`](Self::device_name), with the ordinal
    /// when there are several devices.
    pub fn device_label(self, dev: i32) -> String {
        if device_count() > 1 {
            format!("{} {dev}", self.device_name())
        } else {
            self.device_name().to_string()
        }
    }

    /// What owns streams, events and functions in the API's messages.
    pub fn owner(self) -> &'static str {
        match self {
            Api::Cuda => "context",
            Api::Hip => "device",
        }
    }
}

/// Number of devices of each API.
pub fn device_count() -> i32 {
    crate::config::get().devices as i32
}
