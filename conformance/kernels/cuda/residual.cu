// Residual sums, in f32 and in bf16 (cuda_bf16.h), over 128-bit packs.
#include "common.h"

__global__ void residual_forward(float* out, const float* a, const float* b, int n) {
  const int i = (blockIdx.x * blockDim.x + threadIdx.x) * f128::count;
  if (i >= n) return;
  const f128 x = load16_stream(a + i), y = load16_stream(b + i);
  f128 s;
  for (int k = 0; k < f128::count; k++) s[k] = x[k] + y[k];
  store16(out + i, s);
}

__global__ void residual_forward_bf16(__nv_bfloat16* out, const __nv_bfloat16* a,
                                      const __nv_bfloat16* b, int n) {
  const int i = (blockIdx.x * blockDim.x + threadIdx.x) * bf128::count;
  if (i >= n) return;
  const bf128 x = load16_stream(a + i), y = load16_stream(b + i);
  bf128 s;
  for (int k = 0; k < bf128::count; k++) {
    s[k] = __float2bfloat16(__bfloat162float(x[k]) + __bfloat162float(y[k]));
  }
  store16_l2(out + i, s);
}
