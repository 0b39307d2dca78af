// probe_merge_fold.cu: a probe for folding the decode attention merge into the o projection's
// x load (bench/NOTES-decode.md, session 14 "Next"). NOT one of kiln's kernels: compiled only by
// scripts/probe_merge_fold.py, which times kiln's split -> merge -> GEMV chain against split ->
// (merge + GEMV in one kernel).
//
//   probe_gemv_plain(x, ws, positions, w, y, K, N, heads, head_dim, splits, split_len, min_split_len)
//     y[n] = bf16(sum_k f32(w[n, k]) * f32(x[k])), x bf16 [K] written by the previous grid.
//   probe_gemv_fold(...same...)
//     the same GEMV with x = the merge of the split workspace ws (f32 [heads][splits][head_dim + 2],
//     kiln_attention_split's layout, K = heads * head_dim, one row): for head h, with p =
//     positions[0], L = live_split_len(p) and n = min(p / L + 1, splits) active splits,
//     M = max_s m_s, w_s = exp(m_s - M) / sum_s exp(m_s - M) l_s, x[h, d] = bf16(sum_s w_s acc_s[d])
//     (kiln's merge up to rounding order; the probe checks against kiln's chain with a tolerance).
//
// Geometry: grid ceil(N / 16), block 256: warp w computes rows 16 b + 2 w and + 1. Both kernels
// load their weight rows into registers (16-byte loads, the whole row: K <= 2048), then let their
// dependents launch and wait for the prior grid (PDL), then build x in shared memory and finish.
#include "attention_split.cu"  // kiln::live_split_len, the rule of kiln's split and merge
#include "probe_common.cuh"

#define FOLD_THREADS 256
#define FOLD_ROWS 16
#define FOLD_MAXC 8      // 16-byte chunks per lane per row: K <= 8 * 32 * 8 = 2048
#define FOLD_MAX_K 2048
#define FOLD_MAX_HS 2048  // heads x splits
#define FOLD_SB 8         // splits whose acc a thread loads at once
#define FOLD_MAXE (FOLD_MAX_K / FOLD_THREADS)

