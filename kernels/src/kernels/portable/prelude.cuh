// xthunk portable prelude (subset v2). Header-free: it compiles with NVRTC (CUDA) or hipRTC
// (HIP) alone, with no vendor header included. Every name it defines starts with `xt_` or
// `XT_`, except the C math constants (`M_PI`, `INFINITY`, ...), each defined only when absent.
// The user's contract is docs/kernels.md.

#if defined(XT_CPU)
// The host's C++ compiler: the CPU execution prepends its own prelude, which defines XT_CPU,
// the GPU built-ins and every v2 name of the warp, atomic and f16/bf16 sections below (those
// are skipped here); the sections written for HIP (`__builtin_bit_cast`, `_Float16`) serve the
// CPU too.
#elif defined(__HIP__) || defined(__HIPCC_RTC__)
#define XT_HIP 1
#elif defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define XT_CUDA 1
#else
#error "the xthunk prelude needs NVRTC (CUDA) or hipRTC (HIP), or the CPU prelude (XT_CPU)"
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
// XT_FOR_EACH(i, n): XT_FOR's iterations, for a kernel whose iterations are independent of
// each other and of which thread runs them. GPUs run it as XT_FOR; the CPU execution as
// contiguous runs that vectorize. XT_EACH_KERNEL(k) after a kernel whose body is one
// XT_FOR_EACH loop and nothing else lets the CPU launch it on a few one-thread blocks; on
// GPUs it says nothing.
// XT_BLOCK_PHASE(t) { ... } XT_BLOCK_SYNC(); — a block's work between barriers, written for
// thread t of the block, where thread t reads only shared memory written before the phase or
// by itself: on GPUs each thread runs its t once and XT_BLOCK_SYNC is __syncthreads(); the
// CPU execution runs every t of the phase in order on the block's first thread, with no
// barrier (no fiber switch), which computes the same values.
// The CPU's forms are prelude_cpu.h's XT_CPU_*; a unit defining XT_CPU_GPU_FORMS (the driver
// emulator's) runs the GPUs' forms on the CPU too.
#if defined(XT_CPU) && !defined(XT_CPU_GPU_FORMS)
#define XT_FOR_EACH(i, n) XT_CPU_FOR_EACH(i, n)
#define XT_EACH_KERNEL(k) XT_CPU_EACH_KERNEL(k)
#define XT_BLOCK_PHASE(t) XT_CPU_BLOCK_PHASE(t)
#define XT_BLOCK_SYNC() XT_CPU_BLOCK_SYNC()
#else
#define XT_FOR_EACH(i, n) XT_FOR(i, n)
#define XT_EACH_KERNEL(k)
#define XT_BLOCK_PHASE(t) \
  for (long long t = (long long)xt_thread_in_block(), xt_phase_##t = 0; xt_phase_##t < 1; ++xt_phase_##t)
#define XT_BLOCK_SYNC() __syncthreads()
#endif

// ---- constants (v2) ----------------------------------------------------------------------
#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif
#ifndef M_E
#define M_E 2.7182818284590452354
#endif
#ifndef M_SQRT2
#define M_SQRT2 1.41421356237309504880
#endif
#ifndef M_SQRT1_2
#define M_SQRT1_2 0.70710678118654752440
#endif
#ifndef M_2_SQRTPI
#define M_2_SQRTPI 1.12837916709551257390
#endif
#ifndef M_LN2
#define M_LN2 0.69314718055994530942
#endif
#ifndef M_LN10
#define M_LN10 2.30258509299404568402
#endif
#ifndef XT_PI_F
#define XT_PI_F 3.14159265358979323846f
#endif
#ifndef XT_E_F
#define XT_E_F 2.7182818284590452354f
#endif
#ifndef XT_SQRT2_F
#define XT_SQRT2_F 1.41421356237309504880f
#endif
#ifndef XT_SQRT1_2_F
#define XT_SQRT1_2_F 0.70710678118654752440f
#endif
#ifndef XT_2_SQRTPI_F
#define XT_2_SQRTPI_F 1.12837916709551257390f
#endif
#ifndef XT_LN2_F
#define XT_LN2_F 0.69314718055994530942f
#endif
#if defined(XT_CUDA)
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif
#else
#ifndef INFINITY
#define INFINITY __builtin_huge_valf()
#endif
#ifndef NAN
#define NAN __builtin_nanf("")
#endif
#endif
// Limits (the C headers' names; the CPU has them from <cfloat> and <climits>).
#ifndef FLT_MAX
#define FLT_MAX 3.40282346638528859812e+38F
#endif
#ifndef FLT_MIN
#define FLT_MIN 1.17549435082228750797e-38F
#endif
#ifndef FLT_EPSILON
#define FLT_EPSILON 1.1920928955078125e-07F
#endif
#ifndef DBL_MAX
#define DBL_MAX 1.79769313486231570815e+308
#endif
#ifndef DBL_MIN
#define DBL_MIN 2.22507385850720138309e-308
#endif
#ifndef DBL_EPSILON
#define DBL_EPSILON 2.22044604925031308085e-16
#endif
#ifndef INT_MAX
#define INT_MAX 2147483647
#endif
#ifndef INT_MIN
#define INT_MIN (-INT_MAX - 1)
#endif
#ifndef UINT_MAX
#define UINT_MAX 4294967295U
#endif
#ifndef LLONG_MAX
#define LLONG_MAX 9223372036854775807LL
#endif
#ifndef LLONG_MIN
#define LLONG_MIN (-LLONG_MAX - 1LL)
#endif
#ifndef ULLONG_MAX
#define ULLONG_MAX 18446744073709551615ULL
#endif
#define XT_INF_F32 xt_bits_f32(0x7f800000u)
#define XT_INF_F64 xt_bits_f64(0x7ff0000000000000ull)

struct xt_op_min {
  template <typename T> __device__ T operator()(T a, T b) const { return xt_min(a, b); }
};

// ---- bit counts (v2): the vendors' __popc/__clz on GPUs, the compiler's builtins on the CPU --
#if defined(XT_CUDA) || defined(XT_HIP)
__device__ inline int xt_popc(unsigned int x) { return __popc(x); }
__device__ inline int xt_popcll(unsigned long long x) { return __popcll(x); }
__device__ inline int xt_clz(unsigned int x) { return __clz((int)x); }
__device__ inline int xt_clzll(unsigned long long x) { return __clzll((long long)x); }
#else
__device__ inline int xt_popc(unsigned int x) { return __builtin_popcount(x); }
__device__ inline int xt_popcll(unsigned long long x) { return __builtin_popcountll(x); }
__device__ inline int xt_clz(unsigned int x) { return x == 0u ? 32 : __builtin_clz(x); }
__device__ inline int xt_clzll(unsigned long long x) { return x == 0ull ? 64 : __builtin_clzll(x); }
#endif

#if !defined(XT_CPU)
// ---- warps (v2; the CPU prelude has its own) ---------------------------------------------
// A warp is 32 lanes on NVIDIA and 64 on AMD (CDNA; 32 on RDNA in wave32 mode). Lanes are
// consecutive linear thread indices of the block (xt_thread_in_block()). Every lane of the
// warp that exists must reach a warp operation together (converged); the last warp of a
// block whose size is not a multiple of the warp size is partial, and the operations below
// involve only its existing lanes.
#if defined(XT_CUDA)
__device__ inline int xt_warp_size() { return 32; }
__device__ inline int xt_lane_id() {
  unsigned int l;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(l));
  return (int)l;
}
#define XT_LANES __activemask()
#define XT_SHFL_T(T)                                                                               \
  __device__ inline T xt_shfl(T v, int src, int width = 32) { return __shfl_sync(XT_LANES, v, src, width); } \
  __device__ inline T xt_shfl_up(T v, unsigned int d, int width = 32) { return __shfl_up_sync(XT_LANES, v, d, width); } \
  __device__ inline T xt_shfl_down(T v, unsigned int d, int width = 32) { return __shfl_down_sync(XT_LANES, v, d, width); } \
  __device__ inline T xt_shfl_xor(T v, int m, int width = 32) { return __shfl_xor_sync(XT_LANES, v, m, width); }
