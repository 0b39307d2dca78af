// attention.cu: kiln_attention_{f32,f16,bf16}(q, k_cache, v_cache, positions, cache_base, out,
//               rows, heads, kv_heads, head_dim, scale, kv_rows)
//
// Check on a GPU: python3 scripts/kernel_check.py --only attention   (NVRTC build, no GPU:
// cargo test --test kernels_compile)
//
// Semantics (Op::Attention): causal grouped-query attention of each query row over its
// sequence's cache rows; decode and prefill are the same kernel. For row t with
// p = positions[t], base = cache_base[t]:
// - p < 0 (padding): out[t, :] = 0;
// - else, for head h (kv head g = h / (heads / kv_heads)), over j in 0..=p:
//     s_j = scale * dot(q[t, h], k_cache[base + j, g])        (f32)
//     out[t, h] = sum_j softmax(s)_j * v_cache[base + j, g]   (f32, rounded once)
// The KV length (p + 1) is read from device memory, so one plan serves every length.
// Rows outside [0, kv_rows) are never read (the length is clamped; a negative base gives zeros).
//
// CPU reference:
//   for t, h: if p < 0: out = 0; continue
//     s[j] = scale * sum_d f32(q[t,h,d]) * f32(k[base+j,g,d]);  m = max_j s[j]
//     e[j] = exp(s[j] - m);  out[t,h,d] = T(sum_j e[j] * f32(v[base+j,g,d]) / sum_j e[j])
//
// Algorithm: one block of 256 threads (8 warps) per (row, head). Warp w takes 4 consecutive keys
// at a time (keys 4w..4w+3, then 32 further on, ...); for each key the warp computes the dot
// product (lane-strided over the head dims, then a shuffle reduction) and updates its running
// max / sum / accumulator (online softmax, f32). The 8 partial states are merged through
// shared memory at the end.
// Correctness first: K/V are re-read for every query row of a prefill (a flash-attention style
// tiling replaces this later). head_dim <= KILN_ATTN_MAX_HEAD_DIM.
//
// Geometry: grid (rows, heads), block 256.
#include "common.cuh"

