//! FNV-1a 64: the one fast, non-cryptographic hash of the project, for values that must be
//! the same on every platform, process and build (split colors, shared-memory names, output
//! fingerprints, source fingerprints). Anything that guards content against tampering or
//! collisions (the kernel disk cache) uses a cryptographic hash instead.

const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0000_0100_0000_01b3;

/// An incremental FNV-1a 64 hasher.
#[derive(Clone, Copy, Debug)]
pub struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Self::new()
    }
}

impl Fnv1a {
    pub const fn new() -> Self {
        Fnv1a(OFFSET)
    }
    /// Feeds `bytes`.
    pub fn bytes(mut self, bytes: &[u8]) -> Self {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(PRIME);
        }
        self
    }
    /// Feeds the little-endian bytes of `v`.
    pub fn u64(self, v: u64) -> Self {
        self.bytes(&v.to_le_bytes())
    }
    pub const fn finish(self) -> u64 {
        self.0
    }
}

/// FNV-1a 64 of `bytes`.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    Fnv1a::new().bytes(bytes).finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        // Published FNV-1a 64 test vectors.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn incremental_equals_whole() {
        let whole = fnv1a64(b"hello world");
        let parts = Fnv1a::new().bytes(b"hello ").bytes(b"world").finish();
        assert_eq!(whole, parts);
        assert_eq!(Fnv1a::new().u64(7).finish(), fnv1a64(&7u64.to_le_bytes()));
    }
}
