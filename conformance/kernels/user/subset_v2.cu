// Every name of the portable subset v2 (docs/kernels.md), used once or more: compiled
// unmodified for every target by the backends' tests.

__global__ void warp_ops(const float* x, float* out, unsigned long long* ballots, int* flags) {
  const int lane = xt_lane_id();
  const int ws = xt_warp_size();
  const unsigned int t = xt_thread_in_block();
  float v = x[t];
  float s = xt_shfl(v, 0) + xt_shfl_up(v, 1u) + xt_shfl_down(v, 2u, 16) + xt_shfl_xor(v, 1);
  int i = xt_shfl_xor((int)t, 3, 8);
  unsigned int u = xt_shfl((unsigned int)t, lane ^ 1);
  long long ll = xt_shfl_down((long long)t, 1u);
  unsigned long long ull = xt_shfl_up((unsigned long long)t, 4u, ws);
  double d = xt_shfl_xor((double)v, 2);
  float wsum = xt_warp_reduce_add(v), wmax = xt_warp_reduce_max(v), wmin = xt_warp_reduce_min(v);
  int wi = xt_warp_reduce_add((int)t);
  double wd = xt_warp_reduce_max((double)v);
  unsigned long long b = xt_ballot(v > 0.0f);
  const int bits = xt_popcll(b) + xt_popc((unsigned int)b) + xt_clz(t) + xt_clzll(b);
  if (lane == 0) ballots[t / (unsigned int)ws] = b;
  flags[t] = xt_any(v > 1.0f) * 2 + xt_all(v > -1.0f);
  out[t] = s + (float)i + (float)u + (float)ll + (float)ull + (float)d + wsum + wmax + wmin +
           (float)wi + (float)wd + (float)bits;
}

__global__ void __launch_bounds__(256) block_ops(const float* x, float* out, double* outd, int* outi) {
  const unsigned int t = xt_thread_in_block();
  float v = x[xt_global_id()];
  float a = xt_block_reduce_add(v), m = xt_block_reduce_max(v), n = xt_block_reduce_min(v);
  double ad = xt_block_reduce_add((double)v);
  int ai = xt_block_reduce_max((int)t) + xt_block_reduce_min((int)t) + xt_block_reduce_add(1);
  if (t == 0) {
    out[xt_block_id() * 3] = a;
    out[xt_block_id() * 3 + 1] = m;
    out[xt_block_id() * 3 + 2] = n;
    outd[xt_block_id()] = ad + xt_block_reduce_max(1.0) * 0.0 + xt_block_reduce_min(2.0) * 0.0;
    outi[xt_block_id()] = ai;
  }
}

__global__ void atomics(float* f, double* d, int* i, unsigned int* u, unsigned long long* ull) {
  const long long g = xt_global_id();
  float of = xt_atomic_add(&f[0], 1.0f) + xt_atomic_min(&f[1], (float)g) + xt_atomic_max(&f[2], (float)g);
  double od = xt_atomic_add(&d[0], 0.5);
  int oi = xt_atomic_add(&i[0], 1) + xt_atomic_min(&i[1], (int)g) + xt_atomic_max(&i[2], (int)g) +
           xt_atomic_cas(&i[3], 0, 7) + xt_atomic_exch(&i[4], (int)g);
  unsigned int ou = xt_atomic_add(&u[0], 2u) + xt_atomic_min(&u[1], (unsigned int)g) +
                    xt_atomic_max(&u[2], (unsigned int)g) + xt_atomic_cas(&u[3], 0u, 9u) +
                    xt_atomic_exch(&u[4], 1u);
  unsigned long long oull = xt_atomic_add(&ull[0], 3ull) + xt_atomic_min(&ull[1], (unsigned long long)g) +
                            xt_atomic_max(&ull[2], (unsigned long long)g) +
                            xt_atomic_cas(&ull[3], 0ull, 5ull) + xt_atomic_exch(&ull[4], 2ull);
  if (of + (float)od + (float)oi + (float)ou + (float)oull == -1.0f) f[3] = 0.0f;
}

__global__ void halves(const xt_f16* a, const xt_bf16* b, xt_f16* oa, xt_bf16* ob, float* of, long long n) {
  XT_FOR(k, n) {
    xt_f16 h = a[k];
    xt_bf16 g = b[k];
    float x = h;
    float y = float(g);
    xt_f16 s = h + h;
    xt_f16 t(0.5);
    t += h;
    t *= 2;
    t -= 1.0;
    t /= 3.0f;
    xt_bf16 u = g * 3.0f;
    u = -u;
    oa[k] = (h < s && h != t && h <= 1.0f && 2.0 > h) ? s : xt_f16(x * y);
    ob[k] = u + xt_bf16_from_bits(b[k].bits) - g * g / g;
    of[k] = (float)xt_f16_from_bits(0x3c00) + x + y + xt_f16_to_f32(a[k].bits) + xt_bf16_to_f32(b[k].bits) +
            (g >= u ? 1.0f : 0.0f) + (1 + h) + (h * 2.0) + (2u - g);
    oa[k] = xt_f16(1);
    ob[k] = 3;
    ob[k] = (double)x;
  }
}

__global__ void constants(float* f, double* d) {
  d[0] = M_PI + M_E + M_SQRT2 + M_SQRT1_2 + M_2_SQRTPI + M_LN2;
  f[0] = XT_PI_F + XT_E_F + XT_SQRT2_F + XT_SQRT1_2_F + XT_2_SQRTPI_F + XT_LN2_F;
  f[1] = INFINITY;
  f[2] = NAN;
  f[3] = -INFINITY;
  f[4] = xt_gelu_erf(1.0f) + xt_gelu_tanh(1.0f);
  d[1] = xt_gelu_erf(1.0) + xt_gelu_tanh(1.0);
  f[5] = FLT_MAX + FLT_MIN + FLT_EPSILON;
  d[2] = DBL_MAX + DBL_MIN + DBL_EPSILON;
  const long long l = (long long)INT_MAX + INT_MIN + UINT_MAX + (LLONG_MAX / 2) + (LLONG_MIN / 2) + (long long)(ULLONG_MAX >> 2);
  f[6] = (float)l + (isnan(f[2]) ? 1.0f : 0.0f) + (isinf(f[1]) ? 1.0f : 0.0f) + (isfinite(f[0]) ? 1.0f : 0.0f) +
         (signbit(f[3]) ? 1.0f : 0.0f) + xt_bits_f32(xt_f32_bits(f[0])) + (float)xt_bits_f64(xt_f64_bits(d[0]));
}

__global__ void shared_mem(const float* x, float* out, long long n) {
  extern __shared__ float dyn[];
  __shared__ float stat[64];
  const unsigned int t = xt_thread_in_block();
  dyn[t] = x[t];
  if (t < 64u) stat[t] = 2.0f * x[t];
  __syncthreads();
  out[t] = dyn[xt_block_threads() - 1u - t] + (t < 64u ? stat[t] : 0.0f) + (float)(blockDim.x + gridDim.x + blockIdx.x + threadIdx.x);
}

extern "C" __global__ void with_c_linkage(int* out) { out[0] = 1; }
