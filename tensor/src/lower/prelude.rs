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
__device__ inline float xh_logistic(float x) { return 1.0f / (1.0f + expf(-x)); }
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
// Clamps a dynamic start index into [0, hi].
__device__ inline long long xh_clampi(long long v, long long hi) { return v < 0 ? 0 : (v > hi ? hi : v); }
"#;
