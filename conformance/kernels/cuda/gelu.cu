// GELU (tanh approximation), 4 floats per thread through 128-bit loads and stores.
#include "common.h"

#define GELU_SCALE 0.7978845608028654f  // sqrt(2 / pi)

__global__ void gelu_forward(float* out, const float* inp, int n) {
  const int i = (blockIdx.x * blockDim.x + threadIdx.x) * f128::count;
  if (i >= n) return;
  const f128 x = load16_stream(inp + i);
  f128 y;
  for (int k = 0; k < f128::count; k++) {
    const float v = x[k];
    const float cube = 0.044715f * v * v * v;
    y[k] = 0.5f * v * (1.0f + tanhf(GELU_SCALE * (v + cube)));
  }
  store16(out + i, y);
}
