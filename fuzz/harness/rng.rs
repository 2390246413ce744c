//! A small seeded generator (SplitMix64): every case of a stable fuzz run is reproducible from
//! the run's seed, and no dependency is needed.

/// SplitMix64. Not for cryptography; fast, and good enough to drive mutations.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// A generator for case `index` of a run seeded with `seed` (independent streams).
    pub fn for_case(seed: u64, index: u64) -> Self {
        let mut r = Rng(seed ^ index.wrapping_mul(0xA076_1D64_78BD_642F));
        r.next_u64();
        r
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        (self.next_u64() % n as u64) as usize
    }

    /// A value in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi.saturating_sub(lo).saturating_add(1))
    }

    /// True with probability `num / den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.next_u64() % den.max(1) < num
    }

    pub fn byte(&mut self) -> u8 {
        self.next_u64() as u8
    }

    /// A random element (`None` for an empty slice).
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        if items.is_empty() {
            None
        } else {
            items.get(self.below(items.len()))
        }
    }

    /// An index into a slice of `n` items, or `None` when it is empty.
    pub fn index(&mut self, n: usize) -> Option<usize> {
        (n > 0).then(|| self.below(n))
    }

    /// A value of the small, boundary-heavy distribution mutators use for counts.
    pub fn small(&mut self) -> usize {
        match self.below(4) {
            0 => self.below(4),
            1 => self.below(17),
            2 => self.below(257),
            _ => self.below(4097),
        }
    }
}

/// Boundary values for 64-bit sizes, offsets and counts.
pub const INTERESTING_U64: &[u64] = &[
    0,
    1,
    2,
    3,
    4,
    7,
    8,
    15,
    16,
    31,
    32,
    63,
    64,
    127,
    128,
    255,
    256,
    1023,
    1024,
    1025,
    4095,
    4096,
    4097,
    65535,
    65536,
    (1 << 20) + 1,
    (1 << 31) - 1,
    1 << 31,
    (1 << 32) - 1,
    1 << 32,
    (1 << 32) + 1,
    1 << 48,
    1 << 50,
    1 << 53,
    (1 << 62) + 1,
    (1 << 63) - 1,
    1 << 63,
    (1 << 63) + 1,
    u64::MAX - 7,
    u64::MAX - 1,
    u64::MAX,
];

/// A mutated value of `v`: a boundary value, a neighbour, a doubling or halving, a bit flip, or
/// a random value.
pub fn mutate_u64(rng: &mut Rng, v: u64) -> u64 {
    match rng.below(8) {
        0 | 1 => *rng.pick(INTERESTING_U64).unwrap_or(&0),
        2 => v.wrapping_add(1 + rng.below(8) as u64),
        3 => v.wrapping_sub(1 + rng.below(8) as u64),
        4 => v.wrapping_mul(2),
        5 => v / 2,
        6 => v ^ (1 << rng.below(64)),
        _ => rng.next_u64() >> rng.below(64),
    }
}

/// [`mutate_u64`] for 32-bit fields.
pub fn mutate_u32(rng: &mut Rng, v: u32) -> u32 {
    if rng.chance(1, 4) {
        return *rng
            .pick(&[
                0,
                1,
                2,
                3,
                4,
                31,
                32,
                1023,
                1024,
                1025,
                65535,
                65536,
                u32::MAX / 2,
                u32::MAX,
            ])
            .unwrap_or(&0);
    }
    mutate_u64(rng, v as u64) as u32
}
