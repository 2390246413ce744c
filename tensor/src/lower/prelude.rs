//! The C prelude of generated kernels: StableHLO's exact semantics as portable-subset helpers
//! (integer arithmetic wrapping in unsigned, XLA's division and shift rules, saturating
//! float → integer conversion, IEEE maximum/minimum, total-order keys, f16/bf16 rounding).
//! It is prepended to the generated module's source, after the xthunk prelude the compilers
//! add (`docs/kernels.md`), so it uses only the subset.

/// The helpers every generated module starts with.
pub const PRELUDE: &str = r#"// xthunk-tensor prelude: StableHLO semantics for generated kernels.
template <typename T> struct xh_t;
// u: the unsigned type of the same width; s: the signed one; w: the unsigned type products and
// shifts are done in (at least `unsigned int`, so 8- and 16-bit operands, promoted to `int`,
// never overflow it).
template <> struct xh_t<signed char> { typedef unsigned char u; typedef signed char s; typedef unsigned int w; enum { bits = 8, is_signed = 1 }; };
template <> struct xh_t<unsigned char> { typedef unsigned char u; typedef signed char s; typedef unsigned int w; enum { bits = 8, is_signed = 0 }; };
template <> struct xh_t<short> { typedef unsigned short u; typedef short s; typedef unsigned int w; enum { bits = 16, is_signed = 1 }; };
template <> struct xh_t<unsigned short> { typedef unsigned short u; typedef short s; typedef unsigned int w; enum { bits = 16, is_signed = 0 }; };
template <> struct xh_t<int> { typedef unsigned int u; typedef int s; typedef unsigned int w; enum { bits = 32, is_signed = 1 }; };
template <> struct xh_t<unsigned int> { typedef unsigned int u; typedef int s; typedef unsigned int w; enum { bits = 32, is_signed = 0 }; };
template <> struct xh_t<long long> { typedef unsigned long long u; typedef long long s; typedef unsigned long long w; enum { bits = 64, is_signed = 1 }; };
template <> struct xh_t<unsigned long long> { typedef unsigned long long u; typedef long long s; typedef unsigned long long w; enum { bits = 64, is_signed = 0 }; };

// Integer arithmetic wraps: computed in the unsigned type of the same width.
template <typename T> __device__ inline T xh_add(T a, T b) { typedef typename xh_t<T>::u U; return (T)(U)((U)a + (U)b); }
template <typename T> __device__ inline T xh_sub(T a, T b) { typedef typename xh_t<T>::u U; return (T)(U)((U)a - (U)b); }
template <typename T> __device__ inline T xh_mul(T a, T b) { typedef typename xh_t<T>::u U; typedef typename xh_t<T>::w W; return (T)(U)((W)(U)a * (W)(U)b); }
template <typename T> __device__ inline T xh_neg(T a) { typedef typename xh_t<T>::u U; return (T)(U)((U)0 - (U)a); }
template <typename T> __device__ inline T xh_iabs(T a) { return a < (T)0 ? xh_neg(a) : a; }
template <typename T> __device__ inline T xh_smin() { typedef typename xh_t<T>::u U; return xh_t<T>::is_signed ? (T)(U)((U)1 << (xh_t<T>::bits - 1)) : (T)0; }
// XLA: x / 0 = -1 (all ones), INT_MIN / -1 = INT_MIN; x % 0 = x, INT_MIN % -1 = 0.
template <typename T> __device__ inline T xh_div(T a, T b) {
  if (b == (T)0) return (T)-1;
  if (xh_t<T>::is_signed && b == (T)-1 && a == xh_smin<T>()) return a;
  return (T)(a / b);
}
template <typename T> __device__ inline T xh_rem(T a, T b) {
  if (b == (T)0) return a;
  if (xh_t<T>::is_signed && b == (T)-1) return (T)0;
  return (T)(a % b);
}
// Shifts by the bit width or more (the amount read unsigned): 0, or the sign for arithmetic.
template <typename T> __device__ inline T xh_shl(T a, T b) {
  typedef typename xh_t<T>::u U;
  typedef typename xh_t<T>::w W;
  return (U)b >= (U)xh_t<T>::bits ? (T)0 : (T)(U)((W)(U)a << (U)b);
}
template <typename T> __device__ inline T xh_shrl(T a, T b) {
  typedef typename xh_t<T>::u U;
  return (U)b >= (U)xh_t<T>::bits ? (T)0 : (T)(U)((U)a >> (U)b);
}
template <typename T> __device__ inline T xh_shra(T a, T b) {
  typedef typename xh_t<T>::u U; typedef typename xh_t<T>::s S;
  const S s = (S)a;
  if ((U)b >= (U)xh_t<T>::bits) return s < (S)0 ? (T)-1 : (T)0;
  return (T)(S)(s >> (U)b);
}
// Integer power by squaring, wrapping over every bit of the exponent. A negative exponent
// (XLA's rule): 1 for base 1, ±1 for base -1 by the exponent's parity, else 0.
template <typename T> __device__ inline T xh_ipow(T a, T b) {
  typedef typename xh_t<T>::u U;
  if (xh_t<T>::is_signed && b < (T)0) {
    if (a == (T)1) return (T)1;
    if (xh_t<T>::is_signed && a == (T)-1) return ((U)b & (U)1) ? (T)-1 : (T)1;
    return (T)0;
  }
  typedef typename xh_t<T>::w W;
  U r = 1, x = (U)a, e = (U)b;
  while (e != (U)0) { if (e & (U)1) r = (U)((W)r * (W)x); x = (U)((W)x * (W)x); e = (U)(e >> 1); }
  return (T)r;
}
template <typename T> __device__ inline T xh_imax(T a, T b) { return a >= b ? a : b; }
template <typename T> __device__ inline T xh_imin(T a, T b) { return a <= b ? a : b; }
template <typename T> __device__ inline T xh_isign(T a) { return a > (T)0 ? (T)1 : (a < (T)0 ? (T)-1 : (T)0); }
__device__ inline int xh_clz(unsigned char x) { return xt_clz((unsigned int)x) - 24; }
__device__ inline int xh_clz(signed char x) { return xt_clz((unsigned int)(unsigned char)x) - 24; }
__device__ inline int xh_clz(int x) { return xt_clz((unsigned int)x); }
__device__ inline int xh_clz(long long x) { return xt_clzll((unsigned long long)x); }
__device__ inline int xh_clz(short x) { return xt_clz((unsigned int)(unsigned short)x) - 16; }
__device__ inline int xh_clz(unsigned short x) { return xt_clz((unsigned int)x) - 16; }
__device__ inline int xh_clz(unsigned int x) { return xt_clz(x); }
__device__ inline int xh_clz(unsigned long long x) { return xt_clzll(x); }
__device__ inline int xh_popc(unsigned char x) { return xt_popc((unsigned int)x); }
__device__ inline int xh_popc(signed char x) { return xt_popc((unsigned int)(unsigned char)x); }
__device__ inline int xh_popc(int x) { return xt_popc((unsigned int)x); }
__device__ inline int xh_popc(long long x) { return xt_popcll((unsigned long long)x); }
__device__ inline int xh_popc(short x) { return xt_popc((unsigned int)(unsigned short)x); }
__device__ inline int xh_popc(unsigned short x) { return xt_popc((unsigned int)x); }
__device__ inline int xh_popc(unsigned int x) { return xt_popc(x); }
__device__ inline int xh_popc(unsigned long long x) { return xt_popcll(x); }

