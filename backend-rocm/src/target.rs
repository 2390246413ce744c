//! Device-code target names: a gfx processor with optional `:feature±` suffixes, as
//! `gcnArchName` and `--target` give them (`gfx90a`, `gfx90a:sramecc+:xnack-`), parsed
//! strictly (nothing that could be read as another compiler option), and which code runs on
//! which device.

use crate::result::CompileError;

/// A gfx target, e.g. `gfx90a` or `gfx90a:sramecc+:xnack-`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    /// The whole name as given.
    pub full: String,
    /// The processor, without features: `gfx90a`.
    pub base: String,
    /// `(feature, enabled)`: `("sramecc", true), ("xnack", false)`.
    pub features: Vec<(String, bool)>,
}

impl Target {
    /// Whether `s` is written as an AMD target (`gfx…`), well-formed or not
    /// ([`Target::parse`] says whether it is): how a tool tells AMD targets from others.
    pub fn claims(s: &str) -> bool {
        s.starts_with("gfx")
    }

    /// Parses and validates a target name (a `gcnArchName` or a `--target` argument).
    pub fn parse(s: &str) -> Result<Target, CompileError> {
        let invalid = |reason: &str| CompileError::InvalidTarget {
            target: s.to_string(),
            reason: reason.to_string(),
        };
        if s.len() > 64 {
            return Err(invalid("longer than 64 characters"));
        }
        let mut parts = s.split(':');
        let base = parts.next().unwrap_or_default();
        let Some(proc_id) = base.strip_prefix("gfx") else {
            return Err(invalid("an AMD GPU target starts with `gfx` (e.g. gfx90a)"));
        };
        if proc_id.is_empty()
            || !proc_id
                .bytes()
                .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase() || b == b'-')
            || !proc_id.as_bytes()[0].is_ascii_digit()
        {
            return Err(invalid(
                "the processor must be `gfx` followed by digits and lowercase letters (e.g. gfx90a, gfx1030, gfx9-generic)",
            ));
        }
        let mut features = Vec::new();
        for f in parts {
            let (name, on) = if let Some(n) = f.strip_suffix('+') {
                (n, true)
            } else if let Some(n) = f.strip_suffix('-') {
                (n, false)
            } else {
                return Err(invalid("a feature is `name+` or `name-` (e.g. xnack-)"));
            };
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_lowercase()) {
                return Err(invalid(
                    "a feature name is lowercase letters (xnack, sramecc)",
                ));
            }
            if features.iter().any(|(n, _): &(String, bool)| n == name) {
                return Err(invalid("a feature is given twice"));
            }
            features.push((name.to_string(), on));
        }
        Ok(Target {
            full: s.to_string(),
            base: base.to_string(),
            features,
        })
    }

    /// True when code built for `self` runs on a device whose `gcnArchName` is `device`:
    /// the same processor, and no feature set one way here and the other way there (a feature
    /// left unspecified on either side matches both settings).
    pub fn runs_on(&self, device: &Target) -> bool {
        self.base == device.base
            && self
                .features
                .iter()
                .all(|(n, on)| device.features.iter().all(|(dn, don)| dn != n || don == on))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_strictly() {
        let t = Target::parse("gfx90a:sramecc+:xnack-");
        let Ok(t) = t else {
            unreachable!("{t:?}");
        };
        assert_eq!(t.base, "gfx90a");
        assert_eq!(
            t.features,
            vec![("sramecc".to_string(), true), ("xnack".to_string(), false)]
        );
        for ok in [
            "gfx90a",
            "gfx1030",
            "gfx942:xnack+",
            "gfx9-generic",
            "gfx10-3-generic",
        ] {
            assert!(Target::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "sm_90",
            "gfx",
            "gfxZZ",
            "gfx90a:xnack",
            "gfx90a --save-temps",
            "gfx90a:xnack+:xnack-",
            "gfx90a;rm",
            "GFX90A",
        ] {
            assert!(
                matches!(Target::parse(bad), Err(CompileError::InvalidTarget { .. })),
                "{bad}"
            );
        }
        assert!(Target::claims("gfx90a") && Target::claims("gfxZZ"));
        assert!(!Target::claims("sm_90") && !Target::claims("GFX90A"));
    }

    #[test]
    fn images_match_devices_by_base_target() {
        let p = |s: &str| Target::parse(s).unwrap_or_else(|e| unreachable!("{e}"));
        let dev = p("gfx90a:sramecc+:xnack-");
        assert!(p("gfx90a").runs_on(&dev));
        assert!(p("gfx90a:xnack-").runs_on(&dev));
        assert!(p("gfx90a:sramecc+:xnack-").runs_on(&dev));
        assert!(!p("gfx90a:xnack+").runs_on(&dev));
        assert!(!p("gfx908").runs_on(&dev));
        assert!(p("gfx1030").runs_on(&p("gfx1030")));
        assert!(p("gfx90a:xnack+").runs_on(&p("gfx90a")));
    }
}
