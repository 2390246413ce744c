// A training-style kernel set written to the portable subset v2 (docs/kernels.md), the way a
// user brings kernels written for CUDA elsewhere: plain `__global__` (no extern "C"), warp
// shuffles through xt_* operations, atomics, static and dynamic shared memory, f16 and bf16.
// Compiled unmodified for sm_80, sm_90 and gfx90a by the backends' portable_v2 tests.
//
// Layouts: row-major; B*T rows of C channels ("bt" = row index).

// ---- elementwise --------------------------------------------------------------------------

// GELU, exact form (erf), and tanh approximation: out = gelu(in).
__global__ void gelu_erf_forward(float* out, const float* in, long long n) {
  XT_FOR(i, n) {
    const float x = in[i];
    out[i] = 0.5f * x * (1.0f + erff(x * (float)M_SQRT1_2));
  }
}

__global__ void gelu_tanh_forward(float* out, const float* in, long long n) {
  const float s = sqrtf(2.0f / XT_PI_F);
  XT_FOR(i, n) {
    const float x = in[i];
    const float cube = 0.044715f * x * x * x;
    out[i] = 0.5f * x * (1.0f + tanhf(s * (x + cube)));
  }
}

// Backward of the tanh GELU: din = dout * gelu'(x).
__global__ void gelu_tanh_backward(float* din, const float* in, const float* dout, long long n) {
  const float s = sqrtf(2.0f / XT_PI_F);
  XT_FOR(i, n) {
    const float x = in[i];
    const float cube = 0.044715f * x * x * x;
    const float t = tanhf(s * (x + cube));
    const float sech2 = 1.0f - t * t;
    const float local = 0.5f * (1.0f + t) + x * 0.5f * sech2 * s * (1.0f + 3.0f * 0.044715f * x * x);
    din[i] = local * dout[i];
  }
}

// Residual: out = a + b.
__global__ void residual_forward(float* out, const float* a, const float* b, long long n) {
  XT_FOR(i, n) out[i] = a[i] + b[i];
}

// ---- encoder: token + position embeddings ---------------------------------------------------

// out[bt, c] = wte[tokens[bt], c] + wpe[bt % T, c]; a token outside [0, V) gives NaN.
__global__ void encoder_forward(float* out, const int* tokens, const float* wte, const float* wpe,
                                long long BT, long long T, long long C, int V) {
  XT_FOR(i, BT * C) {
    const long long bt = i / C, c = i % C;
    const int tok = tokens[bt];
    const float w = (tok >= 0 && tok < V) ? wte[(long long)tok * C + c] : NAN;
    out[i] = w + wpe[(bt % T) * C + c];
  }
}

// ---- layer norm: one warp per row, statistics by warp shuffles ------------------------------

// out = (x - mean) * rstd * weight + bias, biased variance; mean and rstd saved per row.
// Any block size that is a multiple of the warp size.
__global__ void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                                  const float* weight, const float* bias, long long N, long long C) {
  const int ws = xt_warp_size();
  const int lane = xt_lane_id();
  const long long warps = xt_global_threads() / ws;
  for (long long row = xt_global_id() / ws; row < N; row += warps) {
    const float* x = inp + row * C;
    float s = 0.0f;
    for (long long c = lane; c < C; c += ws) s += x[c];
    const float m = xt_warp_reduce_add(s) / (float)C;
    float v = 0.0f;
    for (long long c = lane; c < C; c += ws) {
      const float d = x[c] - m;
      v += d * d;
    }
    const float r = 1.0f / sqrtf(xt_warp_reduce_add(v) / (float)C + 1e-5f);
    for (long long c = lane; c < C; c += ws) out[row * C + c] = (x[c] - m) * r * weight[c] + bias[c];
    if (lane == 0) {
      mean[row] = m;
      rstd[row] = r;
    }
  }
}

// ---- softmax --------------------------------------------------------------------------------

// One warp per row, max and sum by explicit xor shuffles (butterfly over xt_warp_size() lanes).
__global__ void softmax_forward_warp(float* out, const float* inp, long long N, long long C) {
  const int ws = xt_warp_size();
  const int lane = xt_lane_id();
  const long long warps = xt_global_threads() / ws;
  for (long long row = xt_global_id() / ws; row < N; row += warps) {
    const float* x = inp + row * C;
    float m = -INFINITY;
    for (long long c = lane; c < C; c += ws) m = fmaxf(m, x[c]);
    for (int off = ws / 2; off > 0; off /= 2) m = fmaxf(m, xt_shfl_xor(m, off));
    float s = 0.0f;
    for (long long c = lane; c < C; c += ws) s += expf(x[c] - m);
    for (int off = ws / 2; off > 0; off /= 2) s += xt_shfl_xor(s, off);
    for (long long c = lane; c < C; c += ws) out[row * C + c] = expf(x[c] - m) / s;
  }
}

