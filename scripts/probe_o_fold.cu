// probe_o_fold.cu: a probe for folding the o projection (and its residual add) into kiln's decode
// attention cluster launch, as a split-K over heads (bench/NOTES-decode.md, session 26). NOT one of
// kiln's kernels: compiled only by scripts/probe_o_fold.py, which times kiln's attention_cluster ->
// fused_linear (o + residual) chain against this one launch.
//
//   probe_attn_o_fold(q, k_cache, v_cache, positions, cache_base, wo, residual, y, ws, counters,
//                     heads, kv_heads, head_dim, scale, kv_rows, split_len, min_split_len, hidden, stage)
//
// One cluster of 8 split blocks per head, exactly kiln's attention_cluster<bf16, 1> up to its
// merge (the same split_block, the same merge arithmetic, in every block instead of block 0 only:
// each block then holds the head's output a_h, rounded to bf16 as kiln stores it). Then block s of
// head h's cluster computes the head's share of the o projection for output rows
// [s * R, (s + 1) * R), R = hidden / 8: part[h][j] = sum_d wo[j, h * head_dim + d] * a_h[d] (f32),
// stores it into ws (f32 [heads][hidden]), fences, and counts itself in counters[s] (u32 [8], zero
// at start). The block that brings counters[s] to `heads` (the last head to finish that row slice)
// sums the slice's partials in head order, y[j] = bf16(bf16(sum_h part[h][j]) + residual[j]) (the
// fused_linear residual epilogue), and resets counters[s] to 0 for the next launch. Deterministic:
// the sum order depends only on the shape, never on which block is last.
//
// The block's wo slice (R rows x head_dim, row stride heads * head_dim) depends on nothing, so it is
// requested before the wait for the prior grid: stage = 1 copies it into dynamic shared memory with
// cp.async (R * head_dim * 2 bytes), stage = 0 only prefetches it into the L2 and loads it after the
// merge (for slices too large to stage: the 8B shape's 128 KB). stage | 2: timing only, the
// partial sums are stored but never reduced (y is not written): the price of the reduction.
//
// Geometry: grid (heads, 8) in clusters of (1, 8), block 256, dynamic shared R * head_dim * 2 bytes
// when stage = 1. head_dim 64 or 128, hidden % 8 == 0, heads <= 64.
#include "attention_split.cu"  // kiln::split_block and the cluster helpers, the kernel it extends
#include "probe_common.cuh"

#define OF_SPLITS KILN_ATTN_CLUSTER_SPLITS

__device__ __forceinline__ void of_prefetch_l2(const void* g) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(g));
}