__device__ inline unsigned long long xt_ballot(int p) { return (unsigned long long)__ballot_sync(XT_LANES, p); }
__device__ inline int xt_any(int p) { return __any_sync(XT_LANES, p); }
__device__ inline int xt_all(int p) { return __all_sync(XT_LANES, p); }
#else
// The compiler's wavefront size of the target (64 on CDNA, 32 on RDNA in wave32 mode).
#if defined(__AMDGCN_WAVEFRONT_SIZE)
#define XT_HIP_WAVE __AMDGCN_WAVEFRONT_SIZE
#else
#define XT_HIP_WAVE warpSize
#endif
__device__ inline int xt_warp_size() { return XT_HIP_WAVE; }
__device__ inline int xt_lane_id() { return (int)__lane_id(); }
#define XT_SHFL_T(T)                                                                               \
  __device__ inline T xt_shfl(T v, int src, int width = XT_HIP_WAVE) { return __shfl(v, src, width); } \
  __device__ inline T xt_shfl_up(T v, unsigned int d, int width = XT_HIP_WAVE) { return __shfl_up(v, d, width); } \
  __device__ inline T xt_shfl_down(T v, unsigned int d, int width = XT_HIP_WAVE) { return __shfl_down(v, d, width); } \
  __device__ inline T xt_shfl_xor(T v, int m, int width = XT_HIP_WAVE) { return __shfl_xor(v, m, width); }