// One block per row, block reductions (any block size).
__global__ void softmax_forward_block(float* out, const float* inp, long long N, long long C) {
  const unsigned int t = xt_thread_in_block(), nt = xt_block_threads();
  for (long long row = xt_block_id(); row < N; row += xt_num_blocks()) {
    const float* x = inp + row * C;
    float m = -INFINITY;
    for (long long c = t; c < C; c += nt) m = fmaxf(m, x[c]);
    m = xt_block_reduce_max(m);
    float s = 0.0f;
    for (long long c = t; c < C; c += nt) s += expf(x[c] - m);
    s = xt_block_reduce_add(s);
    for (long long c = t; c < C; c += nt) out[row * C + c] = expf(x[c] - m) / s;
  }
}

// ---- cross-entropy --------------------------------------------------------------------------

// losses[i] = -log(probs[i, targets[i]]); the mean loss accumulated atomically into *mean_loss
// (which starts at 0).
__global__ void crossentropy_forward(float* losses, float* mean_loss, const float* probs,
                                     const int* targets, long long N, long long V) {
  XT_FOR(i, N) {
    const int t = targets[i];
    const float l = -logf(probs[i * V + t]);
    losses[i] = l;
    xt_atomic_add(mean_loss, l / (float)N);
  }
}

// dlogits = (probs - onehot(target)) * dloss.
__global__ void crossentropy_softmax_backward(float* dlogits, const float* dlosses, const float* probs,
                                              const int* targets, long long N, long long V) {
  XT_FOR(i, N * V) {
    const long long row = i / V, v = i % V;
    const float indicator = v == (long long)targets[row] ? 1.0f : 0.0f;
    dlogits[i] = (probs[i] - indicator) * dlosses[row];
  }
}

// ---- AdamW ----------------------------------------------------------------------------------

__global__ void adamw_step(float* params, const float* grads, float* m, float* v, long long n,
                           float lr, float beta1, float beta2, float beta1_correction,
                           float beta2_correction, float eps, float weight_decay) {
  XT_FOR(i, n) {
    const float g = grads[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float mhat = mi / beta1_correction, vhat = vi / beta2_correction;
    params[i] -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * params[i]);
  }
}

// ---- half precision ---------------------------------------------------------------------------

// f16 residual with a GELU: out = a + gelu_tanh(b), computed in float, rounded once to f16.
__global__ void residual_gelu_f16(xt_f16* out, const xt_f16* a, const xt_f16* b, long long n) {
  XT_FOR(i, n) {
    const float x = b[i];
    out[i] = (float)a[i] + xt_gelu_tanh(x);
  }
}

// bf16 layer norm, one block per row, statistics in float by block reductions.
__global__ void layernorm_forward_bf16(xt_bf16* out, const xt_bf16* inp, const xt_bf16* weight,
                                       const xt_bf16* bias, long long N, long long C) {
  const unsigned int t = xt_thread_in_block(), nt = xt_block_threads();
  for (long long row = xt_block_id(); row < N; row += xt_num_blocks()) {
    const xt_bf16* x = inp + row * C;
    float s = 0.0f;
    for (long long c = t; c < C; c += nt) s += float(x[c]);
    const float m = xt_block_reduce_add(s) / (float)C;
    float v = 0.0f;
    for (long long c = t; c < C; c += nt) {
      const float d = float(x[c]) - m;
      v += d * d;
    }
    const float r = 1.0f / sqrtf(xt_block_reduce_add(v) / (float)C + 1e-5f);
    for (long long c = t; c < C; c += nt)
      out[row * C + c] = (float(x[c]) - m) * r * float(weight[c]) + float(bias[c]);
  }
}

// ---- shared memory and atomics ----------------------------------------------------------------

// Histogram of ids in [0, 64): per-block counts in static shared memory, then one atomic add
// per bin and block.
__global__ void histogram64(unsigned int* bins, const int* ids, long long n) {
  __shared__ unsigned int local[64];
  const unsigned int t = xt_thread_in_block(), nt = xt_block_threads();
  for (unsigned int b = t; b < 64u; b += nt) local[b] = 0u;
  __syncthreads();
  XT_FOR(i, n) {
    const int id = ids[i];
    if (id >= 0 && id < 64) xt_atomic_add(&local[id], 1u);
  }
  __syncthreads();
  for (unsigned int b = t; b < 64u; b += nt)
    if (local[b] != 0u) xt_atomic_add(&bins[b], local[b]);
}

// Per-block sums through dynamic shared memory (blockDim.x floats), tree-reduced; the block
// size must be a power of two.
__global__ void block_sums_dynamic(float* sums, const float* x, long long n) {
  extern __shared__ float part[];
  const unsigned int t = threadIdx.x;
  const long long i = (long long)blockIdx.x * blockDim.x + t;
  part[t] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (unsigned int s = blockDim.x / 2u; s > 0u; s /= 2u) {
    if (t < s) part[t] += part[t + s];
    __syncthreads();
  }
  if (t == 0u) sums[blockIdx.x] = part[0];
}

// A warp vote: count[0] += the number of warps with any negative value, via the ballot.
__global__ void count_negative_warps(unsigned long long* count, const float* x, long long n) {
  const long long i = xt_global_id();
  const int neg = i < n && x[i] < 0.0f;
  const unsigned long long mask = xt_ballot(neg);
  if (xt_lane_id() == 0 && mask != 0ull && xt_any(neg)) xt_atomic_add(count, 1ull);
}
