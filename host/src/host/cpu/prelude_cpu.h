// xthunk CPU prelude: the GPU built-ins of the portable subset for the host's C++ compiler.
// Prepended (before prelude.cuh) by the host backend's CPU execution; see docs/kernels-cpu.md.
// Every block runs on one OS thread; its GPU threads are fibers switched at __syncthreads and
// at warp operations only (core/src/host/cpu/runtime.cpp), so a kernel without either runs its
// threads as a plain loop. Names start with xt_/XT_, or are the CUDA built-ins themselves.
#define XT_CPU 1
#if defined(XT_CPU_SCAN)
// Preprocessing only, to find the kernels the compiled code defines (core/src/host/cpu/
// build.rs): no headers, and __global__ left as a marker the scanner reads.
#define __global__ xt_cpu_kernel_marker
#else
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#define __global__ __attribute__((visibility("default"), used))
#endif
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __restrict__ __restrict
// Block-shared: one copy per OS worker thread, and a worker runs one block at a time.
#define __shared__ static thread_local
#define __align__(n) alignas(n)

struct xt_dim3 {
  unsigned int x, y, z;
};

// What the running GPU thread sees: one per OS worker thread (the fiber scheduler sets it
// before it resumes a fiber).
struct xt_cpu_block;
struct xt_cpu_state {
  xt_dim3 thread_idx, block_idx, block_dim, grid_dim;
  unsigned int tid;        // linear thread index in the block
  unsigned int warp_size;  // 32, or 64 when the launch asks
  unsigned char* dynamic_shared;
  xt_cpu_block* block;
};
extern thread_local xt_cpu_state* xt_cpu_cur;

#define threadIdx (xt_cpu_cur->thread_idx)
#define blockIdx (xt_cpu_cur->block_idx)
#define blockDim (xt_cpu_cur->block_dim)
#define gridDim (xt_cpu_cur->grid_dim)

// The scheduler's entry points (runtime.cpp, appended after the user source).
void xt_cpu_syncthreads();
// Publishes `mine` to the warp, waits for every live lane, and returns lane `src`'s published
// value (`mine` when `src` is outside the warp or its lane has exited).
// `valid` (when given) says whether lane `src` took part.
unsigned long long xt_cpu_warp_exchange(unsigned long long mine, int src, int* valid = nullptr);
// The dynamic shared memory of the running block (`extern __shared__`, rewritten).
inline unsigned char* xt_cpu_dynamic_shared() { return xt_cpu_cur->dynamic_shared; }

inline void __syncthreads() { xt_cpu_syncthreads(); }

// ---- XT_FOR_EACH: a kernel that is one loop of independent iterations ---------------------
// The CPU forms of prelude.cuh's XT_FOR_EACH, XT_EACH_KERNEL, XT_BLOCK_PHASE and
// XT_BLOCK_SYNC (XT_CPU_*: prelude.cuh takes them on the CPU unless the unit defines
// XT_CPU_GPU_FORMS, as the driver emulator's units do, which then run the GPUs' forms).
// GPUs run XT_FOR_EACH(i, n) as XT_FOR (a grid-stride loop). Here block b of the
// grid's G blocks runs the iterations [b*c, min((b+1)*c, n)), c = ceil(n / G) rounded up to a
// multiple of 16, as one plain loop on the block's first thread (its other threads have none):
// a loop the compiler can vectorize. Every iteration runs once, as on a GPU; only their order
// differs, which such a kernel may not depend on. XT_EACH_KERNEL(k), after a kernel whose
// body is that loop alone, tells the runtime, which then launches k on a few one-thread
// blocks (core/src/host/cpu/program.rs).
template <auto F> struct xt_cpu_each_kernel { static constexpr bool value = false; };
#if defined(XT_CPU_SCAN)
#define XT_CPU_EACH_KERNEL(k)
#else
// (In C++ linkage: the kernels may be inside `extern "C"`, where no template may be.)
#define XT_CPU_EACH_KERNEL(k) \
  extern "C++" {          \
  template <> struct xt_cpu_each_kernel<&k> { static constexpr bool value = true; }; \
  }
