// probe_cluster_merge.cu: a probe for merging the decode attention's splits inside one
// thread-block cluster through distributed shared memory, with no merge launch and no workspace
// round trip through the L2 (bench/NOTES-decode.md, session 15 "Next"). NOT one of kiln's
// kernels: compiled only by scripts/probe_cluster_merge.py, which times kiln's split -> merge ->
// o GEMV chain against this kernel -> o GEMV.
//
//   probe_split_cm_g{G}(q, k_cache, v_cache, positions, cache_base, out, heads, kv_heads,
//                       head_dim, scale, kv_rows, split_len, min_split_len)
//     out[h, d] = bf16(attention of q[h] over cache rows [base, base + p] of kv head h / group),
//     one query row (rows = 1), p = positions[0], base = cache_base[0]: kiln's split + merge
//     (kernels/attention_split.cu) up to rounding order.
//
// Geometry: grid (kv_heads * chunks, 8), block 256, clusters of (1, 8, 1): the 8 blocks of a
// cluster are the 8 splits of one (kv head, chunk of G heads), chunks = ceil(group / G). Each
// block runs kiln's split code (`kiln::attention_split_block`, the same loads and online softmax)
// over live_split_len(p, 8, split_len, min_split_len) keys, with its (acc, m, l) slots in its
// own shared memory instead of the workspace; after a cluster barrier, thread x of block r merges
// output element r * 256 + x of the chunk (G * head_dim <= 8 * 256) from the active blocks'
// slots (two passes: the max, then the weighted sums in split order), writes it, and a second
// barrier keeps every block's shared memory alive until all reads are done.
#include "attention_split.cu"  // kiln::attention_split_block, kiln::live_split_len
#include "probe_common.cuh"

#define CM_SPLITS 8
#define CM_MAX_SLOT (KILN_ATTN_SPLIT_MAX_GROUP * (KILN_ATTN_SPLIT_MAX_HEAD_DIM + 2))

template <int G>
__device__ void probe_split_cm(const __nv_bfloat16* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache,
                               const int* positions, const int* cache_base, __nv_bfloat16* out, unsigned int heads,
                               unsigned int kv_heads, unsigned int head_dim, float scale, unsigned int kv_rows,
                               unsigned int planned_len, unsigned int min_split_len) {
  __shared__ kiln::SplitShared sh;
  __shared__ float slots[CM_MAX_SLOT];
  const unsigned int group = heads / kv_heads;
  const unsigned int chunks = (group + G - 1) / G;
  const unsigned int chunk = blockIdx.x % chunks, g = blockIdx.x / chunks, s = blockIdx.y;
  const unsigned int h0 = g * group + chunk * G;
  const unsigned int nh = min((unsigned int)G, group - chunk * G);
  const unsigned int slot = head_dim + 2;
  // Step inputs, older than the program: read before the wait (kiln's early reads).
  const int p = __ldcg(positions);
  const long long base_t = __ldcg(cache_base);
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  const unsigned int split_len = kiln::live_split_len(p, CM_SPLITS, planned_len, min_split_len);
  const long long lo = (long long)s * split_len;
  const unsigned int n_active = p < 0 ? 0u : min((unsigned int)p / split_len + 1u, (unsigned int)CM_SPLITS);
  if (s < n_active) {
    long long base = base_t, hi = min(lo + (long long)split_len, (long long)p + 1);
    if (base < 0) {
      base = 0;
      hi = lo;
    } else {
      hi = min(hi, (long long)kv_rows - base);
    }
    const bool vec = head_dim % 8 == 0 && kiln::aligned16(k_cache) && kiln::aligned16(v_cache);
    // kiln's split code writes slot (t * heads + h0 + i) * splits + s of its workspace: with t = 0,
    // splits = 1 and s = 0 that is slots + i * slot once the base is shifted by h0 slots.
    float* ws = slots - (size_t)h0 * slot;
    if (vec) {
      kiln::attention_split_block<__nv_bfloat16, G, true>(sh, q, k_cache, v_cache, ws, 0, h0, nh, g, 0, lo, hi, base,
                                                          heads, kv_heads, head_dim, scale, 1);
    } else {
      kiln::attention_split_block<__nv_bfloat16, G, false>(sh, q, k_cache, v_cache, ws, 0, h0, nh, g, 0, lo, hi,
                                                           base, heads, kv_heads, head_dim, scale, 1);
    }
  }
  kiln::cluster_sync();
  const unsigned int e = s * blockDim.x + threadIdx.x;
  if (e < nh * head_dim) {
    const unsigned int i = e / head_dim, d = e % head_dim;
    const float* mine = slots + (size_t)i * slot;
    float big_m = -kiln::inf();
    for (unsigned int r = 0; r < n_active; ++r) big_m = fmaxf(big_m, kiln::cluster_map(mine, r)[head_dim]);
    float num = 0.0f, den = 0.0f;
    if (big_m != -kiln::inf()) {
      for (unsigned int r = 0; r < n_active; ++r) {
        const float* st = kiln::cluster_map(mine, r);
        const float m = st[head_dim];
        const float w = m == -kiln::inf() ? 0.0f : expf(m - big_m);
        num += w * st[d];
        den += w * st[head_dim + 1];
      }
    }
    out[(size_t)(h0 + i) * head_dim + d] = __float2bfloat16_rn(den > 0.0f ? num / den : 0.0f);
  }
  kiln::cluster_sync();  // no block leaves while another may still read its slots
}

#define CM_KERNEL(G)                                                                                             \
  extern "C" __global__ void __cluster_dims__(1, CM_SPLITS, 1) __launch_bounds__(KILN_ATTN_SPLIT_THREADS, 1)     \
      probe_split_cm_g##G(const __nv_bfloat16* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache,    \
                          const int* positions, const int* cache_base, __nv_bfloat16* out, unsigned int heads,    \
                          unsigned int kv_heads, unsigned int head_dim, float scale, unsigned int kv_rows,        \
                          unsigned int split_len, unsigned int min_split_len) {                                  \
    probe_split_cm<G>(q, k_cache, v_cache, positions, cache_base, out, heads, kv_heads, head_dim, scale, kv_rows, \
                      split_len, min_split_len);                                                                 \
  }
CM_KERNEL(1)
CM_KERNEL(2)
CM_KERNEL(4)
