//! `xthunk devices`: every backend of this build, probed, with its devices.

use super::error::CliResult;
use std::io::Write;
use xthunk::Runtime;

/// `12.5 GiB`, `512.0 MiB`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

pub fn devices(rt: &Runtime, out: &mut dyn Write) -> CliResult<()> {
    for status in rt.registry().probe_all() {
        match status.result {
            Ok(info) => {
                writeln!(out, "{}: available ({})", status.name, info.version)?;
                if info.devices.is_empty() {
                    writeln!(out, "  no devices")?;
                }
                for d in &info.devices {
                    let emulated = if d.emulated {
                        "  EMULATED (driver emulator, not a GPU)"
                    } else {
                        ""
                    };
                    writeln!(
                        out,
                        "  [{}] {}  vendor={} arch={} memory={} compute_units={}{emulated}",
                        d.ordinal,
                        d.name,
                        d.vendor,
                        d.arch,
                        human_bytes(d.total_memory),
                        d.compute_units
                    )?;
                }
            }
            Err(e) => writeln!(
                out,
                "{}: unavailable: {}",
                status.name,
                super::error::one_line(&e)
            )?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(80 << 30), "80.0 GiB");
    }
}