#endif
inline long long xt_cpu_each_bound(long long n, int hi) {
  const xt_cpu_state& s = *xt_cpu_cur;
  if (s.tid != 0 || n <= 0) return 0;
  const long long g = (long long)s.grid_dim.x * s.grid_dim.y * s.grid_dim.z;
  const long long b = (long long)s.block_idx.x +
                      (long long)s.grid_dim.x * ((long long)s.block_idx.y + (long long)s.grid_dim.y * s.block_idx.z);
  long long c = n / g + (n % g != 0);
  c = (c + 15) / 16 * 16;
  const long long lo = b < n / c + 1 ? b * c : n;  // b * c without overflow
  const long long at = hi ? (lo < n - c ? lo + c : n) : lo;
  return at < n ? at : n;
}
// XT_BLOCK_PHASE / XT_BLOCK_SYNC on the CPU (prelude.cuh picks these forms): the block's
// first thread runs the phase for every thread index in order; the others have none, and
// nothing waits.
#define XT_CPU_BLOCK_PHASE(t)                                                                \
  for (long long t = 0, xt_phase_##t = xt_cpu_cur->tid == 0 ? (long long)xt_cpu_cur->block_dim.x * \
                                                                  xt_cpu_cur->block_dim.y *        \
                                                                  xt_cpu_cur->block_dim.z          \
                                                            : 0;                                   \
       t < xt_phase_##t; ++t)
#define XT_CPU_BLOCK_SYNC() ((void)0)
#define XT_CPU_FOR_EACH(i, n) \
  for (long long i = xt_cpu_each_bound((n), 0), xt_hi_##i = xt_cpu_each_bound((n), 1); i < xt_hi_##i; ++i)

inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

// ---- CUDA device math the C library lacks -------------------------------------------------
// The C99 classification macros, which <cmath> turns into std:: functions.
using std::isfinite;
using std::isinf;
using std::isnan;
using std::signbit;
// Float max/min as GPUs compute them: a NaN operand, quiet or signalling, loses; the result is
// NaN only when both are. glibc's fmax follows IEEE 754-2008's maxNum instead and returns a
// quiet NaN for a signalling one. Kernels' fmaxf/fminf/fmax/fmin are these (macros at the end
// of this file; std:: spellings too).
template <typename T> inline T xt_cpu_fmax(T a, T b) {
  if (a != a) return b != b ? a + b : b;
  if (b != b) return a;
  return std::fmax(a, b);
}
template <typename T> inline T xt_cpu_fmin(T a, T b) {
  if (a != a) return b != b ? a + b : b;
  if (b != b) return a;
  return std::fmin(a, b);
}
inline float xt_cpu_fmaxf(float a, float b) { return xt_cpu_fmax(a, b); }
inline float xt_cpu_fminf(float a, float b) { return xt_cpu_fmin(a, b); }
// fmax/fmin: float for two floats, else double (CUDA's overloads).
template <typename A, typename B>
using xt_cpu_fm_t = std::conditional_t<std::is_same_v<A, float> && std::is_same_v<B, float>, float, double>;
template <typename A, typename B> inline xt_cpu_fm_t<A, B> xt_cpu_fmaxd(A a, B b) {
  return xt_cpu_fmax<xt_cpu_fm_t<A, B>>(a, b);
}
template <typename A, typename B> inline xt_cpu_fm_t<A, B> xt_cpu_fmind(A a, B b) {
  return xt_cpu_fmin<xt_cpu_fm_t<A, B>>(a, b);
}
namespace std {
using ::xt_cpu_fmaxd;
using ::xt_cpu_fmind;
using ::xt_cpu_fmaxf;
using ::xt_cpu_fminf;
}  // namespace std
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }

// Math constants (M_PI, XT_PI_F, ...): the shared prelude (prelude.cuh) defines them for every
// target, the CPU included.

// ---- warps: lane-synchronous operations over 32 (or 64) lanes ---------------------------
// Every lane of a warp that has not exited must reach the same warp operation.
inline int xt_warp_size() { return (int)xt_cpu_cur->warp_size; }
inline int xt_lane_id() { return (int)(xt_cpu_cur->tid % xt_cpu_cur->warp_size); }

template <typename T>
inline unsigned long long xt_cpu_to_bits(T v) {
  static_assert(sizeof(T) <= 8, "warp values are at most 8 bytes");
  unsigned long long u = 0;
  std::memcpy(&u, &v, sizeof(T));
  return u;
}
template <typename T>
inline T xt_cpu_from_bits(unsigned long long u) {
  T v;
  std::memcpy(&v, &u, sizeof(T));
  return v;
}
template <typename T>
inline T xt_cpu_shfl_from(T v, int src) {
  return xt_cpu_from_bits<T>(xt_cpu_warp_exchange(xt_cpu_to_bits(v), src));
}
// CUDA semantics: `width` a power of two <= the warp size splits the warp into segments.
template <typename T>
inline T xt_shfl(T v, int src_lane, int width = xt_warp_size()) {
  const int lane = xt_lane_id();
  const int base = lane & ~(width - 1);
  return xt_cpu_shfl_from(v, base + (src_lane & (width - 1)));
}
template <typename T>
inline T xt_shfl_up(T v, unsigned int delta, int width = xt_warp_size()) {
  const int lane = xt_lane_id();
  const int seg = lane & (width - 1);
  const int src = seg >= (int)delta ? lane - (int)delta : lane;
  return xt_cpu_shfl_from(v, src);
}
template <typename T>
inline T xt_shfl_down(T v, unsigned int delta, int width = xt_warp_size()) {
  const int lane = xt_lane_id();
  const int seg = lane & (width - 1);
  const int src = seg + (int)delta < width ? lane + (int)delta : lane;
  return xt_cpu_shfl_from(v, src);
}
template <typename T>
inline T xt_shfl_xor(T v, int lane_mask, int width = xt_warp_size()) {
  const int lane = xt_lane_id();
  const int src = lane ^ lane_mask;
  // A source beyond this lane's segment reads the lane's own value (CUDA).
  const bool inside = (src & ~(width - 1)) == (lane & ~(width - 1));
  return xt_cpu_shfl_from(v, inside ? src : lane);
}
// Bit i = lane i's predicate (lanes that have exited give 0).
inline unsigned long long xt_ballot(int pred) {
  const int ws = xt_warp_size();
  const unsigned long long mine = pred ? 1ull : 0ull;
  // One exchange per lane would be slow; gather every lane's bit through a butterfly of
  // exchanges instead: lane i contributes its bit at position i. In a partial warp a lane
  // whose partner is missing keeps its own value, so only lane 0 is sure to end with every
  // bit (each bit reaches it through lanes numbered at most the bit's own): every lane takes
  // lane 0's mask.
  unsigned long long acc = mine << xt_lane_id();
  for (int m = 1; m < ws; m *= 2) acc |= xt_cpu_shfl_from(acc, xt_lane_id() ^ m);
  return xt_cpu_shfl_from(acc, 0);
}
inline int xt_any(int pred) { return xt_ballot(pred) != 0ull; }
inline int xt_all(int pred) { return xt_ballot(!pred) == 0ull; }

// ---- CUDA spellings' checks (kernels/src/kernels/portable/cuda.cuh) ----------------------
// Reports a warp operation that cannot mean what it says here: the kernel fails at its end
// with the first such report (operation, block, thread, lane and why).
void xt_cpu_warp_fault(const char* op, const char* why, unsigned long long detail);
// A mask must name every existing lane of the calling thread's warp (0xffffffff counts as the
// full warp on 64-lane warps too).
inline void xt_cpu_check_mask(unsigned long long mask, const char* op) {
  const unsigned int ws = xt_cpu_cur->warp_size;
  const unsigned int nt = xt_cpu_cur->block_dim.x * xt_cpu_cur->block_dim.y * xt_cpu_cur->block_dim.z;
  const unsigned int first = xt_cpu_cur->tid - xt_cpu_cur->tid % ws;
  const unsigned int lanes = nt - first < ws ? nt - first : ws;
  const unsigned long long need = lanes == 64 ? ~0ull : ((1ull << lanes) - 1ull);
  if (mask == 0xffffffffull || (mask & need) == need) return;
  xt_cpu_warp_fault(op, "its mask does not name every existing lane of the warp (partial masks are not "
                        "supported: every lane of the warp must take part)", mask);
}
// Lane `src`'s `v`, where lane `src` must exist (a lane past the block's last thread, or one
// that has exited, is a fault).
template <typename T>
inline T xt_cpu_shfl_checked(T v, int src, const char* op) {
  int ok = 0;
  const unsigned long long got = xt_cpu_warp_exchange(xt_cpu_to_bits(v), src, &ok);
  if (!ok) xt_cpu_warp_fault(op, "it reads a lane outside the block (or one that has exited)", (unsigned long long)src);
  return xt_cpu_from_bits<T>(got);
}
// A tile of `n` threads must lie inside the block.
inline void xt_cpu_check_tile(unsigned int n, const char* op) {
  const unsigned int nt = xt_cpu_cur->block_dim.x * xt_cpu_cur->block_dim.y * xt_cpu_cur->block_dim.z;
  const unsigned int first = xt_cpu_cur->tid - xt_cpu_cur->tid % n;
  if (first + n > nt) xt_cpu_warp_fault(op, "its tile reaches past the block's last thread", (unsigned long long)(first + n));
}
template <typename T>
inline T xt_cpu_tile_shfl(T v, int src, unsigned int n, const char* op) {
  xt_cpu_check_tile(n, op);
  return xt_cpu_shfl_checked(v, src, op);
}
inline void xt_cpu_tile_sync(unsigned int n) {
  xt_cpu_check_tile(n, "thread_block_tile::sync");
  (void)xt_cpu_warp_exchange(0ull, xt_lane_id());
}

struct xt_cpu_add {
  template <typename T> T operator()(T a, T b) const { return a + b; }
};
struct xt_cpu_max {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) return xt_cpu_fmax(a, b);
    else return a > b ? a : b;
  }
};
struct xt_cpu_min {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) return xt_cpu_fmin(a, b);
    else return a < b ? a : b;
  }
};
// Butterfly over xor shuffles, as on a GPU (in a full warp every lane computes the same
// operations, up to commutation); a partner lane beyond the block (a partial last warp) is
// skipped, and lane 0's result, which covers every lane, is given to all.
template <typename T, typename Op>
inline T xt_cpu_warp_reduce(T v, Op op) {
  const int lane = xt_lane_id();
  for (int m = xt_warp_size() / 2; m > 0; m /= 2) {
    int ok = 0;
    T o = xt_cpu_from_bits<T>(xt_cpu_warp_exchange(xt_cpu_to_bits(v), lane ^ m, &ok));
    if (ok) v = op(v, o);
  }
  return xt_cpu_shfl_from(v, 0);
}
template <typename T> inline T xt_warp_reduce_add(T v) { return xt_cpu_warp_reduce(v, xt_cpu_add()); }
template <typename T> inline T xt_warp_reduce_max(T v) { return xt_cpu_warp_reduce(v, xt_cpu_max()); }
template <typename T> inline T xt_warp_reduce_min(T v) { return xt_cpu_warp_reduce(v, xt_cpu_min()); }