template <bool FOLD>
__device__ void probe_gemv(const __nv_bfloat16* x, const float* ws, const int* positions, const __nv_bfloat16* w,
                           __nv_bfloat16* y, unsigned int K, unsigned int N, unsigned int heads, unsigned int head_dim,
                           unsigned int splits, unsigned int split_len, unsigned int min_split_len) {
  __shared__ __align__(16) __nv_bfloat16 xs[FOLD_MAX_K];
  __shared__ float wt[FOLD_MAX_HS], lt[FOLD_MAX_HS];
  const unsigned int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned int k16 = K / 8;
  const unsigned int row0 = blockIdx.x * FOLD_ROWS + 2 * warp;
  // Weight rows into registers before the wait (they depend on nothing).
  uint4 wr[2][FOLD_MAXC];
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int c = 0; c < FOLD_MAXC; ++c) {
      const unsigned int ch = lane + 32 * c;
      wr[j][c] = (row0 + j < N && ch < k16) ? ld_w16(w + (size_t)(row0 + j) * K + 8 * ch) : make_uint4(0, 0, 0, 0);
    }
  int p = 0;
  if constexpr (FOLD) p = ld_cgi(positions);  // a step input: older than the program (kiln's early reads)
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  asm volatile("griddepcontrol.wait;\n" ::: "memory");

  if constexpr (FOLD) {
    const unsigned int L = kiln::live_split_len(p, splits, split_len, min_split_len);
    const unsigned int na = p < 0 ? 0u : min((unsigned int)p / L + 1u, splits);
    const unsigned int stride = head_dim + 2;
    // acc of splits [s0, s0 + FOLD_SB) of this thread's elements, in one round trip; and their
    // weighted sum into v (wt: the per-(head, split) weights below).
    auto load_batch = [&](unsigned int s0, float (&b)[FOLD_MAXE][FOLD_SB]) {
#pragma unroll
      for (int e = 0; e < FOLD_MAXE; ++e) {
        const unsigned int k = threadIdx.x + FOLD_THREADS * e;
        const unsigned int h = k / head_dim, d = k % head_dim;
#pragma unroll
        for (int s = 0; s < FOLD_SB; ++s)
          b[e][s] = (k < K && s0 + s < na) ? ld_cgf(ws + ((size_t)h * splits + s0 + s) * stride + d) : 0.0f;
      }
    };
    float v[FOLD_MAXE];
    auto add_batch = [&](unsigned int s0, const float (&b)[FOLD_MAXE][FOLD_SB]) {
#pragma unroll
      for (int e = 0; e < FOLD_MAXE; ++e) {
        const unsigned int h = min(threadIdx.x + FOLD_THREADS * e, K - 1) / head_dim;
#pragma unroll
        for (int s = 0; s < FOLD_SB; ++s)
          if (s0 + s < na) v[e] = __fmaf_rn(wt[h * na + s0 + s], b[e][s], v[e]);
      }
    };
    float a[FOLD_MAXE][FOLD_SB];
    load_batch(0, a);  // in flight with the (m, l) loads below
    // Per head: M, the denominator, and each active split's weight.
    for (unsigned int t = threadIdx.x; t < heads * na; t += FOLD_THREADS) {
      const unsigned int h = t / na, s = t % na;
      wt[t] = ld_cgf(ws + ((size_t)h * splits + s) * stride + head_dim);  // m, for now
      lt[t] = ld_cgf(ws + ((size_t)h * splits + s) * stride + head_dim + 1);
    }
    __syncthreads();
    if (threadIdx.x < heads) {
      const unsigned int h = threadIdx.x;
      float big_m = -__int_as_float(0x7f800000);
      for (unsigned int s = 0; s < na; ++s) big_m = fmaxf(big_m, wt[h * na + s]);
      float den = 0.0f;
      for (unsigned int s = 0; s < na; ++s) {
        const float m = wt[h * na + s];
        const float e = m == -__int_as_float(0x7f800000) ? 0.0f : __expf(m - big_m);
        den += e * lt[h * na + s];
        wt[h * na + s] = e;
      }
      const float inv = den > 0.0f ? 1.0f / den : 0.0f;
      for (unsigned int s = 0; s < na; ++s) wt[h * na + s] *= inv;
    }
    __syncthreads();
#pragma unroll
    for (int e = 0; e < FOLD_MAXE; ++e) v[e] = 0.0f;
    add_batch(0, a);
    // Splits past the first FOLD_SB: one round trip per FOLD_SB splits for all the elements.
    for (unsigned int s0 = FOLD_SB; s0 < na; s0 += FOLD_SB) {
      load_batch(s0, a);
      add_batch(s0, a);
    }
#pragma unroll
    for (int e = 0; e < FOLD_MAXE; ++e) {
      const unsigned int k = threadIdx.x + FOLD_THREADS * e;
      if (k < K) xs[k] = __float2bfloat16_rn(v[e]);
    }
  } else {
    for (unsigned int i = threadIdx.x; i < k16; i += FOLD_THREADS)
      reinterpret_cast<uint4*>(xs)[i] = ld_cg16(x + 8 * i);
  }
  __syncthreads();
  const uint4* xv = reinterpret_cast<const uint4*>(xs);
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    float acc = 0.0f;
#pragma unroll
    for (int c = 0; c < FOLD_MAXC; ++c) {
      const unsigned int ch = lane + 32 * c;
      if (ch < k16) acc = dot8(wr[j][c], xv[ch], acc);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0 && row0 + j < N) y[row0 + j] = __float2bfloat16_rn(acc);
  }
}

#define FOLD_KERNEL(NAME, FOLD)                                                                          \
  extern "C" __global__ void __launch_bounds__(FOLD_THREADS, 1)                                        \
      NAME(const __nv_bfloat16* x, const float* ws, const int* positions, const __nv_bfloat16* w,       \
           __nv_bfloat16* y, unsigned int K, unsigned int N, unsigned int heads, unsigned int head_dim,  \
           unsigned int splits, unsigned int split_len, unsigned int min_split_len) {                   \
    probe_gemv<FOLD>(x, ws, positions, w, y, K, N, heads, head_dim, splits, split_len, min_split_len);  \
  }
FOLD_KERNEL(probe_gemv_plain, false)
FOLD_KERNEL(probe_gemv_fold, true)
