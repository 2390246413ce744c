//! Device-code target names: `sm_XX` (a cubin for exactly that architecture) and
//! `compute_XX` (PTX for the driver's JIT), and what NVRTC is asked to produce for each.

use std::fmt;
use xthunk_core::Error;

/// What to compile for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// `sm_XX`: a cubin for exactly that architecture.
    Sm(u32),
    /// `compute_XX`: PTX for the driver's JIT, loadable on that architecture and newer.
    Compute(u32),
}

impl Target {
    /// Whether `s` is written as a CUDA target (`sm_…` or `compute_…`), well-formed or not
    /// ([`Target::parse`] says whether it is): how a tool tells CUDA targets from others.
    pub fn claims(s: &str) -> bool {
        s.starts_with("sm_") || s.starts_with("compute_")
    }

    /// Parses `sm_90`, `sm_90a`-style names are not accepted (`a` features are not portable);
    /// `compute_80`.
    pub fn parse(s: &str) -> Result<Target, Error> {
        let bad = || {
            Error::InvalidArgument(format!(
                "CUDA target `{s}`: expected sm_XX (a cubin) or compute_XX (PTX), e.g. sm_90"
            ))
        };
        let (kind, num) = if let Some(n) = s.strip_prefix("sm_") {
            (true, n)
        } else if let Some(n) = s.strip_prefix("compute_") {
            (false, n)
        } else {
            return Err(bad());
        };
        let n: u32 = num.parse().map_err(|_| bad())?;
        if !(10..=255).contains(&n) {
            return Err(bad());
        }
        Ok(if kind {
            Target::Sm(n)
        } else {
            Target::Compute(n)
        })
    }

    pub fn arch(&self) -> u32 {
        match *self {
            Target::Sm(n) | Target::Compute(n) => n,
        }
    }

    pub fn output(&self) -> Output {
        match self {
            Target::Sm(_) => Output::Cubin,
            Target::Compute(_) => Output::Ptx,
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Sm(n) => write!(f, "sm_{n}"),
            Target::Compute(n) => write!(f, "compute_{n}"),
        }
    }
}

/// What to take out of a compiled program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    Cubin,
    Ptx,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse() {
        assert_eq!(Target::parse("sm_90").ok(), Some(Target::Sm(90)));
        assert_eq!(Target::parse("compute_80").ok(), Some(Target::Compute(80)));
        for bad in ["sm90", "sm_", "gfx90a", "sm_90a", "sm_1000"] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Target::Sm(90).to_string(), "sm_90");
        for claimed in ["sm_90", "compute_80", "sm_", "sm_90a"] {
            assert!(Target::claims(claimed), "{claimed}");
        }
        for other in ["sm90", "gfx90a", ""] {
            assert!(!Target::claims(other), "{other}");
        }
    }
}
