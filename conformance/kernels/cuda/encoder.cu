// Token plus position embedding: out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :].
#include "common.h"

__global__ void encoder_forward(float* out, const int* tokens, const float* wte,
                                const float* wpe, int B, int T, int C) {
  const int i = (blockIdx.x * blockDim.x + threadIdx.x) * f128::count;
  if (i >= B * T * C) return;
  const int bt = i / C, c = i % C;
  const int t = bt % T;
  const int token = tokens[bt];
  const f128 w = load16(wte + token * C + c), p = load16(wpe + t * C + c);
  f128 s;
  for (int k = 0; k < f128::count; k++) s[k] = w[k] + p[k];
  store16_stream(out + bt * C + c, s);
}
