// Shared header of the CUDA-style training kernels (carried in the program as "common.h"):
// written as CUDA code is written, with CUDA's headers, vector types and cache hints.
#pragma once
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

namespace cg = cooperative_groups;

#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

// 16 bytes of one element type, moved as a single int4 (128-bit) load or store.
template <typename T>
struct alignas(16) Pack16 {
  static constexpr int count = (int)(sizeof(int4) / sizeof(T));
  T e[count];
  __device__ T& operator[](int k) { return e[k]; }
  __device__ const T& operator[](int k) const { return e[k]; }
};

template <typename T>
__device__ inline Pack16<T> from_bits(int4 bits) {
  Pack16<T> p;
  *reinterpret_cast<int4*>(&p) = bits;
  return p;
}
template <typename T>
__device__ inline int4 to_bits(const Pack16<T>& p) {
  return *reinterpret_cast<const int4*>(&p);
}

// Loads: plain, and streaming (evict-first: read once).
template <typename T>
__device__ inline Pack16<T> load16(const T* at) {
  return from_bits<T>(*reinterpret_cast<const int4*>(at));
}
template <typename T>
__device__ inline Pack16<T> load16_stream(const T* at) {
  return from_bits<T>(__ldcs(reinterpret_cast<const int4*>(at)));
}
// Stores: plain, streaming, and cached in L2 only.
template <typename T>
__device__ inline void store16(T* at, const Pack16<T>& p) {
  *reinterpret_cast<int4*>(at) = to_bits(p);
}
template <typename T>
__device__ inline void store16_stream(T* at, const Pack16<T>& p) {
  __stcs(reinterpret_cast<int4*>(at), to_bits(p));
}
template <typename T>
__device__ inline void store16_l2(T* at, const Pack16<T>& p) {
  __stcg(reinterpret_cast<int4*>(at), to_bits(p));
}

typedef Pack16<float> f128;
typedef Pack16<__nv_bfloat16> bf128;
