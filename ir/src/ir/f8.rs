//! The 8-bit float formats' bits and values: decoding is exact, encoding rounds to nearest
//! even once from the f64 value (no double rounding through f32) and handles overflow as each
//! format does (ml_dtypes and XLA): f8E4M3FN has no infinity, so anything that rounds past its
//! largest finite value (448), and ±inf, become NaN; f8E5M2 overflows to ±inf.

/// The layout of one 8-bit float format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct F8Format {
    /// Mantissa (fraction) bits.
    pub mantissa: u32,
    /// Exponent bias.
    pub bias: i32,
    /// True when the all-ones exponent encodes infinities and NaNs (IEEE-like, e5m2); false
    /// when only S.1111.111 is NaN and every other code is finite (e4m3fn).
    pub ieee: bool,
}

/// f8E4M3FN: 4 exponent bits (bias 7), 3 mantissa bits, finite only; largest 448.
pub const E4M3FN: F8Format = F8Format {
    mantissa: 3,
    bias: 7,
    ieee: false,
};

/// f8E5M2: 5 exponent bits (bias 15), 2 mantissa bits, with infinities; largest 57344.
pub const E5M2: F8Format = F8Format {
    mantissa: 2,
    bias: 15,
    ieee: true,
};

impl F8Format {
    fn exp_bits(self) -> u32 {
        7 - self.mantissa
    }

    /// The largest finite value's bits (positive).
    pub fn max_bits(self) -> u8 {
        if self.ieee {
            // Exponent all ones but one, mantissa all ones.
            (((1u32 << self.exp_bits()) - 2) << self.mantissa | ((1 << self.mantissa) - 1)) as u8
        } else {
            0x7e
        }
    }

    /// The canonical (positive, quiet) NaN.
    pub fn nan_bits(self) -> u8 {
        if self.ieee {
            // Exponent all ones, top mantissa bit set.
            (((1u32 << self.exp_bits()) - 1) << self.mantissa | (1 << (self.mantissa - 1))) as u8
        } else {
            0x7f
        }
    }

    /// The exact value of `bits`.
    pub fn to_f64(self, bits: u8) -> f64 {
        let sign = if bits & 0x80 != 0 { -1.0 } else { 1.0 };
        let e = u32::from(bits >> self.mantissa) & ((1 << self.exp_bits()) - 1);
        let m = u32::from(bits) & ((1 << self.mantissa) - 1);
        let all_ones = (1u32 << self.exp_bits()) - 1;
        if self.ieee && e == all_ones {
            return if m == 0 {
                sign * f64::INFINITY
            } else {
                f64::NAN
            };
        }
        if !self.ieee && bits & 0x7f == 0x7f {
            return f64::NAN;
        }
        let scale = 2f64.powi(1 - self.bias - self.mantissa as i32);
        if e == 0 {
            sign * f64::from(m) * scale
        } else {
            let full = f64::from(m | (1 << self.mantissa));
            sign * full * 2f64.powi(e as i32 - 1) * scale
        }
    }

    /// `x` rounded to nearest even, with this format's overflow (see the module).
    pub fn from_f64(self, x: f64) -> u8 {
        let sign: u8 = if x.is_sign_negative() { 0x80 } else { 0 };
        if x.is_nan() {
            return self.nan_bits() | sign;
        }
        let overflow = if self.ieee {
            // ±inf: exponent all ones, mantissa 0.
            sign | ((((1u32 << self.exp_bits()) - 1) << self.mantissa) as u8)
        } else {
            sign | 0x7f
        };
        let a = x.abs();
        if a.is_infinite() {
            return overflow;
        }
        // The quantum at a's binade (never finer than the subnormals').
        let emin = 1 - self.bias;
        let e = if a == 0.0 {
            emin
        } else {
            // floor(log2(a)) from the f64's exponent field (a is finite, nonzero; f64
            // subnormals are far below the f8 range and round to zero below).
            let raw = ((a.to_bits() >> 52) & 0x7ff) as i32;
            (raw - 1023).max(emin)
        };
        let q = 2f64.powi(e - self.mantissa as i32);
        // Exact: a / q is a power-of-two scaling, and round_ties_even is exact.
        let n = (a / q).round_ties_even();
        let r = n * q;
        let max = self.to_f64(self.max_bits());
        if r > max {
            return overflow;
        }
        // Encode r (a multiple of the subnormal quantum, at most max).
        let sub = 2f64.powi(emin - self.mantissa as i32);
        let units = (r / sub) as u32; // exact integer below 2^(mantissa + exponent range)
        let m_one = 1u32 << self.mantissa;
        let bits = if units < m_one {
            units
        } else {
            // Normal: find the exponent so that the mantissa with its hidden bit fits.
            let mut exp = 1u32;
            let mut v = units;
            while v >= 2 * m_one {
                v >>= 1;
                exp += 1;
            }
            (exp << self.mantissa) | (v - m_one)
        };
        sign | bits as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_finite_code_round_trips_and_specials_are_right() {
        for f in [E4M3FN, E5M2] {
            for b in 0..=255u8 {
                let v = f.to_f64(b);
                if v.is_nan() {
                    assert!(f.to_f64(f.from_f64(v)).is_nan(), "{f:?} {b:#x}");
                    continue;
                }
                let back = f.from_f64(v);
                // ±0 keep their sign.
                assert_eq!(back, b, "{f:?} {b:#x} = {v}");
            }
        }
        assert_eq!(E4M3FN.to_f64(0x7e), 448.0);
        assert_eq!(E5M2.to_f64(E5M2.max_bits()), 57344.0);
        assert_eq!(E4M3FN.to_f64(0x01), 2f64.powi(-9));
        assert_eq!(E5M2.to_f64(0x01), 2f64.powi(-16));
        assert_eq!(E5M2.to_f64(0x7c), f64::INFINITY);
        // Overflow: e4m3fn to NaN (464 ties to even 448; above it NaN), e5m2 to inf.
        assert_eq!(E4M3FN.from_f64(464.0), 0x7e);
        assert_eq!(E4M3FN.from_f64(464.1), 0x7f);
        assert_eq!(E4M3FN.from_f64(-1e9), 0xff);
        assert_eq!(E4M3FN.from_f64(f64::INFINITY), 0x7f);
        assert_eq!(E5M2.from_f64(61440.0), 0x7c);
        assert_eq!(E5M2.from_f64(61439.0), 0x7b);
        assert_eq!(E5M2.from_f64(f64::NEG_INFINITY), 0xfc);
        // Ties to even at the bottom, and underflow to signed zero.
        assert_eq!(E4M3FN.from_f64(2f64.powi(-10)), 0x00);
        assert_eq!(E4M3FN.from_f64(3.0 * 2f64.powi(-10)), 0x02);
        assert_eq!(E4M3FN.from_f64(-1e-30), 0x80);
    }
}