__device__ inline unsigned long long xt_ballot(int p) { return (unsigned long long)__ballot(p); }
__device__ inline int xt_any(int p) { return __any(p) ? 1 : 0; }
__device__ inline int xt_all(int p) { return __all(p) ? 1 : 0; }
#endif
XT_SHFL_T(int)
XT_SHFL_T(unsigned int)
XT_SHFL_T(long long)
XT_SHFL_T(unsigned long long)
XT_SHFL_T(float)
XT_SHFL_T(double)
#undef XT_SHFL_T

// The number of existing lanes of this thread's warp (the last warp of a block may be
// partial).
__device__ inline int xt_warp_lanes() {
  const int ws = xt_warp_size();
  const unsigned int t = xt_thread_in_block(), nt = xt_block_threads();
  const unsigned int first = t - t % (unsigned int)ws;
  const unsigned int left = nt - first;
  return left < (unsigned int)ws ? (int)left : ws;
}

// Reduces over the existing lanes of the warp; every lane gets the result. The lanes are
// combined in a fixed tree (lane order), so the result is the same in every lane.
template <typename T, typename Op>
__device__ inline T xt_warp_reduce(T v, Op op) {
  const int n = xt_warp_lanes();
  const int lane = (int)(xt_thread_in_block() % (unsigned int)xt_warp_size());
  for (int off = xt_warp_size() / 2; off > 0; off /= 2) {
    const T o = xt_shfl_down(v, (unsigned int)off);
    if (lane + off < n) v = op(v, o);
  }
  return xt_shfl(v, 0);
}
template <typename T> __device__ inline T xt_warp_reduce_add(T v) { return xt_warp_reduce(v, xt_op_add()); }
template <typename T> __device__ inline T xt_warp_reduce_max(T v) { return xt_warp_reduce(v, xt_op_max()); }
template <typename T> __device__ inline T xt_warp_reduce_min(T v) { return xt_warp_reduce(v, xt_op_min()); }

// Block reductions with their own static shared memory: warp reductions, then the warps'
// results combined in warp order by every thread. All threads of the block must call it; every
// thread gets the result. Any block size up to XT_MAX_BLOCK, any warp size.
#define XT_MAX_WARPS 32
template <typename T, typename Op>
__device__ inline T xt_block_reduce_op(T v, Op op) {
  __shared__ T xt_warp_part[XT_MAX_WARPS];
  const unsigned int ws = (unsigned int)xt_warp_size();
  const unsigned int t = xt_thread_in_block(), nt = xt_block_threads();
  v = xt_warp_reduce(v, op);
  if (t % ws == 0u) xt_warp_part[t / ws] = v;
  __syncthreads();
  const unsigned int nw = (nt + ws - 1u) / ws;
  T r = xt_warp_part[0];
  for (unsigned int w = 1u; w < nw; ++w) r = op(r, xt_warp_part[w]);
  __syncthreads();
  return r;
}
template <typename T> __device__ inline T xt_block_reduce_add(T v) { return xt_block_reduce_op(v, xt_op_add()); }
template <typename T> __device__ inline T xt_block_reduce_max(T v) { return xt_block_reduce_op(v, xt_op_max()); }
template <typename T> __device__ inline T xt_block_reduce_min(T v) { return xt_block_reduce_op(v, xt_op_min()); }