// Block reductions: every thread of the block calls them; every thread gets the result.
// Warp results meet in static shared memory (one slot per warp, up to 1024 threads).
template <typename T, typename Op>
inline T xt_cpu_block_reduce(T v, Op op) {
  static thread_local T slots[64];
  const unsigned int nt = blockDim.x * blockDim.y * blockDim.z;
  const unsigned int ws = (unsigned int)xt_warp_size();
  const unsigned int t = xt_cpu_cur->tid;
  const unsigned int warps = (nt + ws - 1) / ws;
  v = xt_cpu_warp_reduce(v, op);
  if (t % ws == 0) slots[t / ws] = v;
  __syncthreads();
  T r = slots[0];
  for (unsigned int w = 1; w < warps; w++) r = op(r, slots[w]);
  __syncthreads();
  return r;
}
template <typename T> inline T xt_block_reduce_add(T v) { return xt_cpu_block_reduce(v, xt_cpu_add()); }
template <typename T> inline T xt_block_reduce_max(T v) { return xt_cpu_block_reduce(v, xt_cpu_max()); }
template <typename T> inline T xt_block_reduce_min(T v) { return xt_cpu_block_reduce(v, xt_cpu_min()); }

// ---- atomics: real ones (return the old value) --------------------------------------------
template <typename T>
inline T xt_cpu_atomic_int_add(T* p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline int xt_atomic_add(int* p, int v) {
  // Wrapping, as on a GPU (done on the unsigned bits).
  return (int)__atomic_fetch_add((unsigned int*)p, (unsigned int)v, __ATOMIC_SEQ_CST);
}
inline unsigned int xt_atomic_add(unsigned int* p, unsigned int v) { return xt_cpu_atomic_int_add(p, v); }
inline unsigned long long xt_atomic_add(unsigned long long* p, unsigned long long v) {
  return xt_cpu_atomic_int_add(p, v);
}
// Floating point: compare-and-swap on the bits.
template <typename T, typename U, typename F>
inline T xt_cpu_atomic_float(T* p, F f) {
  U* q = reinterpret_cast<U*>(p);
  U old = __atomic_load_n(q, __ATOMIC_SEQ_CST);
  for (;;) {
    T o;
    std::memcpy(&o, &old, sizeof(T));
    T n = f(o);
    U nb;
    std::memcpy(&nb, &n, sizeof(T));
    if (__atomic_compare_exchange_n(q, &old, nb, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) return o;
  }
}
inline float xt_atomic_add(float* p, float v) {
  return xt_cpu_atomic_float<float, unsigned int>(p, [v](float o) { return o + v; });
}
inline double xt_atomic_add(double* p, double v) {
  return xt_cpu_atomic_float<double, unsigned long long>(p, [v](double o) { return o + v; });
}
template <typename T, typename F>
inline T xt_cpu_atomic_rmw(T* p, F f) {
  T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while (!__atomic_compare_exchange_n(p, &old, f(old), true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
  }
  return old;
}
#define XT_CPU_ATOMIC_MINMAX(T)                                                                 \
  inline T xt_atomic_min(T* p, T v) { return xt_cpu_atomic_rmw(p, [v](T o) { return v < o ? v : o; }); } \
  inline T xt_atomic_max(T* p, T v) { return xt_cpu_atomic_rmw(p, [v](T o) { return v > o ? v : o; }); }
XT_CPU_ATOMIC_MINMAX(int)
XT_CPU_ATOMIC_MINMAX(unsigned int)
XT_CPU_ATOMIC_MINMAX(unsigned long long)
#undef XT_CPU_ATOMIC_MINMAX
inline float xt_atomic_min(float* p, float v) {
  return xt_cpu_atomic_float<float, unsigned int>(p, [v](float o) { return xt_cpu_fmin(o, v); });
}
inline float xt_atomic_max(float* p, float v) {
  return xt_cpu_atomic_float<float, unsigned int>(p, [v](float o) { return xt_cpu_fmax(o, v); });
}
#define XT_CPU_ATOMIC_CAS(T)                                                         \
  inline T xt_atomic_cas(T* p, T compare, T val) {                                   \
    __atomic_compare_exchange_n(p, &compare, val, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); \
    return compare;                                                                  \
  }                                                                                  \
  inline T xt_atomic_exch(T* p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
XT_CPU_ATOMIC_CAS(int)
XT_CPU_ATOMIC_CAS(unsigned int)
XT_CPU_ATOMIC_CAS(unsigned long long)
#undef XT_CPU_ATOMIC_CAS

// ---- f16 and bf16 value types ---------------------------------------------------------------
// Two bytes holding the raw bits (the ABI of v1's unsigned short), computed in float, each
// result rounded once to nearest even.
inline unsigned short xt_cpu_f32_to_f16(float f) { return __builtin_bit_cast(unsigned short, (_Float16)f); }
inline unsigned short xt_cpu_f64_to_f16(double d) { return __builtin_bit_cast(unsigned short, (_Float16)d); }
inline float xt_cpu_f16_to_f32(unsigned short h) { return (float)__builtin_bit_cast(_Float16, h); }
inline unsigned short xt_cpu_f32_to_bf16(float f) {
  unsigned int u = __builtin_bit_cast(unsigned int, f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}
// f64 -> bf16 with one rounding: round to odd into f32 first (exact for bf16's 8 bits).
inline unsigned short xt_cpu_f64_to_bf16(double v) {
  float f = (float)v;
  if (v != v || (double)f == v) return xt_cpu_f32_to_bf16(f);
  unsigned int b = __builtin_bit_cast(unsigned int, f);
  if ((b & 0x7fffffffu) == 0x7f800000u) b = (b & 0x80000000u) | 0x7f7fffffu;
  else if (std::fabs((double)f) > std::fabs(v)) b -= 1u;
  return xt_cpu_f32_to_bf16(__builtin_bit_cast(float, b | 1u));
}
inline float xt_cpu_bf16_to_f32(unsigned short h) { return __builtin_bit_cast(float, ((unsigned int)h) << 16); }

#define XT_CPU_HALF_TYPE(NAME, TO, TO64, FROM)                                                      \
  struct NAME {                                                                                    \
    unsigned short bits;                                                                           \
    NAME() = default;                                                                              \
    NAME(float f) : bits(TO(f)) {}                                                                 \
    NAME(double d) : bits(TO64(d)) {}                                                              \
    NAME(int i) : bits(TO64((double)i)) {}                                                         \
    operator float() const { return FROM(bits); }                                                  \
    NAME operator-() const { NAME r; r.bits = (unsigned short)(bits ^ 0x8000u); return r; }        \
    NAME& operator+=(NAME o) { return *this = NAME((float)*this + (float)o); }                     \
    NAME& operator-=(NAME o) { return *this = NAME((float)*this - (float)o); }                     \
    NAME& operator*=(NAME o) { return *this = NAME((float)*this * (float)o); }                     \
    NAME& operator/=(NAME o) { return *this = NAME((float)*this / (float)o); }                     \
  };                                                                                               \
  inline NAME operator+(NAME a, NAME b) { return NAME((float)a + (float)b); }                      \
  inline NAME operator-(NAME a, NAME b) { return NAME((float)a - (float)b); }                      \
  inline NAME operator*(NAME a, NAME b) { return NAME((float)a * (float)b); }                      \
  inline NAME operator/(NAME a, NAME b) { return NAME((float)a / (float)b); }                      \
  inline bool operator==(NAME a, NAME b) { return (float)a == (float)b; }                          \
  inline bool operator!=(NAME a, NAME b) { return (float)a != (float)b; }                          \
  inline bool operator<(NAME a, NAME b) { return (float)a < (float)b; }                            \
  inline bool operator<=(NAME a, NAME b) { return (float)a <= (float)b; }                          \
  inline bool operator>(NAME a, NAME b) { return (float)a > (float)b; }                            \
  inline bool operator>=(NAME a, NAME b) { return (float)a >= (float)b; }
XT_CPU_HALF_TYPE(xt_f16, xt_cpu_f32_to_f16, xt_cpu_f64_to_f16, xt_cpu_f16_to_f32)
XT_CPU_HALF_TYPE(xt_bf16, xt_cpu_f32_to_bf16, xt_cpu_f64_to_bf16, xt_cpu_bf16_to_f32)
#undef XT_CPU_HALF_TYPE
// Mixed with a built-in arithmetic type: computed in that type promoted with float.
#define XT_CPU_HALF_MIXED(NAME, OP)                                                               \
  template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>>                     \
  inline auto operator OP(NAME a, T b) { return (float)a OP b; }                                  \
  template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>>                     \
  inline auto operator OP(T a, NAME b) { return a OP (float)b; }
#define XT_CPU_HALF_MIXED_ALL(NAME)                                                               \
  XT_CPU_HALF_MIXED(NAME, +) XT_CPU_HALF_MIXED(NAME, -) XT_CPU_HALF_MIXED(NAME, *)              \
  XT_CPU_HALF_MIXED(NAME, /) XT_CPU_HALF_MIXED(NAME, <) XT_CPU_HALF_MIXED(NAME, >)              \
  XT_CPU_HALF_MIXED(NAME, <=) XT_CPU_HALF_MIXED(NAME, >=) XT_CPU_HALF_MIXED(NAME, ==)           \
  XT_CPU_HALF_MIXED(NAME, !=)
XT_CPU_HALF_MIXED_ALL(xt_f16)
XT_CPU_HALF_MIXED_ALL(xt_bf16)
#undef XT_CPU_HALF_MIXED_ALL
#undef XT_CPU_HALF_MIXED
inline xt_f16 xt_f16_from_bits(unsigned short b) { xt_f16 h; h.bits = b; return h; }
inline xt_bf16 xt_bf16_from_bits(unsigned short b) { xt_bf16 h; h.bits = b; return h; }

// What prelude.cuh may leave to this file on the CPU (the v2 names above).
#define XT_CPU_PRELUDE_V2 1
// Kernels' float max/min: GPUs' NaN rule (xt_cpu_fmax above), not glibc's.
#define fmaxf xt_cpu_fmaxf
#define fminf xt_cpu_fminf
#define fmax xt_cpu_fmaxd
#define fmin xt_cpu_fmind