// IEEE-754 maximum / minimum: a NaN operand gives NaN, and -0 < +0.
__device__ inline float xh_fmax(float a, float b) {
  if (isnan(a) || isnan(b)) return a + b;
  if (a == b) return signbit(a) ? b : a;
  return a > b ? a : b;
}
__device__ inline double xh_fmax(double a, double b) {
  if (isnan(a) || isnan(b)) return a + b;
  if (a == b) return signbit(a) ? b : a;
  return a > b ? a : b;
}
__device__ inline float xh_fmin(float a, float b) {
  if (isnan(a) || isnan(b)) return a + b;
  if (a == b) return signbit(a) ? a : b;
  return a < b ? a : b;
}
__device__ inline double xh_fmin(double a, double b) {
  if (isnan(a) || isnan(b)) return a + b;
  if (a == b) return signbit(a) ? a : b;
  return a < b ? a : b;
}
__device__ inline float xh_fsign(float x) { return (isnan(x) || x == 0.0f) ? x : (x < 0.0f ? -1.0f : 1.0f); }
__device__ inline double xh_fsign(double x) { return (isnan(x) || x == 0.0) ? x : (x < 0.0 ? -1.0 : 1.0); }
// exp and tanh of f32 values (f16 and bf16 are computed in f32). GPUs: the C library's. The
// CPU: computed in double without branches or calls, so the kernels' loops vectorize (the C
// library's are scalar calls), and rounded once to float: within 0.5 ulp but for the double
// rounding of values within about 1e-9 ulp of a midpoint.
#if defined(XT_CPU)
// e^y for y in [-745, 709] (NaN gives NaN): y = k ln2 + r, |r| <= ln2/2; e^r by its Taylor
// polynomial to r^10 (remainder below 1e-11 relative); 2^k built in the exponent bits.
__device__ inline double xh_cpu_exp(double y) {
  const double shifter = 6755399441055744.0;  // 1.5 * 2^52: adding it rounds to an integer
  double kd = y * 1.4426950408889634 + shifter;
  const unsigned long long kb = xt_f64_bits(kd);
  kd -= shifter;
  const double r = (y - kd * 0.693147180369123816490) - kd * 1.90821492927058770002e-10;
  double p = 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  // kb's low bits hold k (two's complement): (k + 1023) << 52 is 2^k's bits.
  return p * xt_bits_f64((kb + 1023ull) << 52);
}
__device__ inline float xh_expf(float x) {
  double y = (double)x;
  // Beyond these every float result is +inf or 0; NaN compares false and stays.
  y = y > 89.0 ? 89.0 : y;
  y = y < -104.0 ? -104.0 : y;
  return (float)xh_cpu_exp(y);
}
__device__ inline float xh_tanhf(float x) {
  double a = fabs((double)x);
  a = a > 9.1 ? 9.1 : a;  // tanh rounds to 1 from 9.01 on; NaN stays
  const double e = xh_cpu_exp(2.0 * a);
  const double big = (e - 1.0) / (e + 1.0);
  // Below 1e-3, e - 1 cancels: the series x - x^3/3 + 2x^5/15 (next term below 1e-21 x).
  const double a2 = a * a;
  const double small = a * (1.0 + a2 * (-1.0 / 3.0 + a2 * (2.0 / 15.0)));
  return (float)copysign(a < 1e-3 ? small : big, (double)x);
}
#else
__device__ inline float xh_expf(float x) { return expf(x); }
__device__ inline float xh_tanhf(float x) { return tanhf(x); }
#endif
__device__ inline float xh_logistic(float x) { return 1.0f / (1.0f + xh_expf(-x)); }
__device__ inline double xh_logistic(double x) { return 1.0 / (1.0 + exp(-x)); }
// Total order (IEEE totalOrder): the bits as a signed integer, negative values mirrored.
__device__ inline long long xh_tkey(float x) {
  const int b = (int)xt_f32_bits(x);
  return (long long)(b < 0 ? (b ^ 0x7fffffff) : b);
}
__device__ inline long long xh_tkey(double x) {
  const long long b = (long long)xt_f64_bits(x);
  return b < 0 ? (b ^ 0x7fffffffffffffffLL) : b;
}
// Float to integer: truncation, saturating at the type's bounds, NaN to 0 (as XLA:CPU).
template <typename T> __device__ inline T xh_f2i(double x, double lo, double hi) {
  if (isnan(x)) return (T)0;
  if (x <= lo) return (T)lo;
  if (x >= hi) return xh_t<T>::bits == 64 ? (T)(xh_t<T>::is_signed ? 9223372036854775807LL : -1LL) : (T)(hi - 1.0);
  return (T)x;
}
// f16 / bf16 values are computed in float and rounded to the type after every operation.
__device__ inline float xh_r16(float x) { return (float)xt_f16(x); }
__device__ inline float xh_rb16(float x) { return (float)xt_bf16(x); }
__device__ inline unsigned short xh_h_bits(float x) { return xt_f16(x).bits; }
__device__ inline unsigned short xh_b_bits(float x) { return xt_bf16(x).bits; }
// reduce_precision on the raw bits of an nbits-wide float with E exponent and M mantissa bits,
// to e and m bits (XLA's rounding): round to nearest even at the m-th mantissa bit (the
// exponent's low bit is the parity when m = 0; subnormals are rounded as their bits), then an
// exponent above the reduced format's largest becomes +-inf and one at or below its smallest
// normal's +-0. Callers return NaN unchanged.
__device__ inline unsigned long long xh_rp_bits(unsigned long long b, int nbits, int E, int M, int e, int m) {
  if (m < M) {
    const int shift = M - m;
    const unsigned long long last = 1ULL << shift;
    b = (b + ((last >> 1) - 1ULL + ((b & last) >> shift))) & ~(last - 1ULL);
  }
  if (e < E) {
    const unsigned long long sign = 1ULL << (nbits - 1);
    const unsigned long long expmask = ((1ULL << E) - 1ULL) << M;
    const unsigned long long diff = (1ULL << (E - 1)) - (1ULL << (e - 1));
    const unsigned long long maxe = diff + (1ULL << e) - 2ULL;
    const unsigned long long xe = b & expmask;
    if (xe > (maxe << M)) {
      b = (b & sign) | expmask;
    } else if (xe <= (diff << M)) {
      b = b & sign;
    }
  }
  return b;
}
__device__ inline float xh_rp_h(float x, int e, int m) {
  if (isnan(x)) return x;
  return xt_f16_to_f32((unsigned short)xh_rp_bits(xh_h_bits(x), 16, 5, 10, e, m));
}
__device__ inline float xh_rp_b(float x, int e, int m) {
  if (isnan(x)) return x;
  return xt_bf16_to_f32((unsigned short)xh_rp_bits(xh_b_bits(x), 16, 8, 7, e, m));
}
__device__ inline float xh_rp_f(float x, int e, int m) {
  if (isnan(x)) return x;
  return xt_bits_f32((unsigned int)xh_rp_bits(xt_f32_bits(x), 32, 8, 23, e, m));
}
__device__ inline double xh_rp_d(double x, int e, int m) {
  if (isnan(x)) return x;
  return xt_bits_f64(xh_rp_bits((unsigned long long)xt_f64_bits(x), 64, 11, 52, e, m));
}
// Threefry-2x32 (Salmon et al., SC 2011), 20 rounds, as XLA's rng_bit_generator uses it.
__device__ inline unsigned int xh_rotl32(unsigned int v, int d) { return (v << d) | (v >> (32 - d)); }
__device__ inline void xh_threefry(unsigned int* x0, unsigned int* x1, unsigned int k0, unsigned int k1) {
  const unsigned int ks[3] = {k0, k1, 0x1BD11BDAu ^ k0 ^ k1};
  const int rot[8] = {13, 15, 26, 6, 17, 29, 16, 24};
  unsigned int a = *x0 + ks[0], b = *x1 + ks[1];
  for (int i = 0; i < 5; ++i) {
    for (int r = 0; r < 4; ++r) {
      a += b;
      b = xh_rotl32(b, rot[(i % 2) * 4 + r]) ^ a;
    }
    a += ks[(i + 1) % 3];
    b += ks[(i + 2) % 3] + (unsigned int)(i + 1);
  }
  *x0 = a;
  *x1 = b;
}
// Philox-4x32 (same paper), 10 rounds, the key raised by the Weyl constants each round.
__device__ inline void xh_philox(unsigned int* x, unsigned int k0, unsigned int k1) {
  for (int r = 0; r < 10; ++r) {
    const unsigned long long p0 = (unsigned long long)x[0] * 0xD2511F53ull;
    const unsigned long long p1 = (unsigned long long)x[2] * 0xCD9E8D57ull;
    const unsigned int y0 = (unsigned int)(p1 >> 32) ^ x[1] ^ k0;
    const unsigned int y2 = (unsigned int)(p0 >> 32) ^ x[3] ^ k1;
    x[0] = y0;
    x[1] = (unsigned int)p1;
    x[2] = y2;
    x[3] = (unsigned int)p0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
}
// CHLO's special functions that no C library has, in double (float operands are widened, the
// result rounded once by the caller). Written here from their definitions.
// erf_inv: a closed-form start (Winitzki's approximation of the inverse) refined by Newton
// steps on erf(y) = x; for |x| > 0.5 the residual is taken as erfc(y) - (1 - x), both sides
// exact or nearly so, since erf(y) - x cancels there.
__device__ inline double xh_erfinv(double x) {
  if (isnan(x) || x < -1.0 || x > 1.0) return NAN;
  if (x == 1.0) return INFINITY;
  if (x == -1.0) return -INFINITY;
  if (x == 0.0) return x;
  const double ax = fabs(x);
  const double a = 0.147;
  const double l = log((1.0 - ax) * (1.0 + ax));
  const double t = 2.0 / (M_PI * a) + 0.5 * l;
  double y = sqrt(sqrt(t * t - l / a) - t);
  for (int i = 0; i < 4; ++i) {
    const double r = ax > 0.5 ? (1.0 - ax) - erfc(y) : erf(y) - ax;
    const double d = M_2_SQRTPI * exp(-y * y);
    if (!(d > 0.0)) break;
    y -= r / d;
  }
  return x < 0.0 ? -y : y;
}
__device__ inline float xh_erfinv(float x) { return (float)xh_erfinv((double)x); }
// digamma: the reflection psi(x) = psi(1 - x) - pi / tan(pi x) below 1/2, the recurrence
// psi(x) = psi(x + 1) - 1/x up to 10, then the asymptotic series (Bernoulli numbers).
// NaN at the poles (0, -1, -2, ...) and at -inf, as XLA.
__device__ inline double xh_digamma(double x) {
  if (isnan(x) || x == -INFINITY) return NAN;
  if (x <= 0.0 && floor(x) == x) return NAN;
  double r = 0.0;
  if (x < 0.5) {
    // tan has period 1 in x: x minus its nearest integer is exact (Sterbenz) and in
    // [-1/2, 1/2], so pi * f keeps its relative precision next to every pole.
    const double f = x - rint(x);
    r = -M_PI / tan(M_PI * f);
    x = 1.0 - x;
  }
  while (x < 10.0) { r -= 1.0 / x; x += 1.0; }
  const double z = 1.0 / (x * x);
  const double s = z * (-1.0 / 12 + z * (1.0 / 120 + z * (-1.0 / 252 + z * (1.0 / 240 + z * (-1.0 / 132 + z * (691.0 / 32760 + z * (-1.0 / 12)))))));
  return r + log(x) - 0.5 / x + s;
}
__device__ inline float xh_digamma(float x) { return (float)xh_digamma((double)x); }
// Hurwitz zeta(s, q) = sum over k >= 0 of (q + k)^-s for s > 1. For q > 0: the terms up to
// q + k >= 9 directly, the rest by the Euler-Maclaurin formula with the Bernoulli numbers
// B2..B24.
__device__ inline double xh_zeta_pos(double s, double q) {
  double sum = 0.0, a = q;
  while (a < 9.0) { sum += pow(a, -s); a += 1.0; }
  const double as = pow(a, -s);
  sum += a * as / (s - 1.0) + 0.5 * as;
  const double b2j[12] = {1.0 / 6, -1.0 / 30, 1.0 / 42, -1.0 / 30, 5.0 / 66, -691.0 / 2730, 7.0 / 6,
                          -3617.0 / 510, 43867.0 / 798, -174611.0 / 330, 854513.0 / 138,
                          -236364091.0 / 2730};
  double p = s * as / a;  // (s)_(2j-1) a^(-s-2j+1), j = 1
  double fact = 2.0;      // (2j)!
  for (int j = 1; j <= 12; ++j) {
    const double t = b2j[j - 1] / fact * p;
    sum += t;
    if (fabs(t) <= 1e-17 * fabs(sum)) break;
    p *= (s + 2.0 * j - 1.0) * (s + 2.0 * j) / (a * a);
    fact *= (2.0 * j + 1.0) * (2.0 * j + 2.0);
  }
  return sum;
}
// For q < 0 (an integer s only), with q = f - m (0 < f < 1, exact by Sterbenz for q <= -1/2),
// the negative terms (f - j)^-s, j = 1..m, sum to (-1)^s (zeta(s, 1 - f) - zeta(s, m + 1 - f)):
// three sums over positive arguments whatever m, and an odd s with f = 1/2 cancels exactly
// (zeta(9, -2.5) = zeta(9, 3.5)). For -1/2 < q < 0 the one negative term is taken directly.
// XLA's edges: NaN for s < 1, s = inf, q = +inf, and q < 0 with a non-integer s; inf for s = 1;
// at the poles q = 0, -1, -2, ... (and -inf) inf for an even s, where both sides tend to +inf,
// and NaN otherwise.
__device__ inline double xh_zeta(double s, double q) {
  if (s == 1.0) return INFINITY;
  if (isnan(s) || isnan(q)) return NAN;
  if (s < 1.0 || isinf(s) || q == INFINITY) return NAN;
  if (q > 0.0) return xh_zeta_pos(s, q);
  const bool even = fmod(s, 2.0) == 0.0;
  if (q == floor(q)) return even ? INFINITY : NAN;
  if (s != floor(s)) return NAN;
  if (q > -0.5) return pow(q, -s) + xh_zeta_pos(s, q + 1.0);
  const double m = -floor(q);
  const double f = q + m;
  const double sign = even ? 1.0 : -1.0;
  // The two large terms first: for an odd s and f near 1/2 they cancel, exactly at f = 1/2.
  return (xh_zeta_pos(s, f) + sign * xh_zeta_pos(s, 1.0 - f)) - sign * xh_zeta_pos(s, m + 1.0 - f);
}
__device__ inline float xh_zeta(float s, float q) { return (float)xh_zeta((double)s, (double)q); }
// polygamma(n, x) = (-1)^(n+1) n! zeta(n + 1, x) for an integer n >= 1, digamma for n = 0;
// NaN for another n. zeta's edges give XLA's: +inf at the poles for an odd n, NaN for an even
// one (the sign differs on the two sides); NaN at +inf.
__device__ inline double xh_polygamma(double n, double x) {
  if (isnan(n) || isnan(x) || n < 0.0 || n != floor(n)) return NAN;
  if (n == 0.0) return xh_digamma(x);
  double fact = 1.0;
  if (n <= 170.0) {
    for (int i = 2; i <= (int)n; ++i) fact *= (double)i;
  } else {
    fact = INFINITY;
  }
  const double sign = fmod(n, 2.0) == 0.0 ? -1.0 : 1.0;
  return sign * fact * xh_zeta(n + 1.0, x);
}
__device__ inline float xh_polygamma(float n, float x) { return (float)xh_polygamma((double)n, (double)x); }
// bessel_i1e = exp(-|x|) I1(x): I1's power series (all terms positive) up to |x| = 22, its
// asymptotic expansion beyond; odd in x.
__device__ inline double xh_i1e(double x) {
  if (isnan(x)) return x;
  const double ax = fabs(x);
  double v;
  if (ax == INFINITY) {
    v = 0.0;
  } else if (ax <= 22.0) {
    const double h = 0.5 * ax, q = h * h;
    double term = h, sum = h;
    for (int k = 1; k < 200 && term > sum * 1e-18; ++k) { term *= q / ((double)k * (double)(k + 1)); sum += term; }
    v = sum * exp(-ax);
  } else {
    double term = 1.0, sum = 1.0;
    for (int k = 1; k < 40; ++k) {
      const double m = 2.0 * k - 1.0;
      const double next = term * -(4.0 - m * m) / (8.0 * k * ax);
      if (fabs(next) >= fabs(term)) break;
      term = next;
      sum += term;
    }
    v = sum / sqrt(2.0 * M_PI * ax);
  }
  return x < 0.0 ? -v : v;
}
__device__ inline float xh_i1e(float x) { return (float)xh_i1e((double)x); }
// next_after in f16 / bf16 (values held in float): one step of the type's own bits toward y.
__device__ inline float xh_next16(float x, float y, bool bf) {
  if (isnan(x) || isnan(y)) return x + y;
  if (x == y) return y;
  unsigned short b;
  if (x == 0.0f) {
    b = (unsigned short)(y > 0.0f ? 1u : 0x8001u);
  } else {
    b = bf ? xt_bf16(x).bits : xt_f16(x).bits;
    b = (unsigned short)(((x < y) == (x > 0.0f)) ? b + 1u : b - 1u);
  }
  return bf ? xt_bf16_to_f32(b) : xt_f16_to_f32(b);
}
__device__ inline float xh_next_h(float x, float y) { return xh_next16(x, y, false); }
__device__ inline float xh_next_b(float x, float y) { return xh_next16(x, y, true); }
// Clamps a dynamic start index into [0, hi].
__device__ inline long long xh_clampi(long long v, long long hi) { return v < 0 ? 0 : (v > hi ? hi : v); }
// An index `v` known to be below `range`: `v` itself (the range is for the index arithmetic of
// the lowering, which reads it back from the text; see lower/index.rs).
__device__ inline long long xh_r(long long v, long long range) { (void)range; return v; }
// 8-bit floats (f8E4M3FN: M = 3, bias 7, finite only, S.1111.111 NaN; f8E5M2: M = 2, bias 15,
// IEEE-like): one byte of bits; values are computed in float and rounded once to the type.
// Decoding is exact; encoding rounds to nearest even once from a double (so f64 sources are
// not rounded twice), with the format's overflow: NaN for e4m3fn (no infinity), inf for e5m2.
__device__ inline float xh_pow2f(int k) { return xt_bits_f32((unsigned int)(127 + k) << 23); }
template <int M, int B, bool IEEE> __device__ inline float xh_f8_dec(unsigned char b) {
  const int E = 7 - M;
  const float s = (b & 0x80) ? -1.0f : 1.0f;
  const int e = (b >> M) & ((1 << E) - 1);
  const int m = b & ((1 << M) - 1);
  if (IEEE && e == (1 << E) - 1) return m == 0 ? s * xt_bits_f32(0x7f800000u) : xt_bits_f32(0x7fc00000u);
  if (!IEEE && (b & 0x7f) == 0x7f) return xt_bits_f32(0x7fc00000u);
  if (e == 0) return s * (float)m * xh_pow2f(1 - B - M);
  return s * (float)(m | (1 << M)) * xh_pow2f(e - B - M);
}
template <int M, int B, bool IEEE> __device__ inline unsigned char xh_f8_enc(double x) {
  const int E = 7 - M;
  const unsigned char sign = signbit(x) ? 0x80 : 0;
  if (isnan(x)) return (unsigned char)(sign | (IEEE ? ((((1 << E) - 1) << M) | (1 << (M - 1))) : 0x7f));
  const unsigned char ovf = (unsigned char)(sign | (IEEE ? (((1 << E) - 1) << M) : 0x7f));
  const double a = fabs(x);
  if (isinf(a)) return ovf;
  const int emin = 1 - B;
  int e2 = emin;
  if (a != 0.0) { int fe; frexp(a, &fe); e2 = fe - 1 > emin ? fe - 1 : emin; }
  const double q = ldexp(1.0, e2 - M);
  const double r = rint(a / q) * q;
  const double maxv = IEEE ? ldexp((double)((2 << M) - 1), (1 << E) - 2 - B - M)
                           : ldexp((double)((2 << M) - 2), (1 << E) - 1 - B - M);
  if (r > maxv) return ovf;
  unsigned int v = (unsigned int)(r / ldexp(1.0, emin - M));
  unsigned int bits = v;
  if (v >= (1u << M)) {
    unsigned int ex = 1;
    while (v >= (2u << M)) { v >>= 1; ++ex; }
    bits = (ex << M) | (v - (1u << M));
  }
  return (unsigned char)(sign | bits);
}
#define XH_F8_TYPE(N, M, B, IEEE)                                                               \
  struct N {                                                                                    \
    unsigned char bits;                                                                         \
    N() = default;                                                                              \
    __device__ N(float f) : bits(xh_f8_enc<M, B, IEEE>((double)f)) {}                           \
    __device__ N(double d) : bits(xh_f8_enc<M, B, IEEE>(d)) {}                                  \
    __device__ operator float() const { return xh_f8_dec<M, B, IEEE>(bits); }                   \
  };
XH_F8_TYPE(xt_f8e4m3fn, 3, 7, false)
XH_F8_TYPE(xt_f8e5m2, 2, 15, true)
#undef XH_F8_TYPE
__device__ inline float xt_f8e4m3fn_to_f32(unsigned char b) { return xh_f8_dec<3, 7, false>(b); }
__device__ inline float xt_f8e5m2_to_f32(unsigned char b) { return xh_f8_dec<2, 15, true>(b); }
__device__ inline float xh_r8e4(double x) { return xh_f8_dec<3, 7, false>(xh_f8_enc<3, 7, false>(x)); }
__device__ inline float xh_r8e5(double x) { return xh_f8_dec<2, 15, true>(xh_f8_enc<2, 15, true>(x)); }
// Complex numbers (c64, c128): two parts, real first (the buffers' layout too). Products and
// quotients follow XLA's elemental formulas: (ac - bd) + (ad + bc)i, division by Smith's
// scaling (the larger part of the divisor first), so no intermediate overflows needlessly.
template <typename F> struct xh_cx {
  F re, im;
  xh_cx() = default;
  __device__ xh_cx(F r, F i) : re(r), im(i) {}
  __device__ explicit xh_cx(int z) : re((F)z), im((F)0) {}
};
typedef xh_cx<float> xt_c64;
typedef xh_cx<double> xt_c128;
#define XH_CX(F, S)                                                                             \
  __device__ inline xh_cx<F> xh_cadd(xh_cx<F> a, xh_cx<F> b) { return xh_cx<F>(a.re + b.re, a.im + b.im); } \
  __device__ inline xh_cx<F> xh_csub(xh_cx<F> a, xh_cx<F> b) { return xh_cx<F>(a.re - b.re, a.im - b.im); } \
  __device__ inline xh_cx<F> xh_cmul(xh_cx<F> a, xh_cx<F> b) {                                   \
    return xh_cx<F>(a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re);                      \
  }                                                                                             \
  __device__ inline xh_cx<F> xh_cneg(xh_cx<F> a) { return xh_cx<F>(-a.re, -a.im); }              \
  __device__ inline bool xh_ceq(xh_cx<F> a, xh_cx<F> b) { return a.re == b.re && a.im == b.im; } \
  /* Smith's division; where it gives (NaN, NaN), XLA's corner cases: a zero divisor (inf     \
     with the sign of re times each part), an infinite dividend over a finite divisor (inf      \
     times the quotient of the dividend's infinities' signs), a finite dividend over an         \
     infinite divisor (zero times the same). */                                                 \
  __device__ inline xh_cx<F> xh_cdiv(xh_cx<F> a, xh_cx<F> b) {                                   \
    xh_cx<F> c;                                                                                 \
    if (fabs##S(b.re) < fabs##S(b.im)) {                                                        \
      const F r = b.re / b.im, d = b.im + r * b.re;                                             \
      c = xh_cx<F>((r * a.re + a.im) / d, (r * a.im - a.re) / d);                               \
    } else {                                                                                    \
      const F r = b.im / b.re, d = b.re + r * b.im;                                             \
      c = xh_cx<F>((r * a.im + a.re) / d, (a.im - r * a.re) / d);                               \
    }                                                                                           \
    if (!(isnan(c.re) && isnan(c.im))) return c;                                                \
    const F inf = (F)1 / (F)0, zero = (F)0, one = (F)1;                                         \
    const bool a_re_fin = !isnan(a.re) && !isinf(a.re), a_im_fin = !isnan(a.im) && !isinf(a.im); \
    const bool b_re_fin = !isnan(b.re) && !isinf(b.re), b_im_fin = !isnan(b.im) && !isinf(b.im); \
    if (b.re == zero && b.im == zero && (!(a.re != zero) || !(a.im != zero))) {                 \
      const F s = copysign##S(inf, a.re);                                                       \
      return xh_cx<F>(s * a.re, s * a.im);                                                      \
    }                                                                                           \
    if ((isinf(a.re) || isinf(a.im)) && b_re_fin && b_im_fin) {                                 \
      const F x = copysign##S(isinf(a.re) ? one : zero, a.re);                                  \
      const F y = copysign##S(isinf(a.im) ? one : zero, a.im);                                  \
      return xh_cx<F>(inf * (x * b.re + y * b.im), inf * (y * b.re - x * b.im));                \
    }                                                                                           \
    if ((isinf(b.re) || isinf(b.im)) && a_re_fin && a_im_fin) {                                 \
      const F x = copysign##S(isinf(b.re) ? one : zero, b.re);                                  \
      const F y = copysign##S(isinf(b.im) ? one : zero, b.im);                                  \
      return xh_cx<F>(zero * (a.re * x + a.im * y), zero * (a.im * x - a.re * y));              \
    }                                                                                           \
    return c;                                                                                   \
  }                                                                                             \
  /* |z|: NaN when a part is NaN (XLA's, also for an infinite other part). */                 \
  __device__ inline F xh_cabs(xh_cx<F> a) {                                                     \
    if (isnan(a.re) || isnan(a.im)) return a.re + a.im;                                         \
    return hypot##S(a.re, a.im);                                                                \
  }                                                                                             \
  /* exp: e^re (cos im + i sin im); a zero imaginary part gives +0 (as XLA). */                 \
  __device__ inline xh_cx<F> xh_cexp(xh_cx<F> a) {                                              \
    const F e = exp##S(a.re);                                                                   \
    if (a.im == (F)0) return xh_cx<F>(e, (F)0);                                                 \
    return xh_cx<F>(e * cos##S(a.im), e * sin##S(a.im));                                        \
  }                                                                                             \
  /* log: log|z| as log(max) + log1p((min/max)^2)/2, accurate next to |z| = 1; arg by atan2. */ \
  __device__ inline xh_cx<F> xh_clog(xh_cx<F> a) {                                              \
    const F x = fabs##S(a.re), y = fabs##S(a.im);                                               \
    const F mx = x > y ? x : y, mn = x > y ? y : x;                                             \
    F lr;                                                                                       \
    if (isnan(a.re) || isnan(a.im)) lr = a.re + a.im;                                           \
    else if (mx == (F)0 || isinf(mx)) lr = log##S(mx);                                          \
    else { const F q = mn / mx; lr = log##S(mx) + (F)0.5 * log1p##S(q * q); }                   \
    return xh_cx<F>(lr, atan2##S(a.im, a.re));                                                  \
  }                                                                                             \
  /* sqrt: the principal root; a NaN part gives NaN, an infinite imaginary part (inf, im),     \
     zero gives +0, and a -0 imaginary part counts as +0 (XLA's results). */                    \
  __device__ inline xh_cx<F> xh_csqrt(xh_cx<F> a) {                                             \
    const F nan = a.re + a.im;                                                                  \
    if (isnan(a.re) || isnan(a.im)) return xh_cx<F>(nan, nan);                                  \
    if (isinf(a.im)) return xh_cx<F>(fabs##S(a.im), a.im);                                      \
    if (a.re == (F)0 && a.im == (F)0) return xh_cx<F>((F)0, (F)0);                              \
    const F t = sqrt##S((fabs##S(a.re) + hypot##S(a.re, a.im)) * (F)0.5);                       \
    if (a.re >= (F)0) return xh_cx<F>(t, a.im / (t + t));                                       \
    return xh_cx<F>(fabs##S(a.im) / (t + t), a.im < (F)0 ? -t : t);                             \
  }                                                                                             \
  /* rsqrt: polar, |z|^-1/2 (cos(-t/2) + i sin(-t/2)) with t = atan2(im, re), and XLA's        \
     special cases: 0 gives (inf, NaN); an infinite real part, or an infinite imaginary part    \
     beside a NaN, gives (copysign(0, re), -copysign(0, im)). */                                \
  __device__ inline xh_cx<F> xh_crsqrt(xh_cx<F> a) {                                            \
    const F x = fabs##S(a.re), y = fabs##S(a.im);                                               \
    if (a.re == (F)0 && a.im == (F)0) return xh_cx<F>((F)1 / (F)0, (F)0 / (F)0 * (F)0);         \
    if (isinf(x) || (isinf(y) && isnan(a.re)))                                                  \
      return xh_cx<F>(copysign##S((F)0, a.re), -copysign##S((F)0, a.im));                       \
    const F mx = x > y ? x : y, mn = x > y ? y : x;                                             \
    const F q = mn / mx;                                                                        \
    F r = (F)1 / sqrt##S(mx) * ((F)1 / sqrt##S(sqrt##S((F)1 + q * q)));                         \
    if (isnan(r)) r = (F)1 / sqrt##S(mn);                                                       \
    const F h = (F)-0.5 * atan2##S(a.im, a.re);                                                 \
    return xh_cx<F>(r * cos##S(h), r * sin##S(h));                                              \
  }                                                                                             \
  /* The trigonometric and hyperbolic functions by their real-part formulas; expm1 with     \
     cos(im) - 1 as -2 sin^2(im/2) and log1p with log|1 + z| as log1p(re(2 + re) + im^2)/2,   \
     accurate for small z; power by XLA's formula (0^w = 1 for w = 0, 0 for re(w) > 0). */     \
  __device__ inline xh_cx<F> xh_ccos(xh_cx<F> a) {                                              \
    return xh_cx<F>(cos##S(a.re) * cosh##S(a.im), -(sin##S(a.re) * sinh##S(a.im)));            \
  }                                                                                             \
  __device__ inline xh_cx<F> xh_csin(xh_cx<F> a) {                                              \
    return xh_cx<F>(sin##S(a.re) * cosh##S(a.im), cos##S(a.re) * sinh##S(a.im));                \
  }                                                                                             \
  __device__ inline xh_cx<F> xh_ctan(xh_cx<F> a) { return xh_cdiv(xh_csin(a), xh_ccos(a)); }    \
  __device__ inline xh_cx<F> xh_ctanh(xh_cx<F> a) {                                             \
    /* tanh z = -i tan(iz) */                                                                   \
    const xh_cx<F> t = xh_ctan(xh_cx<F>(-a.im, a.re));                                          \
    return xh_cx<F>(t.im, -t.re);                                                               \
  }                                                                                             \
  __device__ inline xh_cx<F> xh_cexpm1(xh_cx<F> a) {                                            \
    const F s = sin##S(a.im * (F)0.5);                                                          \
    return xh_cx<F>(expm1##S(a.re) * cos##S(a.im) - (F)2 * s * s, exp##S(a.re) * sin##S(a.im)); \
  }                                                                                             \
  __device__ inline xh_cx<F> xh_clog1p(xh_cx<F> a) {                                            \
    const F x = a.re + (F)1;                                                                    \
    return xh_cx<F>((F)0.5 * log1p##S(a.re * ((F)2 + a.re) + a.im * a.im), atan2##S(a.im, x));  \
  }                                                                                             \
  __device__ inline xh_cx<F> xh_clogistic(xh_cx<F> a) {                                         \
    const xh_cx<F> e = xh_cexp(xh_cx<F>(-a.re, -a.im));                                         \
    return xh_cdiv(xh_cx<F>((F)1, (F)0), xh_cx<F>((F)1 + e.re, e.im));                          \
  }                                                                                             \
  __device__ inline xh_cx<F> xh_cpow(xh_cx<F> z, xh_cx<F> w) {                                  \
    const F r2 = z.re * z.re + z.im * z.im;                                                     \
    if (r2 == (F)0 && w.im == (F)0 && w.re >= (F)0)                                             \
      return xh_cx<F>(w.re == (F)0 ? (F)1 : (F)0, (F)0);                                        \
    const F t = atan2##S(z.im, z.re);                                                           \
    const F coeff = pow##S(r2, (F)0.5 * w.re) * exp##S(-w.im * t);                              \
    const F q = w.re * t + (F)0.5 * w.im * log##S(r2);                                          \
    return xh_cx<F>(coeff * cos##S(q), coeff * sin##S(q));                                      \
  }                                                                                             \
  /* sign: z / |z| (so an infinite part gives NaN), z itself for 0. */                          \
  __device__ inline xh_cx<F> xh_csign(xh_cx<F> a) {                                             \
    const F m = xh_cabs(a);                                                                     \
    if (m == (F)0) return a;                                                                    \
    return xh_cx<F>(a.re / m, a.im / m);                                                        \
  }
XH_CX(float, f)
XH_CX(double, )
#undef XH_CX
// In-place radix-2 FFT of m (a power of two) double complex values, e^{sign 2 pi i jk/m},
// unscaled; twiddles exact in their index. Bluestein's passes use it on rows of a temp.
__device__ inline void xh_fft_pow2(xt_c128* a, long long m, double sign) {
  int bits = 0;
  while ((1LL << bits) < m) ++bits;
  for (long long j = 0; j < m; ++j) {
    long long rj = 0;
    for (int b = 0; b < bits; ++b) rj |= ((j >> b) & 1LL) << (bits - 1 - b);
    if (rj > j) { const xt_c128 t = a[j]; a[j] = a[rj]; a[rj] = t; }
  }
  for (long long len = 2; len <= m; len <<= 1) {
    const long long half = len >> 1;
    for (long long i0 = 0; i0 < m; i0 += len) {
      for (long long j = 0; j < half; ++j) {
        const double ang = sign * 6.283185307179586 * (double)(j * (m / len)) / (double)m;
        const double wr = cos(ang), wi = sin(ang);
        const xt_c128 u = a[i0 + j], x = a[i0 + j + half];
        const double vr = x.re * wr - x.im * wi, vi = x.re * wi + x.im * wr;
        a[i0 + j] = xt_c128(u.re + vr, u.im + vi);
        a[i0 + j + half] = xt_c128(u.re - vr, u.im - vi);
      }
    }
  }
}
"#;