// ---- atomics (v2): each returns the value before the operation ----------------------------
__device__ inline float xt_atomic_add(float* p, float v) { return atomicAdd(p, v); }
__device__ inline double xt_atomic_add(double* p, double v) { return atomicAdd(p, v); }
__device__ inline int xt_atomic_add(int* p, int v) { return atomicAdd(p, v); }
__device__ inline unsigned int xt_atomic_add(unsigned int* p, unsigned int v) { return atomicAdd(p, v); }
__device__ inline unsigned long long xt_atomic_add(unsigned long long* p, unsigned long long v) { return atomicAdd(p, v); }
#define XT_ATOMIC_INT(T)                                                                    \
  __device__ inline T xt_atomic_min(T* p, T v) { return atomicMin(p, v); }                    \
  __device__ inline T xt_atomic_max(T* p, T v) { return atomicMax(p, v); }                    \
  __device__ inline T xt_atomic_cas(T* p, T c, T v) { return atomicCAS(p, c, v); }            \
  __device__ inline T xt_atomic_exch(T* p, T v) { return atomicExch(p, v); }
XT_ATOMIC_INT(int)
XT_ATOMIC_INT(unsigned int)
XT_ATOMIC_INT(unsigned long long)
#undef XT_ATOMIC_INT
// f32 min/max by compare-and-swap on the bits, fminf/fmaxf semantics (NaN loses).
template <typename Op>
__device__ inline float xt_atomic_f32_cas_loop(float* p, float v, Op op) {
  unsigned int* u = (unsigned int*)p;
  unsigned int old = *(volatile unsigned int*)u, assumed;
  do {
    assumed = old;
    const unsigned int want = xt_f32_bits(op(xt_bits_f32(assumed), v));
    if (want == assumed) break;
    old = atomicCAS(u, assumed, want);
  } while (old != assumed);
  return xt_bits_f32(old);
}
__device__ inline float xt_atomic_min(float* p, float v) { return xt_atomic_f32_cas_loop(p, v, xt_op_min()); }
__device__ inline float xt_atomic_max(float* p, float v) { return xt_atomic_f32_cas_loop(p, v, xt_op_max()); }

