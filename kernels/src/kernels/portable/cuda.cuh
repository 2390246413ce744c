// xthunk CUDA spellings: CUDA's own names for what the portable subset has, so kernels
// written for CUDA compile unmodified for NVRTC, hipRTC and the CPU (docs/kernels.md,
// "bringing CUDA kernels"). Follows prelude.cuh in every user module's unit. NVRTC has most
// of these names built in (warp intrinsics, atomics, cache hints, vector types, warpSize);
// they are defined here for hipRTC of ROCm 5 and for the CPU, each with CUDA's meaning.
// `#include <cuda_fp16.h>` and the other covered headers resolve to this file.

// ---- warp intrinsics with masks ------------------------------------------------------------
// Masks must name every existing lane of the warp (the 32-bit 0xffffffff counts as the full
// warp on 64-lane warps too); the CPU execution reports any other mask at the call.
#if defined(XT_HIP) && !defined(HIP_ENABLE_WARP_SYNC_BUILTINS)
template <typename T> __device__ inline T __shfl_sync(unsigned long long, T v, int src, int width = XT_HIP_WAVE) { return xt_shfl(v, src, width); }
template <typename T> __device__ inline T __shfl_up_sync(unsigned long long, T v, unsigned int d, int width = XT_HIP_WAVE) { return xt_shfl_up(v, d, width); }
template <typename T> __device__ inline T __shfl_down_sync(unsigned long long, T v, unsigned int d, int width = XT_HIP_WAVE) { return xt_shfl_down(v, d, width); }
template <typename T> __device__ inline T __shfl_xor_sync(unsigned long long, T v, int m, int width = XT_HIP_WAVE) { return xt_shfl_xor(v, m, width); }
__device__ inline unsigned long long __ballot_sync(unsigned long long, int p) { return xt_ballot(p); }
__device__ inline int __any_sync(unsigned long long, int p) { return xt_any(p); }
__device__ inline int __all_sync(unsigned long long, int p) { return xt_all(p); }
__device__ inline void __syncwarp(unsigned long long = ~0ull) { __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront"); __builtin_amdgcn_wave_barrier(); __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront"); }
#elif defined(XT_CPU)
#define warpSize (xt_warp_size())
template <typename T> inline T __shfl_sync(unsigned long long mask, T v, int src, int width = xt_warp_size()) {
  xt_cpu_check_mask(mask, "__shfl_sync");
  const int lane = xt_lane_id();
  return xt_cpu_shfl_checked(v, (lane & ~(width - 1)) + (src & (width - 1)), "__shfl_sync");
}
template <typename T> inline T __shfl_up_sync(unsigned long long mask, T v, unsigned int d, int width = xt_warp_size()) {
  xt_cpu_check_mask(mask, "__shfl_up_sync");
  const int lane = xt_lane_id();
  return xt_cpu_shfl_checked(v, (lane & (width - 1)) >= (int)d ? lane - (int)d : lane, "__shfl_up_sync");
}
template <typename T> inline T __shfl_down_sync(unsigned long long mask, T v, unsigned int d, int width = xt_warp_size()) {
  xt_cpu_check_mask(mask, "__shfl_down_sync");
  const int lane = xt_lane_id();
  return xt_cpu_shfl_checked(v, (lane & (width - 1)) + (int)d < width ? lane + (int)d : lane, "__shfl_down_sync");
}
template <typename T> inline T __shfl_xor_sync(unsigned long long mask, T v, int m, int width = xt_warp_size()) {
  xt_cpu_check_mask(mask, "__shfl_xor_sync");
  const int lane = xt_lane_id();
  const int src = lane ^ m;
  return xt_cpu_shfl_checked(v, (src & ~(width - 1)) == (lane & ~(width - 1)) ? src : lane, "__shfl_xor_sync");
}
inline unsigned long long __ballot_sync(unsigned long long mask, int p) { xt_cpu_check_mask(mask, "__ballot_sync"); return xt_ballot(p); }
inline int __any_sync(unsigned long long mask, int p) { xt_cpu_check_mask(mask, "__any_sync"); return xt_any(p); }
inline int __all_sync(unsigned long long mask, int p) { xt_cpu_check_mask(mask, "__all_sync"); return xt_all(p); }
inline void __syncwarp(unsigned long long mask = ~0ull) { xt_cpu_check_mask(mask, "__syncwarp"); (void)xt_cpu_warp_exchange(0ull, xt_lane_id()); }
#endif

