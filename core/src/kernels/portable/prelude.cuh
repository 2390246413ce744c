// xthunk portable prelude. Header-free: it compiles with NVRTC (CUDA) or hipRTC (HIP) alone,
// with no vendor header included. Every name it defines starts with `xt_` or `XT_`.

#if defined(XT_CPU)
// The host's C++ compiler: prelude_cpu.h (prepended) defined XT_CPU and the GPU built-ins;
// the HIP branches below (__builtin_bit_cast, _Float16) serve the CPU too.
#elif defined(__HIP__) || defined(__HIPCC_RTC__)
#define XT_HIP 1
#elif defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define XT_CUDA 1
#else
#error "the xthunk prelude needs NVRTC (CUDA) or hipRTC (HIP)"
#endif

// The most threads a block may have on every supported GPU (CUDA and HIP): the size of the
// shared scratch of the row kernels' block reductions.
#define XT_MAX_BLOCK 1024

// ---- bit casts -------------------------------------------------------------------------
#if defined(XT_CUDA)
__device__ inline float xt_bits_f32(unsigned int u) { return __uint_as_float(u); }
__device__ inline unsigned int xt_f32_bits(float f) { return __float_as_uint(f); }
__device__ inline double xt_bits_f64(unsigned long long u) { return __longlong_as_double((long long)u); }
__device__ inline unsigned long long xt_f64_bits(double d) { return (unsigned long long)__double_as_longlong(d); }
#else
__device__ inline float xt_bits_f32(unsigned int u) { return __builtin_bit_cast(float, u); }
__device__ inline unsigned int xt_f32_bits(float f) { return __builtin_bit_cast(unsigned int, f); }
__device__ inline double xt_bits_f64(unsigned long long u) { return __builtin_bit_cast(double, u); }
__device__ inline unsigned long long xt_f64_bits(double d) { return __builtin_bit_cast(unsigned long long, d); }
#endif

#define XT_NEG_INF_F32 xt_bits_f32(0xff800000u)
#define XT_NEG_INF_F64 xt_bits_f64(0xfff0000000000000ull)

