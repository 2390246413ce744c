//! NCCL/RCCL versions: decoding `ncclGetVersion`, the minimum xthunk accepts, and the version
//! each optional feature needs.

use std::fmt;
use xthunk_core::backend::dylib::Version;

/// A library version, `major.minor.patch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NcclVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl NcclVersion {
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        NcclVersion {
            major,
            minor,
            patch,
        }
    }

    /// Decodes the integer `ncclGetVersion` returns. Since 2.9 it is `major * 10000 + minor *
    /// 100 + patch` (23203 is 2.32.3); before, `major * 1000 + minor * 100 + patch` (2804 is
    /// 2.8.4): the header's `NCCL_VERSION(X, Y, Z)` picks the old form when `X <= 2 && Y <= 8`.
    /// `None` for a code that is neither (zero, negative, or an old form with a minor over 8).
    pub const fn from_code(code: i32) -> Option<Self> {
        if code <= 0 {
            return None;
        }
        let c = code as u32;
        let v = if c >= 10_000 {
            NcclVersion::new(c / 10_000, (c / 100) % 100, c % 100)
        } else {
            NcclVersion::new(c / 1000, (c / 100) % 10, c % 100)
        };
        // A code must round-trip: the old form exists only for versions up to 2.8.
        if v.code() == c && v.major > 0 {
            Some(v)
        } else {
            None
        }
    }

    /// The same version as core's [`Version`], which the symbol table's gates compare.
    pub const fn to_version(self) -> Version {
        Version::new(self.major, self.minor, self.patch)
    }

    /// The integer the header's `NCCL_VERSION(major, minor, patch)` gives.
    pub const fn code(self) -> u32 {
        if self.major <= 2 && self.minor <= 8 {
            self.major * 1000 + self.minor * 100 + self.patch
        } else {
            self.major * 10_000 + self.minor * 100 + self.patch
        }
    }
}

impl fmt::Display for NcclVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The oldest library xthunk uses: 2.12 (NCCL 2.12, March 2022; RCCL 2.12 in ROCm 5.3). Every
/// required symbol is older (point-to-point `ncclSend`/`ncclRecv` came in 2.7, bf16 in 2.10,
/// `ncclCommGetAsyncError`/`ncclCommAbort` in 2.4), and 2.12 is the first release whose
/// asynchronous error reporting and abort behave well enough for the hang watchdog. Older
/// libraries are refused at load with a clear reason.
pub const MIN_VERSION: NcclVersion = NcclVersion::new(2, 12, 0);

/// `ncclBfloat16`.
pub const BF16_SINCE: NcclVersion = NcclVersion::new(2, 10, 0);
/// `ncclGetLastError`.
pub const LAST_ERROR_SINCE: NcclVersion = NcclVersion::new(2, 13, 0);
/// `ncclCommInitRankConfig`, `ncclConfig_t` (`blocking`), `ncclCommFinalize`.
pub const CONFIG_SINCE: NcclVersion = NcclVersion::new(2, 14, 0);
/// `ncclCommSplit`.
pub const SPLIT_SINCE: NcclVersion = NcclVersion::new(2, 18, 0);
/// `ncclMemAlloc` / `ncclMemFree` and user-buffer registration (`ncclCommRegister` /
/// `ncclCommDeregister`): NCCL 2.19.
pub const MEM_ALLOC_SINCE: NcclVersion = NcclVersion::new(2, 19, 0);
/// Window registration (`ncclCommWindowRegister` / `ncclCommWindowDeregister`,
/// `NCCL_WIN_COLL_SYMMETRIC`, 4096-byte alignment): NCCL 2.27.
pub const WINDOW_SINCE: NcclVersion = NcclVersion::new(2, 27, 0);
/// `ncclCommInitRankScalable` (several unique ids, one per root): NCCL 2.23.
pub const SCALABLE_SINCE: NcclVersion = NcclVersion::new(2, 23, 0);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_both_encodings() {
        assert_eq!(
            NcclVersion::from_code(23203),
            Some(NcclVersion::new(2, 32, 3))
        );
        assert_eq!(
            NcclVersion::from_code(21803),
            Some(NcclVersion::new(2, 18, 3))
        );
        assert_eq!(
            NcclVersion::from_code(20900),
            Some(NcclVersion::new(2, 9, 0))
        );
        assert_eq!(
            NcclVersion::from_code(2804),
            Some(NcclVersion::new(2, 8, 4))
        );
        assert_eq!(
            NcclVersion::from_code(2708),
            Some(NcclVersion::new(2, 7, 8))
        );
        assert_eq!(
            NcclVersion::from_code(30001),
            Some(NcclVersion::new(3, 0, 1))
        );
        assert_eq!(NcclVersion::from_code(0), None);
        assert_eq!(NcclVersion::from_code(-5), None);
        assert_eq!(NcclVersion::from_code(2950), None);
    }

    #[test]
    fn encodes_like_the_header_macro() {
        for code in [2804, 2708, 20900, 21400, 23203] {
            let v = NcclVersion::from_code(code);
            assert_eq!(v.map(NcclVersion::code), Some(code as u32));
        }
        assert_eq!(NcclVersion::new(2, 32, 3).to_string(), "2.32.3");
        assert!(MIN_VERSION < CONFIG_SINCE && CONFIG_SINCE < SPLIT_SINCE);
        assert!(NcclVersion::new(2, 9, 9) < NcclVersion::new(2, 10, 0));
        assert_eq!(SPLIT_SINCE.to_version(), Version::new(2, 18, 0));
        assert_eq!(
            NcclVersion::new(2, 32, 3).to_version().to_string(),
            "2.32.3"
        );
    }
}
