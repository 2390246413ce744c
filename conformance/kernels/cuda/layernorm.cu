// Layer norm, one 32-thread tile per row, sums by cg::reduce; also writes each row's mean
// and reciprocal standard deviation.
#include "common.h"

__global__ void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                                  const float* weight, const float* bias, int N, int C) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
  const int row = blockIdx.x * warp.meta_group_size() + warp.meta_group_rank();
  if (row >= N) return;
  const float* x = inp + row * C;
  float sum = 0.0f;
  for (int c = warp.thread_rank(); c < C; c += warp.size()) sum += x[c];
  sum = cg::reduce(warp, sum, cg::plus<float>{});
  const float m = sum / C;
  float var = 0.0f;
  for (int c = warp.thread_rank(); c < C; c += warp.size()) {
    const float d = x[c] - m;
    var += d * d;
  }
  var = cg::reduce(warp, var, cg::plus<float>{});
  const float s = rsqrtf(var / C + 1e-5f);
  float* y = out + row * C;
  for (int c = warp.thread_rank(); c < C; c += warp.size()) {
    const float n = s * (__ldcs(x + c) - m);
    __stcs(y + c, n * weight[c] + bias[c]);
  }
  if (warp.thread_rank() == 0) {
    __stcs(mean + row, m);
    __stcs(rstd + row, s);
  }
}
