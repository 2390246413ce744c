// Row softmax, one warp per row, max and sum by __shfl_xor_sync butterflies over warpSize.
// Launch with blocks of a multiple of the warp size (64, 128, ...).
#include "common.h"

__global__ void softmax_forward(float* out, const float* inp, int N, int C) {
  const int lane = threadIdx.x % warpSize;
  const int warps = blockDim.x / warpSize;
  const int row = blockIdx.x * warps + threadIdx.x / warpSize;
  if (row >= N) return;
  const float* x = inp + row * C;
  float m = -INFINITY;
  for (int c = lane; c < C; c += warpSize) m = fmaxf(m, x[c]);
  for (int o = warpSize / 2; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, o));
  float s = 0.0f;
  for (int c = lane; c < C; c += warpSize) s += expf(x[c] - m);
  for (int o = warpSize / 2; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffff, s, o);
  for (int c = lane; c < C; c += warpSize) out[row * C + c] = expf(x[c] - m) / s;
}

// The same for one row per block of 32 threads: correct where a warp has 32 lanes only (on
// 64 lanes the butterfly reads lanes the block does not have).
__global__ void softmax_forward_block32(float* out, const float* inp, int N, int C) {
  const int row = blockIdx.x;
  if (row >= N) return;
  const float* x = inp + row * C;
  float m = -INFINITY;
  for (int c = threadIdx.x; c < C; c += blockDim.x) m = fmaxf(m, x[c]);
  for (int o = warpSize / 2; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, o));
  float s = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) s += expf(x[c] - m);
  for (int o = warpSize / 2; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffff, s, o);
  for (int c = threadIdx.x; c < C; c += blockDim.x) out[row * C + c] = expf(x[c] - m) / s;
}
