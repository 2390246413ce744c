// Token embedding backward: dwte[tokens[b, t], c] += dout[b, t, c], by atomicAdd.
#include "common.h"

__global__ void embedding_backward(float* dwte, const float* dout, const int* tokens, int B,
                                   int T, int C) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= B * T * C) return;
  const int bt = i / C, c = i % C;
  atomicAdd(dwte + tokens[bt] * C + c, dout[i]);
}