extern "C" __global__ void __launch_bounds__(KILN_ATTN_SPLIT_THREADS, 3) __cluster_dims__(1, OF_SPLITS, 1)
    probe_attn_o_fold(const __nv_bfloat16* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache,
                      const int* positions, const int* cache_base, const __nv_bfloat16* wo,
                      const __nv_bfloat16* residual, __nv_bfloat16* y, float* ws, unsigned int* counters,
                      unsigned int heads, unsigned int kv_heads, unsigned int head_dim, float scale,
                      unsigned int kv_rows, unsigned int planned_len, unsigned int min_split_len,
                      unsigned int hidden, unsigned int stage) {
  using namespace kiln;
  using T = __nv_bfloat16;
  extern __shared__ __align__(16) unsigned char of_dyn[];
  __shared__ SplitShared sh;
  __shared__ float slots[KILN_ATTN_CLUSTER_SLOTS];
  __shared__ __align__(16) float att[KILN_ATTN_SPLIT_MAX_HEAD_DIM];
  __shared__ unsigned int last;
  constexpr unsigned int S = OF_SPLITS;
  const unsigned int h = blockIdx.x, s = blockIdx.y;
  const unsigned int R = hidden / S, K = heads * head_dim, C = head_dim / 8;  // 16-byte chunks per row
  const T* wslice = wo + (size_t)(s * R) * K + (size_t)h * head_dim;
  // The weight slice first: it depends on no grid.
  if (stage & 1) {
    for (unsigned int e = threadIdx.x; e < R * C; e += blockDim.x) {
      const unsigned int j = e / C, c = e % C;
      cp_async16(of_dyn + (size_t)e * 16, wslice + (size_t)j * K + c * 8);
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  } else {
    for (unsigned int j = threadIdx.x; j < R; j += blockDim.x) {
      for (unsigned int c = 0; c < C; c += 8) of_prefetch_l2(wslice + (size_t)j * K + c * 8);
    }
  }
  const unsigned int group = heads / kv_heads;
  const unsigned int g = h / group;
  const int p = __ldcg(positions);
  const long long base_t = __ldcg(cache_base);
  const unsigned int split_len = live_split_len(p, S, planned_len, min_split_len);
  const unsigned int n_active = p < 0 ? 0u : min((unsigned int)p / split_len + 1u, S);
  const unsigned int slot = head_dim + 2;
  if (!KILN_ATTN_KV_EARLY) wait_prior_grids();
  if (s < n_active) {
    float* wsl = slots - (size_t)h * slot;
    split_block<T, 1>(sh, q, k_cache, v_cache, wsl, 0, h, 1, g, 0, (long long)s * split_len, split_len, p, base_t,
                      heads, kv_heads, head_dim, scale, kv_rows, 1, KILN_ATTN_KV_EARLY);
  } else if (KILN_ATTN_KV_EARLY) {
    wait_prior_grids();
  }
  cluster_sync();
  // The merge of kiln's attention_cluster, in every block: a_h[d] for d < head_dim.
  if (threadIdx.x < head_dim) {
    const unsigned int d = threadIdx.x;
    float big_m = -inf();
    float num = 0.0f, den = 0.0f;
    float ms[S], as[S], ls[S];
#pragma unroll
    for (unsigned int r = 0; r < S; ++r) {
      if (r < n_active) {
        const float* st = cluster_map(slots, r);
        ms[r] = st[head_dim];
        as[r] = st[d];
        ls[r] = st[head_dim + 1];
      } else {
        ms[r] = -inf();
        as[r] = 0.0f;
        ls[r] = 0.0f;
      }
    }
#pragma unroll
    for (unsigned int r = 0; r < S; ++r) big_m = fmaxf(big_m, ms[r]);
    if (big_m != -inf()) {
#pragma unroll
      for (unsigned int r = 0; r < S; ++r) {
        if (r < n_active) {
          const float w = weight_of(ms[r], big_m);
          num += w * as[r];
          den += w * ls[r];
        }
      }
    }
    att[d] = to_f32(from_f32<T>(den > 0.0f ? num / den : 0.0f));
  }
  cluster_sync();  // every block's reads of the others' slots are done before any exits
  if (stage & 1) asm volatile("cp.async.wait_all;\n" ::: "memory");
  __syncthreads();
  // The head's share of the o projection: a warp covers 32 / C rows per step, lane (row, chunk).
  const unsigned int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const unsigned int rpw = 32 / C, rl = lane / C, c = lane % C;
  float a8[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) a8[i] = att[c * 8 + i];
  for (unsigned int j0 = warp * rpw; j0 < R; j0 += warps * rpw) {
    const unsigned int j = j0 + rl;
    float acc = 0.0f;
    if (j < R) {
      const uint4 wv = (stage & 1) ? *reinterpret_cast<const uint4*>(of_dyn + ((size_t)j * C + c) * 16)
                             : *reinterpret_cast<const uint4*>(wslice + (size_t)j * K + c * 8);
      float wf[8];
      unpack16_as<T>(wv, wf);
#pragma unroll
      for (int i = 0; i < 8; ++i) acc = __fmaf_rn(wf[i], a8[i], acc);
    }
    for (unsigned int o = C / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (c == 0 && j < R) {
      ws[(size_t)h * hidden + s * R + j] = acc;
      __threadfence();
    }
  }
  if (stage & 2) return;  // timing only: no reduction (y is not written)
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counters + s, 1u) == heads - 1 ? 1u : 0u;
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (unsigned int j = threadIdx.x; j < R; j += blockDim.x) {
    const unsigned int n = s * R + j;
    float sum = 0.0f;
    constexpr unsigned int U = 8;
    for (unsigned int h0 = 0; h0 < heads; h0 += U) {
      float v[U];
#pragma unroll
      for (unsigned int u = 0; u < U; ++u) v[u] = h0 + u < heads ? __ldcg(ws + (size_t)(h0 + u) * hidden + n) : 0.0f;
#pragma unroll
      for (unsigned int u = 0; u < U; ++u) sum += v[u];
    }
    y[n] = from_f32<T>(to_f32(from_f32<T>(sum)) + to_f32(residual[n]));
  }
  if (threadIdx.x == 0) counters[s] = 0u;
}
