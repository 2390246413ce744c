//! Settings, from the environment when first needed, changeable at run time through
//! `xthunk_emu_set(key, value)` (same keys as the variables, without the `XTHUNK_EMU_`
//! prefix, lowercase or not).
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `XTHUNK_EMU_DEVICES` | 1 | emulated devices per API (CUDA and HIP each see this many) |
//! | `XTHUNK_EMU_STRICT` | 1 | lazy streams: queued work runs only when something waits for it |
//! | `XTHUNK_EMU_FAIL_ALLOC` | - | the Nth allocation (counted over all APIs, from 1) fails with out-of-memory |
//! | `XTHUNK_EMU_FAIL_LAUNCH` | - | the Nth kernel launch (from 1) fails with "out of resources" |
//! | `XTHUNK_EMU_MEMORY` | 16 GiB | memory of each device (bytes; suffixes K, M, G) |
//! | `XTHUNK_EMU_SM` | 90 | compute capability of the NVIDIA devices (`90` = 9.0) |
//! | `XTHUNK_EMU_GFX` | gfx90a | architecture of the AMD devices |
//! | `XTHUNK_EMU_QUIET` | 0 | do not print diagnostics on stderr |
//! | `XTHUNK_EMU_REPORT` | - | append every diagnostic to this file |
//! | `XTHUNK_EMU_LEAK_CHECK` | 1 | report allocations still live at context destruction and exit |
//! | `XTHUNK_EMU_NCCL_TIMEOUT` | 60 | seconds an NCCL rank waits for the others (at least 1) |
//! | `XTHUNK_EMU_MEMORY_POOLS` | 1 | the devices have stream-ordered memory pools (0: the attribute says no, the pool calls fail with `NOT_SUPPORTED`) |
//! | `XTHUNK_EMU_NCCL_MODE` | current | which NCCL/RCCL the library plays: `current` (NCCL 2.32.3: `ncclMemAlloc`, windows, user-buffer registration, scalable init), `old` (NCCL 2.18.6: none of those; their calls fail), `rccl-no-windows` (2.27.5, but `ncclCommWindowRegister` hands back an empty window, as some RCCL releases do) |

use parking_lot::RwLock;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Clone, Debug)]
pub struct Config {
    pub devices: usize,
    pub strict: bool,
    pub fail_alloc: Option<u64>,
    pub fail_launch: Option<u64>,
    pub memory: u64,
    pub sm: u32,
    pub gfx: String,
    pub quiet: bool,
    pub report: Option<String>,
    pub leak_check: bool,
    /// Seconds an NCCL rank waits for the others.
    pub nccl_timeout: u64,
    /// The devices have stream-ordered memory pools.
    pub memory_pools: bool,
    /// Which NCCL/RCCL the library plays.
    pub nccl_mode: NcclMode,
}

/// Which NCCL/RCCL the emulated library plays (`XTHUNK_EMU_NCCL_MODE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NcclMode {
    /// NCCL 2.32.3: everything.
    Current,
    /// NCCL 2.18.6: no `ncclMemAlloc`, registration, windows or scalable init (2.19+).
    Old,
    /// 2.27.5 whose window registration hands back an empty window (RCCL without windows).
    RcclNoWindows,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            devices: 1,
            strict: true,
            fail_alloc: None,
            fail_launch: None,
            memory: 16 << 30,
            sm: 90,
            gfx: "gfx90a".into(),
            quiet: false,
            report: None,
            leak_check: true,
            nccl_timeout: 60,
            memory_pools: true,
            nccl_mode: NcclMode::Current,
        }
    }
}

/// `16G`, `512M`, `4096`.
fn parse_size(v: &str) -> Option<u64> {
    let v = v.trim();
    let (num, shift) = match v.char_indices().last()? {
        (i, 'K' | 'k') => (&v[..i], 10),
        (i, 'M' | 'm') => (&v[..i], 20),
        (i, 'G' | 'g') => (&v[..i], 30),
        _ => (v, 0),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(1u64 << shift)
}

fn parse_bool(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" | "" => Some(false),
        _ => None,
    }
}