// ---- atomics: the atomic* family (NVRTC and hipRTC have them; the CPU here) -----------------
#if defined(XT_CPU)
template <typename T> inline T xt_cpu_atomic_bits_rmw(T* p, T (*f)(T, T), T v) {
  return xt_cpu_atomic_rmw(p, [f, v](T o) { return f(o, v); });
}
#define XT_CPU_ATOMIC_INT_FAMILY(T)                                                               \
  inline T atomicAdd(T* p, T v) { return xt_cpu_atomic_rmw(p, [v](T o) { return (T)(o + v); }); } \
  inline T atomicSub(T* p, T v) { return xt_cpu_atomic_rmw(p, [v](T o) { return (T)(o - v); }); } \
  inline T atomicExch(T* p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }          \
  inline T atomicMin(T* p, T v) { return xt_cpu_atomic_rmw(p, [v](T o) { return v < o ? v : o; }); } \
  inline T atomicMax(T* p, T v) { return xt_cpu_atomic_rmw(p, [v](T o) { return v > o ? v : o; }); } \
  inline T atomicAnd(T* p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST); }           \
  inline T atomicOr(T* p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }             \
  inline T atomicXor(T* p, T v) { return __atomic_fetch_xor(p, v, __ATOMIC_SEQ_CST); }           \
  inline T atomicCAS(T* p, T c, T v) {                                                           \
    __atomic_compare_exchange_n(p, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);            \
    return c;                                                                                    \
  }
