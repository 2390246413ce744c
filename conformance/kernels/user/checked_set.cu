// The portable kernels the tests run against f64 references on every backend: the host
// backend's CPU execution (core/tests/cpu_kernels.rs, 32 and 64 lanes) and emulated CUDA and
// ROCm (cli-tests/user_kernels.rs); compiled unmodified for sm_80, sm_90 and gfx90a by the
// backends' portable_v2 tests.
extern "C" __global__ void gelu_erf(const float* x, float* y, long long n) {
  XT_FOR(i, n) { float v = x[i]; y[i] = 0.5f * v * (1.0f + erff(v * (float)M_SQRT1_2)); }
}
extern "C" __global__ void gelu_tanh(const float* x, float* y, long long n) {
  const float k = sqrtf(2.0f / XT_PI_F);
  XT_FOR(i, n) { float v = x[i]; y[i] = 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v))); }
}
// C++ linkage on purpose: the CPU table takes `&residual`.
__global__ void residual(float* out, const float* a, const float* b, long long n) {
  XT_FOR(i, n) out[i] = a[i] + b[i];
}
__global__ void encoder(float* out, const int* tokens, const float* wte, const float* wpe, int B, int T, int C) {
  XT_FOR(i, (long long)B * T * C) {
    int c = (int)(i % C);
    long long bt = i / C;
    int t = (int)(bt % T);
    out[i] = wte[(long long)tokens[bt] * C + c] + wpe[(long long)t * C + c];
  }
}
__global__ void __launch_bounds__(256) layernorm(float* out, const float* x, const float* w, const float* b, int rows, int C) {
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + (long long)r * C;
    float s = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) s += xr[c];
    const float mean = xt_block_reduce_add(s) / C;
    float v = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) { float d = xr[c] - mean; v += d * d; }
    const float rstd = 1.0f / sqrtf(xt_block_reduce_add(v) / C + 1e-5f);
    for (int c = threadIdx.x; c < C; c += blockDim.x) out[(long long)r * C + c] = (xr[c] - mean) * rstd * w[c] + b[c];
  }
}
// One warp per row, reductions by shuffles (any warp size; blockDim a multiple of it).
__global__ void softmax_warp(float* out, const float* x, int rows, int C) {
  const int ws = xt_warp_size(), lane = xt_lane_id();
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / ws;
  const int nwarps = gridDim.x * blockDim.x / ws;
  for (int r = warp; r < rows; r += nwarps) {
    const float* xr = x + (long long)r * C;
    float m = -INFINITY;
    for (int c = lane; c < C; c += ws) m = fmaxf(m, xr[c]);
    for (int o = ws / 2; o > 0; o /= 2) m = fmaxf(m, xt_shfl_xor(m, o));
    float s = 0.0f;
    for (int c = lane; c < C; c += ws) s += expf(xr[c] - m);
    for (int o = ws / 2; o > 0; o /= 2) s += xt_shfl_down(s, (unsigned)o);
    s = xt_shfl(s, 0);
    for (int c = lane; c < C; c += ws) out[(long long)r * C + c] = expf(xr[c] - m) / s;
  }
}
// Cross-entropy from logits: one block per row, block max and sum.
__global__ void cross_entropy(float* loss, const float* logits, const int* targets, int rows, int V) {
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* l = logits + (long long)r * V;
    float m = -INFINITY;
    for (int c = threadIdx.x; c < V; c += blockDim.x) m = fmaxf(m, l[c]);
    m = xt_block_reduce_max(m);
    float s = 0.0f;
    for (int c = threadIdx.x; c < V; c += blockDim.x) s += expf(l[c] - m);
    s = xt_block_reduce_add(s);
    if (threadIdx.x == 0) loss[r] = logf(s) + m - l[targets[r]];
  }
}
__global__ void adamw(float* p, const float* g, float* m, float* v, long long n, float lr, float b1, float b2, float eps, float wd, int t) {
  const float c1 = 1.0f - powf(b1, (float)t), c2 = 1.0f - powf(b2, (float)t);
  XT_FOR(i, n) {
    float gi = g[i];
    float mi = b1 * m[i] + (1.0f - b1) * gi;
    float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi; v[i] = vi;
    p[i] -= lr * ((mi / c1) / (sqrtf(vi / c2) + eps) + wd * p[i]);
  }
}
// f16 arithmetic: each operation computed in float and rounded once.
__global__ void axpb_f16(xt_f16* y, const xt_f16* x, xt_f16 a, long long n) {
  XT_FOR(i, n) y[i] = x[i] * a + xt_f16(1.0f);
}
// bf16 row sums in float, one rounding at the end; static shared memory.
__global__ void rowsum_bf16(xt_bf16* out, const xt_bf16* x, int rows, int C) {
  __shared__ float part[1024];
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    float s = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) s += (float)x[(long long)r * C + c];
    part[threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
      float t = 0.0f;
      for (unsigned k = 0; k < blockDim.x; k++) t += part[k];
      out[r] = xt_bf16(t);
    }
    __syncthreads();
  }
}
// Atomics: a histogram, a float sum, an int maximum, an exchange counter.
__global__ void atomics(unsigned* hist, float* total, int* maxv, unsigned long long* count, const int* x, long long n, int bins) {
  XT_FOR(i, n) {
    int v = x[i];
    xt_atomic_add(&hist[((v % bins) + bins) % bins], 1u);
    xt_atomic_add(total, (float)v);
    xt_atomic_max(maxv, v);
    xt_atomic_add(count, 1ull);
  }
}
// Ballots: per warp, how many of its lanes hold a positive value (and any/all), the mask's
// lowest and highest lanes; blocks of any size (the last warp of a block may be partial).
__global__ void ballots(int* out, const float* x) {
  const long long i = xt_global_id();
  const int ws = xt_warp_size();
  unsigned long long b = xt_ballot(x[i] > 0.0f);
  unsigned long long live = xt_ballot(1);
  int any = xt_any(x[i] > 0.0f), all = xt_all(x[i] > 0.0f);
  const long long w = (long long)blockIdx.x * ((blockDim.x + ws - 1) / ws) + threadIdx.x / ws;
  // Every lane checks that it sees the same masks as lane 0.
  const int same = xt_shfl((long long)b, 0) == (long long)b && xt_shfl((long long)live, 0) == (long long)live;
  if (!same) out[5 * w + 4] = -1;
  if (xt_lane_id() == 0) {
    out[5 * w] = xt_popcll(b);
    out[5 * w + 1] = any;
    out[5 * w + 2] = all;
    out[5 * w + 3] = xt_popcll(live);
  }
}
// Divergent barriers: half the warp at __syncthreads, half at a shuffle.
__global__ void divergent(int* out) {
  if (threadIdx.x < 16) __syncthreads();
  else out[threadIdx.x] = xt_shfl((int)threadIdx.x, 0);
}
// Dynamic shared memory: each block reverses its chunk.
__global__ void reverse_blocks(float* y, const float* x) {
  extern __shared__ float buf[];
  const unsigned t = threadIdx.x, nt = blockDim.x;
  const long long base = (long long)blockIdx.x * nt;
  buf[t] = x[base + t];
  __syncthreads();
  y[base + t] = buf[nt - 1 - t];
}
// Shuffles inside segments of `width` lanes (a power of two up to the warp size), and warp
// reductions; blockDim a multiple of the warp size.
__global__ void shuffles(float* out, int* outi, const float* x, int width) {
  const long long i = xt_global_id();
  const float v = x[i];
  out[6 * i] = xt_shfl(v, 3, width);
  out[6 * i + 1] = xt_shfl_up(v, 2u, width);
  out[6 * i + 2] = xt_shfl_down(v, 5u, width);
  out[6 * i + 3] = xt_shfl_xor(v, 1, width);
  out[6 * i + 4] = xt_warp_reduce_add(v);
  out[6 * i + 5] = xt_warp_reduce_max(v);
  outi[2 * i] = xt_shfl_xor((int)i, width / 2, width);
  outi[2 * i + 1] = xt_warp_reduce_min((int)(v * 1000.0f));
}
// Compare-and-swap and exchange: a counter every thread increments by a CAS loop, and slots
// every thread exchanges its index into (each keeps the index of the last writer).
__global__ void cas_exch(unsigned* count, int* slots, int* seen, long long n, int nslots) {
  XT_FOR(i, n) {
    unsigned old = *(volatile unsigned*)count, prev;
    while ((prev = xt_atomic_cas(count, old, old + 1u)) != old) old = prev;
    seen[i] = xt_atomic_exch(&slots[i % nslots], (int)i);
  }
}
// Float max/min with NaN operands, signalling ones included: the number wins, a NaN only when
// both are (CUDA's fmaxf/fminf; the CPU execution must not follow glibc, which returns a quiet
// NaN for a signalling one). Also xt_max/xt_min, the double forms and the f32 atomics.
__global__ void nan_minmax(float* out, double* outd, const float* a, const float* b, const double* da, const double* db, long long n) {
  XT_FOR(i, n) {
    out[i] = fmaxf(a[i], b[i]);
    out[n + i] = fminf(a[i], b[i]);
    out[2 * n + i] = xt_max(a[i], b[i]);
    out[3 * n + i] = xt_min(a[i], b[i]);
    out[4 * n + i] = a[i];
    xt_atomic_max(&out[4 * n + i], b[i]);
    out[5 * n + i] = a[i];
    xt_atomic_min(&out[5 * n + i], b[i]);
    outd[i] = fmax(da[i], db[i]);
    outd[n + i] = fmin(da[i], db[i]);
  }
}