impl Config {
    /// Applies one setting; `Err` names what is wrong.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let key = key
            .trim()
            .to_ascii_uppercase()
            .trim_start_matches("XTHUNK_EMU_")
            .to_string();
        let bad = || format!("bad value `{value}` for XTHUNK_EMU_{key}");
        let opt_count = |v: &str| -> Result<Option<u64>, String> {
            if v.trim().is_empty() || v.trim() == "0" {
                Ok(None)
            } else {
                v.trim().parse::<u64>().map(Some).map_err(|_| bad())
            }
        };
        match key.as_str() {
            "DEVICES" => {
                let n: usize = value.trim().parse().map_err(|_| bad())?;
                if n > 64 {
                    return Err(bad());
                }
                self.devices = n;
            }
            "STRICT" => self.strict = parse_bool(value).ok_or_else(bad)?,
            "MEMORY_POOLS" => self.memory_pools = parse_bool(value).ok_or_else(bad)?,
            "NCCL_MODE" => {
                self.nccl_mode = match value.trim().to_ascii_lowercase().as_str() {
                    "" | "current" => NcclMode::Current,
                    "old" => NcclMode::Old,
                    "rccl-no-windows" => NcclMode::RcclNoWindows,
                    _ => return Err(bad()),
                }
            }
            "FAIL_ALLOC" => {
                self.fail_alloc = opt_count(value)?;
                ALLOC_COUNT.store(0, Ordering::SeqCst);
            }
            "FAIL_LAUNCH" => {
                self.fail_launch = opt_count(value)?;
                LAUNCH_COUNT.store(0, Ordering::SeqCst);
            }
            "MEMORY" => self.memory = parse_size(value).ok_or_else(bad)?,
            "SM" => {
                let sm: u32 = value.trim().parse().map_err(|_| bad())?;
                if !(10..=199).contains(&sm) {
                    return Err(bad());
                }
                self.sm = sm;
            }
            "GFX" => {
                if !value.starts_with("gfx") {
                    return Err(bad());
                }
                self.gfx = value.trim().to_string();
            }
            "QUIET" => self.quiet = parse_bool(value).ok_or_else(bad)?,
            "REPORT" => self.report = (!value.trim().is_empty()).then(|| value.trim().to_string()),
            "LEAK_CHECK" => self.leak_check = parse_bool(value).ok_or_else(bad)?,
            "NCCL_TIMEOUT" => {
                let s: u64 = value.trim().parse().map_err(|_| bad())?;
                self.nccl_timeout = s.clamp(1, 1 << 32);
            }
            _ => return Err(format!("unknown setting XTHUNK_EMU_{key}")),
        }
        Ok(())
    }

    fn from_env() -> Config {
        let mut c = Config::default();
        for key in [
            "DEVICES",
            "STRICT",
            "FAIL_ALLOC",
            "FAIL_LAUNCH",
            "MEMORY",
            "SM",
            "GFX",
            "QUIET",
            "REPORT",
            "LEAK_CHECK",
            "NCCL_TIMEOUT",
            "MEMORY_POOLS",
            "NCCL_MODE",
        ] {
            if let Ok(v) = std::env::var(format!("XTHUNK_EMU_{key}"))
                && let Err(e) = c.set(key, &v)
            {
                // Printed directly: diagnostics need the configuration being built.
                eprintln!("xthunk-emulator: ignoring the environment: {e}");
            }
        }
        c
    }
}

static CONFIG: RwLock<Option<Arc<Config>>> = RwLock::new(None);
static ALLOC_COUNT: AtomicU64 = AtomicU64::new(0);
static LAUNCH_COUNT: AtomicU64 = AtomicU64::new(0);

/// The current settings.
pub fn get() -> Arc<Config> {
    if let Some(c) = CONFIG.read().as_ref() {
        return c.clone();
    }
    let mut w = CONFIG.write();
    w.get_or_insert_with(|| Arc::new(Config::from_env()))
        .clone()
}

/// Changes one setting (see the module documentation).
pub fn set(key: &str, value: &str) -> Result<(), String> {
    let mut w = CONFIG.write();
    let mut c = match w.as_ref() {
        Some(c) => (**c).clone(),
        None => Config::from_env(),
    };
    c.set(key, value)?;
    *w = Some(Arc::new(c));
    Ok(())
}

/// Counts one allocation; true if this one must fail (injected out-of-memory).
pub fn allocation_fails() -> bool {
    let n = ALLOC_COUNT.fetch_add(1, Ordering::SeqCst) + 1;
    get().fail_alloc == Some(n)
}

/// Counts one launch; true if this one must fail (injected launch failure).
pub fn launch_fails() -> bool {
    let n = LAUNCH_COUNT.fetch_add(1, Ordering::SeqCst) + 1;
    get().fail_launch == Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_settings() {
        assert_eq!(parse_size("16G"), Some(16 << 30));
        assert_eq!(parse_size("512m"), Some(512 << 20));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("x"), None);
        let mut c = Config::default();
        assert!(c.set("xthunk_emu_devices", "3").is_ok());
        assert_eq!(c.devices, 3);
        assert!(c.set("STRICT", "0").is_ok());
        assert!(!c.strict);
        assert!(c.set("fail_alloc", "5").is_ok());
        assert_eq!(c.fail_alloc, Some(5));
        assert!(c.set("nope", "1").is_err());
        assert!(c.set("gfx", "sm_90").is_err());
    }
}