// Signed sums wrap as on a GPU: computed on the unsigned bits.
inline int atomicAdd(int* p, int v) { return xt_atomic_add(p, v); }
inline int atomicSub(int* p, int v) { return xt_atomic_add(p, (int)(0u - (unsigned int)v)); }
inline int atomicExch(int* p, int v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
inline int atomicMin(int* p, int v) { return xt_atomic_min(p, v); }
inline int atomicMax(int* p, int v) { return xt_atomic_max(p, v); }
inline int atomicAnd(int* p, int v) { return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST); }
inline int atomicOr(int* p, int v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }
inline int atomicXor(int* p, int v) { return __atomic_fetch_xor(p, v, __ATOMIC_SEQ_CST); }
inline int atomicCAS(int* p, int c, int v) { return xt_atomic_cas(p, c, v); }
XT_CPU_ATOMIC_INT_FAMILY(unsigned int)
XT_CPU_ATOMIC_INT_FAMILY(unsigned long long)
#undef XT_CPU_ATOMIC_INT_FAMILY
inline long long atomicMin(long long* p, long long v) { return xt_cpu_atomic_rmw(p, [v](long long o) { return v < o ? v : o; }); }
inline long long atomicMax(long long* p, long long v) { return xt_cpu_atomic_rmw(p, [v](long long o) { return v > o ? v : o; }); }
inline unsigned short atomicCAS(unsigned short* p, unsigned short c, unsigned short v) {
  __atomic_compare_exchange_n(p, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return c;
}
inline unsigned int atomicInc(unsigned int* p, unsigned int v) {
  return xt_cpu_atomic_rmw(p, [v](unsigned int o) { return o >= v ? 0u : o + 1u; });
}
inline unsigned int atomicDec(unsigned int* p, unsigned int v) {
  return xt_cpu_atomic_rmw(p, [v](unsigned int o) { return (o == 0u || o > v) ? v : o - 1u; });
}
inline float atomicAdd(float* p, float v) { return xt_atomic_add(p, v); }
inline double atomicAdd(double* p, double v) { return xt_atomic_add(p, v); }
inline float atomicExch(float* p, float v) { return __builtin_bit_cast(float, atomicExch((unsigned int*)p, __builtin_bit_cast(unsigned int, v))); }
#endif

#if defined(XT_HIP)
// hipRTC of ROCm 5 has no signed 64-bit minimum and maximum.
#define XT_HIP_ATOMIC_LL(NAME, KEEP)                                                              \
  __device__ inline long long NAME(long long* p, long long v) {                                   \
    unsigned long long* u = (unsigned long long*)p;                                               \
    unsigned long long old = *(volatile unsigned long long*)u, assumed;                           \
    do {                                                                                          \
      assumed = old;                                                                              \
      const long long cur = (long long)assumed;                                                   \
      if (KEEP) break;                                                                            \
      old = atomicCAS(u, assumed, (unsigned long long)v);                                         \
    } while (old != assumed);                                                                     \
    return (long long)old;                                                                        \
  }
XT_HIP_ATOMIC_LL(atomicMin, cur <= v)
XT_HIP_ATOMIC_LL(atomicMax, cur >= v)
#undef XT_HIP_ATOMIC_LL
#endif

// ---- cache-hint loads and stores: plain accesses where the target has no hint -------------
#if !defined(XT_CUDA)
#define XT_LOAD_HINT(N) template <typename T> __device__ inline T N(const T* p) { return *p; }
#define XT_STORE_HINT(N) template <typename T> __device__ inline void N(T* p, T v) { *p = v; }
XT_LOAD_HINT(__ldg) XT_LOAD_HINT(__ldcs) XT_LOAD_HINT(__ldcg) XT_LOAD_HINT(__ldca) XT_LOAD_HINT(__ldlu) XT_LOAD_HINT(__ldcv)
XT_STORE_HINT(__stcs) XT_STORE_HINT(__stcg) XT_STORE_HINT(__stwb) XT_STORE_HINT(__stwt)
#undef XT_LOAD_HINT
#undef XT_STORE_HINT
#endif

// ---- vector types (NVRTC and hipRTC have them built in; the CPU here, CUDA's alignments) ----
#if defined(XT_CPU)
#define XT_VEC1(T, N, A) struct __attribute__((aligned(A))) N##1 { T x; }; inline N##1 make_##N##1(T x) { return {x}; }
#define XT_VEC2(T, N, A) struct __attribute__((aligned(A))) N##2 { T x, y; }; inline N##2 make_##N##2(T x, T y) { return {x, y}; }
#define XT_VEC3(T, N) struct N##3 { T x, y, z; }; inline N##3 make_##N##3(T x, T y, T z) { return {x, y, z}; }
#define XT_VEC4(T, N, A) struct __attribute__((aligned(A))) N##4 { T x, y, z, w; }; inline N##4 make_##N##4(T x, T y, T z, T w) { return {x, y, z, w}; }
#define XT_VECS(T, N, S)                                                                          \
  XT_VEC1(T, N, S) XT_VEC2(T, N, (2 * S) > 16 ? 16 : (2 * S)) XT_VEC3(T, N) XT_VEC4(T, N, (4 * S) > 16 ? 16 : (4 * S))
XT_VECS(signed char, char, 1)
XT_VECS(unsigned char, uchar, 1)
XT_VECS(short, short, 2)
XT_VECS(unsigned short, ushort, 2)
XT_VECS(int, int, 4)
XT_VECS(unsigned int, uint, 4)
XT_VECS(long, long, 8)
XT_VECS(unsigned long, ulong, 8)
XT_VECS(long long, longlong, 8)
XT_VECS(unsigned long long, ulonglong, 8)
XT_VECS(float, float, 4)
XT_VECS(double, double, 8)
#undef XT_VECS
#undef XT_VEC1
#undef XT_VEC2
#undef XT_VEC3
#undef XT_VEC4
#endif

// ---- cuda_fp16.h / cuda_bf16.h: __half and __nv_bfloat16 are xt_f16 and xt_bf16 ------------
// Macros, not typedefs: hipRTC declares its own __half (and its intrinsics) before this file.
#define __half xt_f16
#define half xt_f16
#define __nv_bfloat16 xt_bf16
#define nv_bfloat16 xt_bf16
__device__ inline xt_f16 xt_cuda_float2half(float f) { return xt_f16(f); }
__device__ inline xt_f16 xt_cuda_float2half_rn(float f) { return xt_f16(f); }
__device__ inline xt_f16 xt_cuda_double2half(double d) { return xt_f16(d); }
__device__ inline float xt_cuda_half2float(xt_f16 h) { return (float)h; }
__device__ inline xt_f16 xt_cuda_int2half_rn(int i) { return xt_f16(i); }
__device__ inline xt_bf16 xt_cuda_float2bfloat16(float f) { return xt_bf16(f); }
__device__ inline xt_bf16 xt_cuda_float2bfloat16_rn(float f) { return xt_bf16(f); }
__device__ inline xt_bf16 xt_cuda_double2bfloat16(double d) { return xt_bf16(d); }
__device__ inline float xt_cuda_bfloat162float(xt_bf16 h) { return (float)h; }
__device__ inline xt_bf16 xt_cuda_int2bfloat16_rn(int i) { return xt_bf16(i); }
__device__ inline unsigned short xt_cuda_half_as_ushort(xt_f16 h) { return h.bits; }
__device__ inline xt_f16 xt_cuda_ushort_as_half(unsigned short b) { return xt_f16_from_bits(b); }
__device__ inline unsigned short xt_cuda_bfloat16_as_ushort(xt_bf16 h) { return h.bits; }
__device__ inline xt_bf16 xt_cuda_ushort_as_bfloat16(unsigned short b) { return xt_bf16_from_bits(b); }
#define XT_HALF_INTRINSICS(T)                                                                     \
  __device__ inline T xt_cuda_hadd(T a, T b) { return a + b; }                                          \
  __device__ inline T xt_cuda_hsub(T a, T b) { return a - b; }                                          \
  __device__ inline T xt_cuda_hmul(T a, T b) { return a * b; }                                          \
  __device__ inline T xt_cuda_hdiv(T a, T b) { return a / b; }                                          \
  __device__ inline T xt_cuda_hneg(T a) { return -a; }                                                  \
  __device__ inline T xt_cuda_habs(T a) { T r = a; r.bits = (unsigned short)(a.bits & 0x7fffu); return r; } \
  __device__ inline T xt_cuda_hfma(T a, T b, T c) { return T((double)(float)a * (double)(float)b + (double)(float)c); } \
  __device__ inline T xt_cuda_hmax(T a, T b) { return T(fmaxf((float)a, (float)b)); }                   \
  __device__ inline T xt_cuda_hmin(T a, T b) { return T(fminf((float)a, (float)b)); }                   \
  __device__ inline bool xt_cuda_heq(T a, T b) { return a == b; }                                       \
  __device__ inline bool xt_cuda_hne(T a, T b) { return a != b; }                                       \
  __device__ inline bool xt_cuda_hlt(T a, T b) { return a < b; }                                        \
  __device__ inline bool xt_cuda_hle(T a, T b) { return a <= b; }                                       \
  __device__ inline bool xt_cuda_hgt(T a, T b) { return a > b; }                                        \
  __device__ inline bool xt_cuda_hge(T a, T b) { return a >= b; }                                       \
  __device__ inline bool xt_cuda_hisnan(T a) { return (float)a != (float)a; }                           \
  __device__ inline int xt_cuda_hisinf(T a) { return isinf((float)a) ? ((a.bits & 0x8000u) ? -1 : 1) : 0; }
XT_HALF_INTRINSICS(xt_f16)
XT_HALF_INTRINSICS(xt_bf16)
#undef XT_HALF_INTRINSICS
#define __float2half xt_cuda_float2half
#define __float2half_rn xt_cuda_float2half_rn
#define __double2half xt_cuda_double2half
#define __half2float xt_cuda_half2float
#define __int2half_rn xt_cuda_int2half_rn
#define __float2bfloat16 xt_cuda_float2bfloat16
#define __float2bfloat16_rn xt_cuda_float2bfloat16_rn
#define __double2bfloat16 xt_cuda_double2bfloat16
#define __bfloat162float xt_cuda_bfloat162float
#define __int2bfloat16_rn xt_cuda_int2bfloat16_rn
#define __half_as_ushort xt_cuda_half_as_ushort
#define __ushort_as_half xt_cuda_ushort_as_half
#define __bfloat16_as_ushort xt_cuda_bfloat16_as_ushort
#define __ushort_as_bfloat16 xt_cuda_ushort_as_bfloat16
#define __hadd xt_cuda_hadd
#define __hsub xt_cuda_hsub
#define __hmul xt_cuda_hmul
#define __hdiv xt_cuda_hdiv
#define __hneg xt_cuda_hneg
#define __habs xt_cuda_habs
#define __hfma xt_cuda_hfma
#define __hmax xt_cuda_hmax
#define __hmin xt_cuda_hmin
#define __heq xt_cuda_heq
#define __hne xt_cuda_hne
#define __hlt xt_cuda_hlt
#define __hle xt_cuda_hle
#define __hgt xt_cuda_hgt
#define __hge xt_cuda_hge
#define __hisnan xt_cuda_hisnan
#define __hisinf xt_cuda_hisinf
// Atomic sums of halves: compare-and-swap on the aligned 32-bit word holding them.
#define XT_HALF_ATOMIC_ADD(T, FROM_BITS)                                                          \
  __device__ inline T atomicAdd(T* p, T v) {                                                      \
    const unsigned long long a = (unsigned long long)p;                                           \
    unsigned int* w = (unsigned int*)(a & ~3ull);                                                 \
    const unsigned int shift = (a & 2ull) ? 16u : 0u;                                             \
    unsigned int old = *(volatile unsigned int*)w, assumed;                                       \
    do {                                                                                          \
      assumed = old;                                                                              \
      const T sum = FROM_BITS((unsigned short)((assumed >> shift) & 0xffffu)) + v;                \
      const unsigned int want = (assumed & ~(0xffffu << shift)) | ((unsigned int)sum.bits << shift); \
      old = atomicCAS(w, assumed, want);                                                          \
    } while (old != assumed);                                                                     \
    return FROM_BITS((unsigned short)((old >> shift) & 0xffffu));                                 \
  }
XT_HALF_ATOMIC_ADD(xt_f16, xt_f16_from_bits)
XT_HALF_ATOMIC_ADD(xt_bf16, xt_bf16_from_bits)
#undef XT_HALF_ATOMIC_ADD

// ---- cooperative_groups.h: thread blocks and warp tiles ------------------------------------
namespace cooperative_groups {
struct thread_block {
  __device__ void sync() const { __syncthreads(); }
  __device__ unsigned int thread_rank() const { return xt_thread_in_block(); }
  __device__ unsigned int size() const { return xt_block_threads(); }
  __device__ unsigned int num_threads() const { return xt_block_threads(); }
  __device__ auto group_index() const { return blockIdx; }
  __device__ auto thread_index() const { return threadIdx; }
  __device__ auto group_dim() const { return blockDim; }
  __device__ auto dim_threads() const { return blockDim; }
};
__device__ inline thread_block this_thread_block() { return thread_block(); }
__device__ inline void sync(const thread_block&) { __syncthreads(); }
// A tile of N consecutive threads of the block (N a power of two, at most 32: the narrowest
// warp of every target): shuffles stay inside the tile on 32- and 64-lane warps alike.
template <unsigned int N>
struct thread_block_tile {
  static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "thread_block_tile<N>: N must be a power of two <= 32");
  __device__ unsigned int thread_rank() const { return xt_thread_in_block() % N; }
  __device__ static constexpr unsigned int size() { return N; }
  __device__ static constexpr unsigned int num_threads() { return N; }
  __device__ unsigned int meta_group_rank() const { return xt_thread_in_block() / N; }
  __device__ unsigned int meta_group_size() const { return (xt_block_threads() + N - 1) / N; }
  __device__ void sync() const {
#if defined(XT_CUDA)
    __syncwarp();
#elif defined(XT_HIP)
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront"); __builtin_amdgcn_wave_barrier(); __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
#else
    xt_cpu_tile_sync(N);
#endif
  }
#if defined(XT_CPU)
  template <typename T> T shfl(T v, int src) const { return xt_cpu_tile_shfl(v, ((int)xt_lane_id() & ~(int)(N - 1)) + (src & (int)(N - 1)), N, "thread_block_tile::shfl"); }
  template <typename T> T shfl_xor(T v, int m) const { const int l = xt_lane_id(); const int s = l ^ m; return xt_cpu_tile_shfl(v, (s & ~(int)(N - 1)) == (l & ~(int)(N - 1)) ? s : l, N, "thread_block_tile::shfl_xor"); }
  template <typename T> T shfl_down(T v, unsigned int d) const { const int l = xt_lane_id(); return xt_cpu_tile_shfl(v, (l & (int)(N - 1)) + (int)d < (int)N ? l + (int)d : l, N, "thread_block_tile::shfl_down"); }
  template <typename T> T shfl_up(T v, unsigned int d) const { const int l = xt_lane_id(); return xt_cpu_tile_shfl(v, (l & (int)(N - 1)) >= (int)d ? l - (int)d : l, N, "thread_block_tile::shfl_up"); }
  unsigned long long ballot(int p) const { const unsigned long long b = xt_ballot(p); return (b >> (xt_lane_id() & ~(int)(N - 1))) & ((1ull << N) - 1ull); }
#else
  template <typename T> __device__ T shfl(T v, int src) const { return xt_shfl(v, src, (int)N); }
  template <typename T> __device__ T shfl_xor(T v, int m) const { return xt_shfl_xor(v, m, (int)N); }
  template <typename T> __device__ T shfl_down(T v, unsigned int d) const { return xt_shfl_down(v, d, (int)N); }
  template <typename T> __device__ T shfl_up(T v, unsigned int d) const { return xt_shfl_up(v, d, (int)N); }
  __device__ unsigned long long ballot(int p) const { const unsigned long long b = xt_ballot(p); return (b >> (xt_lane_id() & ~(int)(N - 1))) & ((1ull << N) - 1ull); }
#endif
  __device__ int any(int p) const { return ballot(p) != 0ull; }
  __device__ int all(int p) const { return ballot(p) == ((1ull << N) - 1ull); }
};
template <unsigned int N>
__device__ inline thread_block_tile<N> tiled_partition(const thread_block&) { return thread_block_tile<N>(); }
template <unsigned int N>
__device__ inline void sync(const thread_block_tile<N>& t) { t.sync(); }
template <typename T> struct plus { __device__ T operator()(T a, T b) const { return a + b; } };
template <typename T> struct greater { __device__ T operator()(T a, T b) const { return a < b ? b : a; } };
template <typename T> struct less { __device__ T operator()(T a, T b) const { return b < a ? b : a; } };
// The tile's combination of every thread's `v` by `op` (a butterfly of xor shuffles: every
// thread gets the same result for a commutative `op`).
template <unsigned int N, typename T, typename Op>
__device__ inline T reduce(const thread_block_tile<N>& g, T v, Op op) {
  for (unsigned int o = N / 2; o > 0; o /= 2) v = op(v, g.shfl_xor(v, (int)o));
  return v;
}
}  // namespace cooperative_groups