// ---- f16 / bf16 value types (v2) ------------------------------------------------------------
// Two-byte structs holding the raw bits (the ABI of the v1 `unsigned short` buffers), with the
// semantics of the CPU prelude's (and CUDA's __half): constructed from float, double or int by
// rounding to nearest even; converted to float implicitly; `a OP b` of two of them computed in
// float and rounded once to the type; with a built-in number, computed in float (or wider) and
// left unrounded; unary minus flips the sign bit; `a OP= b` is `a = a OP b`.
template <bool B, typename T = void> struct xt_enable_if {};
template <typename T> struct xt_enable_if<true, T> { typedef T type; };
template <typename T> struct xt_is_arith { static const bool value = false; };
#define XT_ARITH(T) template <> struct xt_is_arith<T> { static const bool value = true; };
XT_ARITH(bool) XT_ARITH(char) XT_ARITH(signed char) XT_ARITH(unsigned char) XT_ARITH(short)
XT_ARITH(unsigned short) XT_ARITH(int) XT_ARITH(unsigned int) XT_ARITH(long)
XT_ARITH(unsigned long) XT_ARITH(long long) XT_ARITH(unsigned long long) XT_ARITH(float)
XT_ARITH(double)
#undef XT_ARITH
#define XT_HALF_TYPE(N, FROM_F32, FROM_F64, TO_F32)                                            \
  struct N {                                                                                    \
    unsigned short bits;                                                                        \
    N() = default;                                                                              \
    __device__ N(float f) : bits(FROM_F32(f)) {}                                                \
    __device__ N(double d) : bits(FROM_F64(d)) {}                                               \
    __device__ N(int i) : bits(FROM_F64((double)i)) {}                                          \
    __device__ operator float() const { return TO_F32(bits); }                                  \
    __device__ N operator-() const { N r; r.bits = (unsigned short)(bits ^ 0x8000u); return r; } \
    __device__ N& operator+=(N o) { return *this = N((float)*this + (float)o); }                \
    __device__ N& operator-=(N o) { return *this = N((float)*this - (float)o); }                \
    __device__ N& operator*=(N o) { return *this = N((float)*this * (float)o); }                \
    __device__ N& operator/=(N o) { return *this = N((float)*this / (float)o); }                \
  };                                                                                            \
  __device__ inline N operator+(N a, N b) { return N((float)a + (float)b); }                    \
  __device__ inline N operator-(N a, N b) { return N((float)a - (float)b); }                    \
  __device__ inline N operator*(N a, N b) { return N((float)a * (float)b); }                    \
  __device__ inline N operator/(N a, N b) { return N((float)a / (float)b); }                    \
  __device__ inline bool operator==(N a, N b) { return (float)a == (float)b; }                  \
  __device__ inline bool operator!=(N a, N b) { return (float)a != (float)b; }                  \
  __device__ inline bool operator<(N a, N b) { return (float)a < (float)b; }                    \
  __device__ inline bool operator<=(N a, N b) { return (float)a <= (float)b; }                  \
  __device__ inline bool operator>(N a, N b) { return (float)a > (float)b; }                    \
  __device__ inline bool operator>=(N a, N b) { return (float)a >= (float)b; }
XT_HALF_TYPE(xt_f16, xt_f32_to_f16, xt_f64_to_f16, xt_f16_to_f32)
XT_HALF_TYPE(xt_bf16, xt_f32_to_bf16, xt_f64_to_bf16, xt_bf16_to_f32)
#undef XT_HALF_TYPE
#define XT_HALF_MIXED(N, OP)                                                                   \
  template <typename T, typename = typename xt_enable_if<xt_is_arith<T>::value>::type>          \
  __device__ inline auto operator OP(N a, T b) -> decltype(0.0f OP b) { return (float)a OP b; } \
  template <typename T, typename = typename xt_enable_if<xt_is_arith<T>::value>::type>          \
  __device__ inline auto operator OP(T a, N b) -> decltype(a OP 0.0f) { return a OP (float)b; }
#define XT_HALF_MIXED_ALL(N)                                                                   \
  XT_HALF_MIXED(N, +) XT_HALF_MIXED(N, -) XT_HALF_MIXED(N, *) XT_HALF_MIXED(N, /)              \
  XT_HALF_MIXED(N, <) XT_HALF_MIXED(N, >) XT_HALF_MIXED(N, <=) XT_HALF_MIXED(N, >=)            \
  XT_HALF_MIXED(N, ==) XT_HALF_MIXED(N, !=)
XT_HALF_MIXED_ALL(xt_f16)
XT_HALF_MIXED_ALL(xt_bf16)
#undef XT_HALF_MIXED_ALL
#undef XT_HALF_MIXED
__device__ inline xt_f16 xt_f16_from_bits(unsigned short b) { xt_f16 r; r.bits = b; return r; }
__device__ inline xt_bf16 xt_bf16_from_bits(unsigned short b) { xt_bf16 r; r.bits = b; return r; }
#endif  // !XT_CPU

// ---- math (v2) ----------------------------------------------------------------------------
// GELU, exact form: x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)).
__device__ inline float xt_gelu_erf(float x) { return (0.5f * x) * (1.0f + erff(x * 0.70710677f)); }
__device__ inline double xt_gelu_erf(double x) { return (0.5 * x) * (1.0 + erf(x * 0.7071067811865476)); }
// GELU, tanh approximation (the v1 xt_gelu).
__device__ inline float xt_gelu_tanh(float x) { return xt_gelu(x); }
__device__ inline double xt_gelu_tanh(double x) { return xt_gelu(x); }
