// Every CUDA spelling the portable subset accepts, used once (compiled for every target by
// the compile tests; docs/kernels.md, "bringing CUDA kernels").
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

__global__ void warp_spellings(float* f, int* i, unsigned long long* u) {
  const int t = threadIdx.x;
  float v = f[t];
  v += __shfl_sync(0xffffffff, v, 0);
  v += __shfl_up_sync(0xffffffff, v, 1);
  v += __shfl_down_sync(0xffffffff, v, 1, 16);
  v += __shfl_xor_sync(0xffffffff, v, 1);
  const int lanes = warpSize;
  i[t] = __shfl_xor_sync(0xffffffff, t, 2) + lanes;
  u[t] = (unsigned long long)__ballot_sync(0xffffffff, v > 0.0f);
  i[t] += __any_sync(0xffffffff, v > 1.0f) + __all_sync(0xffffffff, v > -1.0f);
  __syncwarp();
  f[t] = v;
}

__global__ void atomic_spellings(int* i, unsigned int* u, unsigned long long* ull, long long* ll,
                                 float* f, double* d, __half* h, __nv_bfloat16* b) {
  atomicAdd(i, 1); atomicSub(i, 1); atomicExch(i + 1, 2); atomicMin(i + 2, 0); atomicMax(i + 3, 9);
  atomicCAS(i + 4, 0, 1); atomicAnd(i + 5, 6); atomicOr(i + 6, 1); atomicXor(i + 7, 3);
  atomicAdd(u, 1u); atomicSub(u, 1u); atomicExch(u + 1, 2u); atomicMin(u + 2, 0u); atomicMax(u + 3, 9u);
  atomicCAS(u + 4, 0u, 1u); atomicAnd(u + 5, 6u); atomicOr(u + 6, 1u); atomicXor(u + 7, 3u);
  atomicInc(u + 8, 10u); atomicDec(u + 9, 10u);
  atomicAdd(ull, 1ull); atomicExch(ull + 1, 2ull); atomicMin(ull + 2, 0ull); atomicMax(ull + 3, 9ull);
  atomicCAS(ull + 4, 0ull, 1ull); atomicAnd(ull + 5, 6ull); atomicOr(ull + 6, 1ull); atomicXor(ull + 7, 3ull);
  atomicMin(ll, -1ll); atomicMax(ll + 1, 1ll);
  atomicAdd(f, 1.0f); atomicExch(f + 1, 2.0f); atomicAdd(d, 1.0);
  atomicAdd(h, __float2half(1.0f)); atomicAdd(b, __float2bfloat16(1.0f));
}

__global__ void memory_spellings(float4* o4, const float4* i4, int2* o2, const int2* i2, float* o, const float* in) {
  const int t = threadIdx.x;
  float4 a = __ldcs(i4 + t);
  float4 b = __ldcg(i4 + t);
  float4 c = __ldca(i4 + t);
  float4 d = __ldlu(i4 + t);
  float4 e = __ldcv(i4 + t);
  float4 g = __ldg(i4 + t);
  float4 s = make_float4(a.x + b.x, c.y + d.y, e.z + g.z, a.w);
  __stcs(o4 + t, s);
  __stcg(o4 + t, s);
  __stwb(o4 + t, s);
  __stwt(o4 + t, s);
  int2 p = __ldcs(i2 + t);
  o2[t] = make_int2(p.y, p.x);
  const double2 dd = make_double2(1.0, 2.0);
  const uint4 uu = make_uint4(1u, 2u, 3u, 4u);
  const char4 cc = make_char4(1, 2, 3, 4);
  const longlong2 lq = make_longlong2(1, 2);
  o[t] = __ldcs(in + t) + (float)(dd.y + uu.w + cc.z + lq.x);
}

__global__ void half_spellings(__half* h, __nv_bfloat16* b, float* f) {
  const int t = threadIdx.x;
  __half x = h[t], y = __float2half(2.0f);
  __nv_bfloat16 p = b[t], q = __float2bfloat16_rn(0.5f);
  half z = __hadd(x, y);
  z = __hmul(__hsub(z, x), __hdiv(y, y));
  z = __hfma(z, y, __hneg(__habs(x)));
  z = __hmax(z, __hmin(x, y));
  nv_bfloat16 r = __hadd(p, q) * q;
  h[t] = z;
  b[t] = __float2bfloat16(__bfloat162float(r) + __half2float(__ushort_as_half(__half_as_ushort(x))));
  f[t] = (float)__hlt(x, y) + (float)__hisnan(x) + (float)__hisinf(y) + __bfloat162float(__ushort_as_bfloat16(__bfloat16_as_ushort(p)))
         + __half2float(__double2half(1.0)) + __half2float(__int2half_rn(3)) + __bfloat162float(__int2bfloat16_rn(2));
}

__global__ void group_spellings(float* f, int* i) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<16> tile = cg::tiled_partition<16>(block);
  float v = f[block.thread_rank()];
  v = tile.shfl(v, 0) + tile.shfl_up(v, 1) + tile.shfl_down(v, 1) + tile.shfl_xor(v, 1);
  tile.sync();
  const float hi = cg::reduce(tile, v, cg::greater<float>());
  const float lo = cg::reduce(tile, v, cg::less<float>());
  const float sum = cg::reduce(tile, v, cg::plus<float>());
  i[block.thread_rank()] = (int)(tile.meta_group_rank() * 100 + tile.meta_group_size() + tile.size() + tile.thread_rank())
                           + (int)tile.ballot(v > 0.0f) + tile.any(v > 0.0f) + tile.all(v > 0.0f) + (int)block.size();
  block.sync();
  cg::sync(block);
  f[block.thread_rank()] = hi + lo + sum;
}