namespace kiln {

#define KILN_ATTN_WARPS 8
#define KILN_ATTN_MAX_HEAD_DIM 256
#define KILN_ATTN_DIMS_PER_LANE (KILN_ATTN_MAX_HEAD_DIM / 32)
#define KILN_ATTN_KEYS_PER_WARP 4

template <typename T>
__device__ void attention(const T* q, const T* k_cache, const T* v_cache,
                          const int* positions, const int* cache_base, T* __restrict__ out,
                          unsigned int rows, unsigned int heads, unsigned int kv_heads, unsigned int head_dim,
                          float scale, unsigned int kv_rows) {
  __shared__ float part_m[KILN_ATTN_WARPS];
  __shared__ float part_l[KILN_ATTN_WARPS];
  __shared__ float part_acc[KILN_ATTN_WARPS][KILN_ATTN_MAX_HEAD_DIM];

  const unsigned int t = blockIdx.x, h = blockIdx.y;
  if (t >= rows || h >= heads || kv_heads == 0) return;
  const unsigned int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  T* o = out + ((size_t)t * heads + h) * head_dim;

  const int p = positions[t];
  const long long base = cache_base[t];
  long long len = (long long)p + 1;
  if (base + len > (long long)kv_rows) len = (long long)kv_rows - base;
  if (p < 0 || base < 0 || len <= 0 || head_dim > KILN_ATTN_MAX_HEAD_DIM) {
    for (unsigned int d = threadIdx.x; d < head_dim; d += blockDim.x) o[d] = kiln::zero<T>();
    return;
  }

  const unsigned int group = heads / kv_heads;
  const unsigned int g = h / (group == 0 ? 1 : group);
  const size_t kv_dim = (size_t)kv_heads * head_dim;
  const T* qh = q + ((size_t)t * heads + h) * head_dim;
  const T* kh = k_cache + (size_t)base * kv_dim + (size_t)g * head_dim;
  const T* vh = v_cache + (size_t)base * kv_dim + (size_t)g * head_dim;

  float qv[KILN_ATTN_DIMS_PER_LANE], acc[KILN_ATTN_DIMS_PER_LANE];
#pragma unroll
  for (int c = 0; c < KILN_ATTN_DIMS_PER_LANE; ++c) {
    const unsigned int d = lane + 32 * c;
    qv[c] = d < head_dim ? kiln::to_f32(qh[d]) : 0.0f;
    acc[c] = 0.0f;
  }
  float m = -kiln::inf(), l = 0.0f;
  // Warp w takes keys [j0, j0 + KEYS) with j0 = w * KEYS + i * WARPS * KEYS: the loads of KEYS
  // keys are independent, so they are in flight together.
  constexpr int KEYS = KILN_ATTN_KEYS_PER_WARP;
  for (long long j0 = (long long)warp * KEYS; j0 < len; j0 += KILN_ATTN_WARPS * KEYS) {
    float s[KEYS];
#pragma unroll
    for (int u = 0; u < KEYS; ++u) {
      const long long j = j0 + u;
      float dot = 0.0f;
      if (j < len) {
        const T* kr = kh + (size_t)j * kv_dim;
#pragma unroll
        for (int c = 0; c < KILN_ATTN_DIMS_PER_LANE; ++c) {
          const unsigned int d = lane + 32 * c;
          if (d < head_dim) dot = __fmaf_rn(qv[c], kiln::to_f32(kr[d]), dot);
        }
      }
      s[u] = dot;
    }
    float m_new = m;
#pragma unroll
    for (int u = 0; u < KEYS; ++u) {
      s[u] = j0 + u < len ? scale * kiln::warp_sum(s[u]) : -kiln::inf();
      m_new = fmaxf(m_new, s[u]);
    }
    if (m_new == -kiln::inf()) continue;  // every score so far is -inf: nothing to weigh yet
    const float corr = m == -kiln::inf() ? 0.0f : expf(m - m_new);
    float e[KEYS];
    l = l * corr;
#pragma unroll
    for (int u = 0; u < KEYS; ++u) {
      e[u] = s[u] == -kiln::inf() ? 0.0f : expf(s[u] - m_new);
      l += e[u];
    }
#pragma unroll
    for (int c = 0; c < KILN_ATTN_DIMS_PER_LANE; ++c) acc[c] *= corr;
#pragma unroll
    for (int u = 0; u < KEYS; ++u) {
      if (j0 + u >= len) break;
      const T* vr = vh + (size_t)(j0 + u) * kv_dim;
#pragma unroll
      for (int c = 0; c < KILN_ATTN_DIMS_PER_LANE; ++c) {
        const unsigned int d = lane + 32 * c;
        const float vv = d < head_dim ? kiln::to_f32(vr[d]) : 0.0f;
        acc[c] = __fmaf_rn(e[u], vv, acc[c]);
      }
    }
    m = m_new;
  }
  if (lane == 0) {
    part_m[warp] = m;
    part_l[warp] = l;
  }
#pragma unroll
  for (int c = 0; c < KILN_ATTN_DIMS_PER_LANE; ++c) {
    const unsigned int d = lane + 32 * c;
    if (d < head_dim) part_acc[warp][d] = acc[c];
  }
  __syncthreads();
  float mx = -kiln::inf();
#pragma unroll
  for (int w = 0; w < KILN_ATTN_WARPS; ++w) mx = fmaxf(mx, part_m[w]);
  float weight[KILN_ATTN_WARPS];
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < KILN_ATTN_WARPS; ++w) {
    weight[w] = part_m[w] == -kiln::inf() ? 0.0f : expf(part_m[w] - mx);
    total += part_l[w] * weight[w];
  }
  const float inv_total = total > 0.0f ? 1.0f / total : 0.0f;
  for (unsigned int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float v = 0.0f;
#pragma unroll
    for (int w = 0; w < KILN_ATTN_WARPS; ++w) v += part_acc[w][d] * weight[w];
    o[d] = kiln::from_f32<T>(v * inv_total);
  }
}

}  // namespace kiln

#define KILN_ATTENTION(dt, T)                                                                          \
  extern "C" __global__ void __launch_bounds__(256) kiln_attention_##dt(                               \
      const T* q, const T* k_cache, const T* v_cache, const int* positions, const int* cache_base,     \
      T* out, unsigned int rows, unsigned int heads, unsigned int kv_heads, unsigned int head_dim,     \
      float scale, unsigned int kv_rows) {                                                             \
    KILN_TRACE_BLOCK_END();                                                                            \
    kiln::wait_prior_grids();                                                                          \
    kiln::attention<T>(q, k_cache, v_cache, positions, cache_base, out, rows, heads, kv_heads, head_dim,     \
                 scale, kv_rows);                                                                      \
  }
KILN_FOR_EACH_DTYPE(KILN_ATTENTION)