// ---- f16: IEEE binary16 stored as its raw bits in an `unsigned short` -------------------
#if defined(XT_CUDA)
__device__ inline float xt_f16_to_f32(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
// Round to nearest even.
__device__ inline unsigned short xt_f32_to_f16(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
#else
__device__ inline float xt_f16_to_f32(unsigned short h) { return (float)__builtin_bit_cast(_Float16, h); }
// Round to nearest even.
__device__ inline unsigned short xt_f32_to_f16(float f) { return __builtin_bit_cast(unsigned short, (_Float16)f); }
#endif

// ---- bf16: the upper half of an f32, stored as raw bits in an `unsigned short` ----------
__device__ inline float xt_bf16_to_f32(unsigned short h) { return xt_bits_f32(((unsigned int)h) << 16); }
// Round to nearest even by integer arithmetic; NaN stays a (quiet) NaN.
__device__ inline unsigned short xt_f32_to_bf16(float f) {
  unsigned int u = xt_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}

// ---- conversions from f64 with a single rounding ----------------------------------------
// `v` rounded to f32 with round-to-odd (truncate toward zero; if inexact, set the lowest
// mantissa bit). Rounding that on to f16/bf16 (nearest even) equals rounding `v` once.
// Finite values beyond f32's range give +-FLT_MAX (which rounds on to +-inf).
__device__ inline float xt_f64_to_f32_odd(double v) {
  float f = (float)v;
  if (v != v || (double)f == v) return f;
  unsigned int b = xt_f32_bits(f);
  if ((b & 0x7fffffffu) == 0x7f800000u) return xt_bits_f32((b & 0x80000000u) | 0x7f7fffffu);
  double af = (double)f < 0.0 ? -(double)f : (double)f;
  double av = v < 0.0 ? -v : v;
  if (af > av) b -= 1u;
  return xt_bits_f32(b | 1u);
}
__device__ inline unsigned short xt_f64_to_f16(double v) { return xt_f32_to_f16(xt_f64_to_f32_odd(v)); }
__device__ inline unsigned short xt_f64_to_bf16(double v) { return xt_f32_to_bf16(xt_f64_to_f32_odd(v)); }
// Toward zero, saturating, NaN -> 0.
__device__ inline int xt_f64_to_i32(double v) {
  if (v != v) return 0;
  if (v >= 2147483647.0) return 2147483647;
  if (v <= -2147483648.0) return -2147483647 - 1;
  return (int)v;
}

// ---- arithmetic of the compute types ----------------------------------------------------
// Float max/min follow C fmax/fmin: when one operand is NaN, the other is returned.
__device__ inline float xt_max(float a, float b) { return fmaxf(a, b); }
__device__ inline float xt_min(float a, float b) { return fminf(a, b); }
__device__ inline double xt_max(double a, double b) { return fmax(a, b); }
__device__ inline double xt_min(double a, double b) { return fmin(a, b); }
#define XT_INT_MINMAX(T)                                                  \
  __device__ inline T xt_max(T a, T b) { return a > b ? a : b; }          \
  __device__ inline T xt_min(T a, T b) { return a < b ? a : b; }
XT_INT_MINMAX(signed char)
XT_INT_MINMAX(unsigned char)
XT_INT_MINMAX(int)
XT_INT_MINMAX(long long)
XT_INT_MINMAX(unsigned int)
XT_INT_MINMAX(unsigned long long)
#undef XT_INT_MINMAX

// tanh approximation of GELU, evaluated in this order (no fused multiply-add when compiled
// with contraction off).
__device__ inline float xt_gelu(float x) {
  return (0.5f * x) * (1.0f + tanhf(0.7978846f * (x + ((0.044715f * x) * x) * x)));
}
__device__ inline double xt_gelu(double x) {
  return (0.5 * x) * (1.0 + tanh(0.7978845608028654 * (x + ((0.044715 * x) * x) * x)));
}

// ---- launch geometry: any grid and block shape ------------------------------------------
__device__ inline unsigned int xt_block_threads() { return blockDim.x * blockDim.y * blockDim.z; }
__device__ inline unsigned int xt_thread_in_block() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}
__device__ inline long long xt_block_id() {
  return (long long)blockIdx.x +
         (long long)gridDim.x * ((long long)blockIdx.y + (long long)gridDim.y * (long long)blockIdx.z);
}
__device__ inline long long xt_num_blocks() {
  return (long long)gridDim.x * (long long)gridDim.y * (long long)gridDim.z;
}
// This thread's index in the whole grid, and the number of threads of the grid: the start and
// step of grid-stride loops.
__device__ inline long long xt_global_id() {
  return xt_block_id() * (long long)xt_block_threads() + (long long)xt_thread_in_block();
}
__device__ inline long long xt_global_threads() { return xt_num_blocks() * (long long)xt_block_threads(); }

// ---- block reductions -------------------------------------------------------------------
// Reduces one value per thread of the block with `op` through `sh` (shared memory with at
// least xt_block_threads() elements) and returns the result to every thread. Correct for any
// block size (no power of two needed) and any warp size: it relies on blockDim and
// __syncthreads only, never on lockstep warps. Every thread of the block must call it.
struct xt_op_add {
  template <typename T> __device__ T operator()(T a, T b) const { return a + b; }
};
struct xt_op_max {
  template <typename T> __device__ T operator()(T a, T b) const { return xt_max(a, b); }
};
template <typename T, typename Op>
__device__ inline T xt_block_reduce(T v, T* sh, Op op) {
  const unsigned int nt = xt_block_threads();
  const unsigned int t = xt_thread_in_block();
  sh[t] = v;
  __syncthreads();
  unsigned int p = 1u;
  while (p * 2u <= nt) p *= 2u;
  if (t < nt - p) sh[t] = op(sh[t], sh[t + p]);
  __syncthreads();
  for (unsigned int s = p / 2u; s > 0u; s /= 2u) {
    if (t < s) sh[t] = op(sh[t], sh[t + s]);
    __syncthreads();
  }
  T r = sh[0];
  __syncthreads();
  return r;
}

// A grid-stride loop over [0, n): correct for any grid and block shape.
#define XT_FOR(i, n) for (long long i = xt_global_id(), xt_step_##i = xt_global_threads(); i < (n); i += xt_step_##i)
