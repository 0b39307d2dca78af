// attention_split.cu: decode attention split over the KV length, in two launches.
//
//   kiln_attention_split_{dt}(q, k_cache, v_cache, positions, cache_base, workspace,
//                             rows, heads, kv_heads, head_dim, scale, kv_rows, splits, split_len,
//                             min_split_len, early)
//   kiln_attention_merge_{dt}(workspace, positions, out, rows, heads, head_dim, splits, split_len,
//                             min_split_len, early)
//   kiln_attention_cluster_g{1,2,4}_{dt}(q, k_cache, v_cache, positions, cache_base, out, rows,
//                               heads, kv_heads, head_dim, scale, kv_rows, split_len,
//                               min_split_len, chunk_heads, early)
//   the same attention in one launch: 8 splits per (row, kv head, chunk of chunk_heads heads) as
//   one thread-block cluster, merged through distributed shared memory (Kernel::AttentionCluster,
//   planned where its clusters fit in one wave unless KILN_ATTN_CLUSTER=0; sm_90+; see
//   attention_cluster below).
//   early != 0 (planned, Kernel::AttentionSplit / AttentionMerge `early`): positions and cache_base
//   predate the program (plan::early_reads_safe), so they are read before the block waits for the
//   grids before it, taking their L2 round trip off the critical path; the same bits either way.
//   dt in {f32, f16, bf16}: q / cache storage for the split, out storage for the merge.
//
// Check on a GPU: python3 scripts/kernel_check.py --only attention_split --bench   (NVRTC build,
// no GPU: cargo test --test kernels_compile, or python3 scripts/kernel_check.py --compile-only)
//
// Semantics (Kernel::AttentionSplit / AttentionMerge; together they equal Op::Attention for one
// query row per sequence). workspace is f32 [rows][heads][splits][head_dim + 2]. For row t with
// p = positions[t], base = cache_base[t], head h (kv head g = h / (heads / kv_heads)), split s,
// and the live split length L = live_split_len(p) (src/plan/mod.rs `live_split_len`: the p + 1
// keys spread over the splits, rounded up to 16, clamped to [min_split_len, split_len]; split
// and merge compute it alike, so short contexts take more, shorter splits in the same grid):
// - split s is active iff p >= 0 and s * L <= p; an inactive split writes nothing (the
//   merge never reads it). Over j in [s * L, min((s + 1) * L, p + 1)):
//     score_j = scale * dot(q[t, h], k_cache[base + j, g])                       (f32)
//     slot = (acc[0..head_dim], m, l): m = max_j score_j, l = sum_j exp(score_j - m),
//            acc = sum_j exp(score_j - m) * v_cache[base + j, g]
//   Cache rows outside [0, kv_rows) are never read: those positions are dropped, and a split
//   left with none writes (acc = 0, m = -inf, l = 0).
// - merge: n_active = p < 0 ? 0 : min(p / L + 1, splits); M = max over active m_s;
//     out[t, h] = T(sum_s exp(m_s - M) * acc_s / sum_s exp(m_s - M) * l_s)   (splits with
//     m_s = -inf weigh 0); a zero row when n_active == 0 or nothing was weighed.
// The live length p + 1 is read from device memory: one plan serves every length up to
// splits * split_len. KILN_ATTN_SPLIT_MIN_LEN_OVERRIDE (a -D for timing sweeps only) replaces the
// plan's min_split_len; the CPU reference then still uses the plan's.
//
// CPU reference (src/runtime/cpu.rs, sequential):
//   split: for t, h, s active: lo = s * L, hi = min(lo + L, p + 1)
//            sc[j] = scale * sum_d f32(q[t,h,d]) * f32(k[base+j,g,d]);  m = max sc
//            l = sum_j exp(sc[j] - m);  acc[d] = sum_j exp(sc[j] - m) * f32(v[base+j,g,d])
//   merge: M = max_s m_s;  w_s = exp(m_s - M);  out[d] = T(sum_s w_s acc_s[d] / sum_s w_s l_s)
//
// Split algorithm: one block of 256 threads (8 warps) per (row, kv head, head chunk, split).
// The block reads its split's K and V rows once and applies them to every q head of the GQA
// group (a chunk of at most KILN_ATTN_SPLIT_MAX_GROUP = 4 heads, so that the per-head state stays
// in registers; larger groups take several chunks, whose blocks are
// adjacent and share the K/V rows through the L2). A position's head_dim is spread over
// C = pow2ceil(ceil(head_dim / 8)) lanes, 8 dims each (16-byte loads for f16/bf16, two for f32;
// scalar loads when head_dim % 8 != 0 or a cache is misaligned), so a warp covers 32 / C
// positions at once. K and V rows are software-pipelined in stages of KILN_ATTN_SPLIT_UNROLL
// such steps: the next stage is loaded before this one is used. Scores are shuffle-summed over the C lanes; each lane keeps an online-softmax
// state (m, l, acc) per head for its positions, merged across the warp by shuffles and across
// warps through shared memory in a fixed tree order. Everything is f32; the order of every
// sum depends only on the shapes, so results are identical between runs.
// Merge algorithm: one block of 256 threads per (row, head); 256 / head_dim groups of head_dim
// threads take the splits round-robin, KILN_ATTN_MERGE_BATCH at a time loaded together (online
// rescaling between batches), then combine in group order.
//
// Geometry (src/plan/geometry.rs):
//   split: grid (rows * kv_heads * head_chunks, splits), block 256, where group = heads /
//          kv_heads and head_chunks = ceil(group / 4); chunk c takes heads [c * ceil(group /
//          head_chunks), ...) of the group; blockIdx.x = (t * kv_heads + g) * head_chunks + c.
//   merge: grid (rows, heads), block 256.
// head_dim <= KILN_ATTN_SPLIT_MAX_HEAD_DIM (256); heads a multiple of kv_heads.
#include "attention_split.cuh"  // live_split_len, weight_of (shared with attention_qkv.cu)

#define KILN_ATTN_SPLIT_THREADS 256
#define KILN_ATTN_SPLIT_WARPS 8
#define KILN_ATTN_SPLIT_MAX_GROUP 4
// Overridable for sweeps: 1 measured +1.1% on 0.5B at context 128 and -2 to -4% at 4096 (session 13).
#ifndef KILN_ATTN_SPLIT_UNROLL
#define KILN_ATTN_SPLIT_UNROLL 2
#endif
// Blocks per SM the register allocation must allow (__launch_bounds__): 1 keeps every head's
// state in registers (about 205); 2 caps them at 128 with small spills. 1: end to end on the
// H200 (2026-11-30, kiln bench decode, context 128, same machine) 1 gave 209.8 / 974.8 / 944.6
// tok/s against 207.7 / 967.2 / 942.1 with 2 (8B / 1B / 0.5B shapes). Overridable for sweeps.
#ifndef KILN_ATTN_SPLIT_MIN_BLOCKS
#define KILN_ATTN_SPLIT_MIN_BLOCKS 1
#endif
#define KILN_ATTN_SPLIT_MAX_HEAD_DIM 256
#define KILN_ATTN_SPLIT_DIMS 8
#define KILN_ATTN_MERGE_THREADS 256
#define KILN_ATTN_MERGE_BATCH 8
// 1: the split and merge kernels let their dependents launch before they wait (as the GEMVs do),
// so the o projection and the GEMVs after it become resident and stream their first weight
// chunks while the attention runs, instead of from the merge's wait on. Safe under the rule at
// wait_prior_grids (common.cuh): a dependent still waits for this grid's completion before it
// reads anything, and it is launched only once every block of this grid is resident. Measured on
// the H200 (2026-12-01, bench/results/2026-12-01-h200-decode-ab-s13.md, call A): 0.5B -5%, 1B
// even, 8B -0.6% at batch 1 (the early GEMV blocks take the SM slots that the split grid's later
// blocks need); off by default. The cluster kernel honours it too (its grid is planned to fit in
// one wave): there it lost as well, 0.5B -1.4%, 1B -0.4%, 8B -0.5% at batch 1 (2026-12-01,
// bench/results/2026-12-01-h200-decode-ab-s16.md, call F).
#ifndef KILN_ATTN_EARLY_TRIGGER
#define KILN_ATTN_EARLY_TRIGGER 0
#endif

namespace kiln {

// Storage bits of 8 consecutive elements of T: 16 bytes (f16, bf16) or 32 (f32).
template <typename T> struct Raw8 {
  static constexpr int WORDS = 2 * sizeof(T);
  unsigned int w[WORDS];
};

// Loads elements [0, n) of p (n <= 8; the rest read as 0). VEC: n == 8 and p 16-byte aligned.
template <typename T, bool VEC> __device__ __forceinline__ void load8(const T* p, unsigned int n, Raw8<T>& r) {
  if constexpr (VEC) {
#pragma unroll
    for (int i = 0; i < Raw8<T>::WORDS / 4; ++i) {
      const uint4 v = load16_stream_act(p + i * Vec16<T>::N);
      r.w[4 * i] = v.x;
      r.w[4 * i + 1] = v.y;
      r.w[4 * i + 2] = v.z;
      r.w[4 * i + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < Raw8<T>::WORDS; ++i) r.w[i] = 0u;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      if ((unsigned int)e < n) {
        const unsigned int bits = storage_bits(p[e]);
        if constexpr (sizeof(T) == 4) {
          r.w[e] = bits;
        } else {
          r.w[e / 2] |= bits << (16 * (e % 2));
        }
      }
    }
  }
}

template <typename T> __device__ __forceinline__ void zero8(Raw8<T>& r) {
#pragma unroll
  for (int i = 0; i < Raw8<T>::WORDS; ++i) r.w[i] = 0u;
}

template <typename T> __device__ __forceinline__ void unpack8(const Raw8<T>& r, float (&f)[8]) {
  if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int e = 0; e < 8; ++e) f[e] = __uint_as_float(r.w[e]);
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 p = unpack_pair(r.w[i], T());
      f[2 * i] = p.x;
      f[2 * i + 1] = p.y;
    }
  }
}

// Shared memory of one split block: per-warp (m, l) of each head, then half the warps' acc.
// (Summing every warp's acc after one barrier instead of the tree's two barriers per level was
// measured in session 25: -0.3% / -0.1% / 0.0% on the 0.5B / 1B / 8B, and not the same bits;
// bench/results/2026-12-02-h200-decode-ab-s25.md.)
struct SplitShared {
  float m[KILN_ATTN_SPLIT_WARPS][KILN_ATTN_SPLIT_MAX_GROUP];
  float l[KILN_ATTN_SPLIT_WARPS][KILN_ATTN_SPLIT_MAX_GROUP];
  float acc[KILN_ATTN_SPLIT_WARPS / 2][KILN_ATTN_SPLIT_MAX_GROUP][KILN_ATTN_SPLIT_MAX_HEAD_DIM];
};

// One (row, kv head, head chunk, split) block; G >= the chunk's head count (compile time, so
// that the per-head state stays in registers).
template <typename T, int G, bool VEC>
__device__ void attention_split_block(SplitShared& sh, const T* q, const T* k_cache,
                                      const T* v_cache, float* __restrict__ workspace, unsigned int t,
                                      unsigned int h0, unsigned int nh, unsigned int g, unsigned int s, long long lo,
                                      long long hi, long long base, unsigned int heads, unsigned int kv_heads,
                                      unsigned int head_dim, float scale, unsigned int splits, bool kv_early = false,
                                      long long fresh = -1) {
  // Steps (of 32 / C positions) per pipeline stage; two stages are in flight.
  constexpr int U = KILN_ATTN_SPLIT_UNROLL;
  constexpr int NW = KILN_ATTN_SPLIT_WARPS;
  const unsigned int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  unsigned int log_c = 0;
  while ((1u << log_c) * KILN_ATTN_SPLIT_DIMS < head_dim) ++log_c;
  const unsigned int lanes_per_pos = 1u << log_c;
  const unsigned int pos_per_step = 32u >> log_c;
  const unsigned int pi = lane >> log_c, li = lane & (lanes_per_pos - 1);
  const unsigned int d0 = li * KILN_ATTN_SPLIT_DIMS;
  const unsigned int nd = d0 < head_dim ? min(8u, head_dim - d0) : 0u;

  const size_t kv_dim = (size_t)kv_heads * head_dim;
  const T* kp = k_cache + (size_t)base * kv_dim + (size_t)g * head_dim + d0;
  const T* vp = v_cache + (size_t)base * kv_dim + (size_t)g * head_dim + d0;
  const long long per_warp = (long long)U * pos_per_step;
  const long long stride = NW * per_warp;
  // The U steps of K and V rows at j0, or zeros past the split's end.
  // `skip`: a row left as zeros (the fresh row, loaded after the wait).
  auto load_steps = [&](long long first, Raw8<T>(&kr)[U], Raw8<T>(&vr)[U], long long skip = -1) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const long long j = first + u * pos_per_step + pi;
      if (j < hi && nd > 0 && j != skip) {
        load8<T, VEC>(kp + (size_t)j * kv_dim, nd, kr[u]);
        load8<T, VEC>(vp + (size_t)j * kv_dim, nd, vr[u]);
      } else {
        zero8(kr[u]);
        zero8(vr[u]);
      }
    }
  };
  // Software pipeline: the next U steps are loaded before this U are used, so 2U steps of K and
  // V are in flight while the warp waits.
  Raw8<T> kr[U], vr[U];
  long long j0 = lo + warp * per_warp;
  if (kv_early) {
    // Before the wait (KILN_ATTN_KV_EARLY): every row but `fresh` was written by an earlier
    // step, complete before the prior grid started (each grid waits for its own predecessors
    // before it lets dependents launch: wait_prior_grids); the fresh row comes from the prior
    // grid, loaded after the wait. The same rows reach the same registers as below.
    load_steps(j0, kr, vr, fresh);
    wait_prior_grids();
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const long long j = j0 + u * pos_per_step + pi;
      if (j == fresh && j < hi && nd > 0) {
        load8<T, VEC>(kp + (size_t)j * kv_dim, nd, kr[u]);
        load8<T, VEC>(vp + (size_t)j * kv_dim, nd, vr[u]);
      }
    }
  } else {
    load_steps(j0, kr, vr);
  }
  float qv[G][8], acc[G][8], m[G], l[G];
#pragma unroll
  for (int i = 0; i < G; ++i) {
    const T* qh = q + ((size_t)t * heads + h0 + i) * head_dim + d0;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      qv[i][e] = ((unsigned int)i < nh && (unsigned int)e < nd) ? to_f32(qh[e]) : 0.0f;
      acc[i][e] = 0.0f;
    }
    m[i] = -inf();
    l[i] = 0.0f;
  }

  for (; j0 < hi; j0 += stride) {
    Raw8<T> kn[U], vn[U];
    load_steps(j0 + stride < hi ? j0 + stride : hi, kn, vn);
    float sc[U][G];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float kf[8];
      unpack8(kr[u], kf);
#pragma unroll
      for (int i = 0; i < G; ++i) {
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) dot = __fmaf_rn(qv[i][e], kf[e], dot);
        sc[u][i] = dot;
      }
    }
    // Sum over the C lanes of each position (xor within aligned groups of C lanes).
    for (unsigned int o = lanes_per_pos >> 1; o > 0; o >>= 1) {
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int i = 0; i < G; ++i) sc[u][i] += __shfl_xor_sync(0xffffffffu, sc[u][i], o);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const bool valid = j0 + u * pos_per_step + pi < hi;
#pragma unroll
      for (int i = 0; i < G; ++i) sc[u][i] = valid ? scale * sc[u][i] : -inf();
    }
    // Online softmax per head over this lane's positions; sc becomes the weights.
#pragma unroll
    for (int i = 0; i < G; ++i) {
      float mx = m[i];
#pragma unroll
      for (int u = 0; u < U; ++u) mx = fmaxf(mx, sc[u][i]);
      const bool any = mx != -inf();
      const float corr = any ? weight_of(m[i], mx) : 1.0f;
      l[i] *= corr;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[i][e] *= corr;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        sc[u][i] = any ? weight_of(sc[u][i], mx) : 0.0f;
        l[i] += sc[u][i];
      }
      m[i] = any ? mx : m[i];
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float vf[8];
      unpack8(vr[u], vf);
#pragma unroll
      for (int i = 0; i < G; ++i)
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[i][e] = __fmaf_rn(sc[u][i], vf[e], acc[i][e]);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      kr[u] = kn[u];
      vr[u] = vn[u];
    }
  }

  // Merge the warp's position groups (lanes l, l ^ C, l ^ 2C, ...).
  for (unsigned int o = lanes_per_pos; o < 32; o <<= 1) {
#pragma unroll
    for (int i = 0; i < G; ++i) {
      const float mo = __shfl_xor_sync(0xffffffffu, m[i], o);
      const float lo_other = __shfl_xor_sync(0xffffffffu, l[i], o);
      const float mx = fmaxf(m[i], mo);
      const float a = weight_of(m[i], mx), b = weight_of(mo, mx);
      l[i] = a * l[i] + b * lo_other;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float ao = __shfl_xor_sync(0xffffffffu, acc[i][e], o);
        acc[i][e] = a * acc[i][e] + b * ao;
      }
      m[i] = mx;
    }
  }
  // Across warps: common max, then a tree sum of the rescaled acc in warp order.
  if (lane == 0) {
#pragma unroll
    for (int i = 0; i < G; ++i) {
      sh.m[warp][i] = m[i];
      sh.l[warp][i] = l[i];
    }
  }
  __syncthreads();
  float big_m[G], big_l[G];
#pragma unroll
  for (int i = 0; i < G; ++i) {
    big_m[i] = -inf();
#pragma unroll
    for (int w = 0; w < NW; ++w) big_m[i] = fmaxf(big_m[i], sh.m[w][i]);
    big_l[i] = 0.0f;
#pragma unroll
    for (int w = 0; w < NW; ++w) big_l[i] += weight_of(sh.m[w][i], big_m[i]) * sh.l[w][i];
    const float own = weight_of(m[i], big_m[i]);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[i][e] *= own;
  }
  const bool writer = pi == 0 && nd > 0;
#pragma unroll
  for (unsigned int half = NW / 2; half > 0; half >>= 1) {
    if (writer && warp >= half && warp < 2 * half) {
#pragma unroll
      for (int i = 0; i < G; ++i)
#pragma unroll
        for (int e = 0; e < 8; ++e) sh.acc[warp - half][i][d0 + e] = acc[i][e];
    }
    __syncthreads();
    if (writer && warp < half) {
#pragma unroll
      for (int i = 0; i < G; ++i)
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[i][e] += sh.acc[warp][i][d0 + e];
    }
    __syncthreads();
  }
  if (warp == 0 && writer) {
#pragma unroll
    for (int i = 0; i < G; ++i) {
      if ((unsigned int)i >= nh) break;
      float* slot = workspace + (((size_t)t * heads + h0 + i) * splits + s) * (head_dim + 2);
#pragma unroll
      for (int e = 0; e < 8; ++e)
        if ((unsigned int)e < nd) slot[d0 + e] = acc[i][e];
      if (li == 0) {
        slot[head_dim] = big_m[i];
        slot[head_dim + 1] = big_l[i];
      }
    }
  }
}

template <typename T, int G>
__device__ void attention_split_dispatch_vec(SplitShared& sh, bool vec, const T* q, const T* k_cache,
                                             const T* v_cache, float* workspace, unsigned int t, unsigned int h0,
                                             unsigned int nh, unsigned int g, unsigned int s, long long lo,
                                             long long hi, long long base, unsigned int heads,
                                             unsigned int kv_heads, unsigned int head_dim, float scale,
                                             unsigned int splits, bool kv_early = false, long long fresh = -1) {
  if (vec) {
    attention_split_block<T, G, true>(sh, q, k_cache, v_cache, workspace, t, h0, nh, g, s, lo, hi, base, heads,
                                      kv_heads, head_dim, scale, splits, kv_early, fresh);
  } else {
    attention_split_block<T, G, false>(sh, q, k_cache, v_cache, workspace, t, h0, nh, g, s, lo, hi, base, heads,
                                       kv_heads, head_dim, scale, splits, kv_early, fresh);
  }
}

// Shapes the split code covers (the planner plans no other; a launch of another writes nothing).
__device__ __forceinline__ bool split_shape_ok(unsigned int heads, unsigned int kv_heads, unsigned int head_dim,
                                               unsigned int planned_len) {
  return kv_heads != 0 && heads % kv_heads == 0 && head_dim != 0 && head_dim <= KILN_ATTN_SPLIT_MAX_HEAD_DIM &&
         planned_len != 0;
}

// One active split: keys [lo, min(lo + split_len, p + 1)) of row t's cache rows from base_t (kv
// head g), clamped to the cache, for the nh <= MAXG heads from h0; writes slot ((t * heads + h0 +
// i) * splits + s) of `workspace` (the vector path and the compile-time head count picked here;
// MAXG below 4 compiles only the smaller head counts, and with them fewer registers).
template <typename T, int MAXG = KILN_ATTN_SPLIT_MAX_GROUP>
__device__ void split_block(SplitShared& sh, const T* q, const T* k_cache, const T* v_cache, float* workspace,
                            unsigned int t, unsigned int h0, unsigned int nh, unsigned int g, unsigned int s, long long lo,
                            unsigned int split_len, int p, long long base_t, unsigned int heads, unsigned int kv_heads,
                            unsigned int head_dim, float scale, unsigned int kv_rows, unsigned int splits,
                            bool kv_early = false) {
  long long base = base_t;
  long long hi = min(lo + (long long)split_len, (long long)p + 1);
  if (base < 0) {
    base = 0;
    hi = lo;  // no readable row: an empty split
  } else {
    hi = min(hi, (long long)kv_rows - base);
  }
  const bool vec = head_dim % 8 == 0 && aligned16(k_cache) && aligned16(v_cache);
  static_assert(KILN_ATTN_SPLIT_MAX_GROUP == 4, "dispatch below: 1, 2 or 4 heads per block");
  static_assert(MAXG == 1 || MAXG == 2 || MAXG == 4, "1, 2 or 4 heads per block");
  if (MAXG == 1 || nh <= 1) {
    attention_split_dispatch_vec<T, 1>(sh, vec, q, k_cache, v_cache, workspace, t, h0, nh, g, s, lo, hi, base,
                                       heads, kv_heads, head_dim, scale, splits, kv_early, p);
  } else if (MAXG == 2 || nh <= 2) {
    attention_split_dispatch_vec<T, 2>(sh, vec, q, k_cache, v_cache, workspace, t, h0, nh, g, s, lo, hi, base,
                                       heads, kv_heads, head_dim, scale, splits, kv_early, p);
  } else {
    attention_split_dispatch_vec<T, 4>(sh, vec, q, k_cache, v_cache, workspace, t, h0, nh, g, s, lo, hi, base,
                                       heads, kv_heads, head_dim, scale, splits, kv_early, p);
  }
}

// Called before the block waits for the prior grids when `early` (the kernel entry waits first
// otherwise): it waits itself right after reading positions and cache_base, and on every return
// before that.
template <typename T>
__device__ void attention_split(const T* q, const T* k_cache, const T* v_cache, const int* positions,
                                const int* cache_base, float* workspace, unsigned int rows, unsigned int heads,
                                unsigned int kv_heads, unsigned int head_dim, float scale, unsigned int kv_rows,
                                unsigned int splits, unsigned int planned_len, unsigned int min_split_len,
                                bool early) {
  __shared__ SplitShared sh;
  KILN_ABLATED(16);
  if (!split_shape_ok(heads, kv_heads, head_dim, planned_len)) {
    if (early) wait_prior_grids();
    return;
  }
  const unsigned int group = heads / kv_heads;
  const unsigned int head_chunks = (group + KILN_ATTN_SPLIT_MAX_GROUP - 1) / KILN_ATTN_SPLIT_MAX_GROUP;
  const unsigned int chunk_heads = (group + head_chunks - 1) / head_chunks;
  unsigned int bx = blockIdx.x;
  const unsigned int chunk = bx % head_chunks;
  bx /= head_chunks;
  const unsigned int g = bx % kv_heads, t = bx / kv_heads, s = blockIdx.y;
  if (t >= rows || s >= splits || chunk * chunk_heads >= group) {
    if (early) wait_prior_grids();
    return;
  }
  // Early: through the L2 (coherent), as qkv_rope's early reads.
  const int p = early ? __ldcg(positions + t) : positions[t];
  const long long base_t = early ? __ldcg(cache_base + t) : cache_base[t];
  if (early) wait_prior_grids();
  const unsigned int split_len = live_split_len(p, splits, planned_len, min_split_len);
  const long long lo = (long long)s * split_len;
  if (p < 0 || lo > p) return;  // inactive: the merge never reads this slot
  const unsigned int h0 = g * group + chunk * chunk_heads;
  const unsigned int nh = min(chunk_heads, group - chunk * chunk_heads);
  split_block<T>(sh, q, k_cache, v_cache, workspace, t, h0, nh, g, s, lo, split_len, p, base_t, heads, kv_heads,
                 head_dim, scale, kv_rows, splits);
}

// `early`: as attention_split's (the positions read before the wait).
template <typename T>
__device__ void attention_merge(const float* workspace, const int* positions,
                                T* __restrict__ out, unsigned int rows, unsigned int heads, unsigned int head_dim,
                                unsigned int splits, unsigned int planned_len, unsigned int min_split_len,
                                bool early) {
  __shared__ float sh_m[KILN_ATTN_MERGE_THREADS], sh_l[KILN_ATTN_MERGE_THREADS], sh_acc[KILN_ATTN_MERGE_THREADS];
  KILN_ABLATED(32);
  const unsigned int t = blockIdx.x, h = blockIdx.y;
  if (t >= rows || h >= heads || head_dim == 0) {
    if (early) wait_prior_grids();
    return;
  }
  T* o = out + ((size_t)t * heads + h) * head_dim;
  const int p = early ? __ldcg(positions + t) : positions[t];
  if (early) wait_prior_grids();
  const unsigned int split_len = live_split_len(p, splits, planned_len, min_split_len);
  const unsigned int n_active = (p < 0 || planned_len == 0) ? 0u : min((unsigned int)p / split_len + 1, splits);
  if (n_active == 0 || head_dim > KILN_ATTN_SPLIT_MAX_HEAD_DIM) {
    for (unsigned int d = threadIdx.x; d < head_dim; d += blockDim.x) o[d] = zero<T>();
    return;
  }
  const unsigned int groups = blockDim.x / head_dim;  // >= 1: head_dim <= 256 = blockDim.x
  const unsigned int grp = threadIdx.x / head_dim, d = threadIdx.x % head_dim;
  const size_t slot = head_dim + 2;
  const float* states = workspace + ((size_t)t * heads + h) * splits * slot;
  float m_run = -inf(), den = 0.0f, acc = 0.0f;
  if (grp < groups) {
    // KILN_ATTN_MERGE_BATCH splits per step, loaded together (one L2 round trip), then folded
    // into the running state in split order.
    constexpr int B = KILN_ATTN_MERGE_BATCH;
    for (unsigned int s0 = grp; s0 < n_active; s0 += B * groups) {
      float ms[B], ls[B], as[B];
#pragma unroll
      for (int u = 0; u < B; ++u) {
        const unsigned int s = s0 + u * groups;
        const float* st = states + (size_t)(s < n_active ? s : 0) * slot;
        ms[u] = s < n_active ? st[head_dim] : -inf();
        ls[u] = s < n_active ? st[head_dim + 1] : 0.0f;
        as[u] = s < n_active ? st[d] : 0.0f;
      }
      float mx = m_run;
#pragma unroll
      for (int u = 0; u < B; ++u) mx = fmaxf(mx, ms[u]);
      if (mx == -inf()) continue;  // only empty splits so far: nothing to weigh
      const float c = m_run == -inf() ? 0.0f : expf(m_run - mx);
      den *= c;
      acc *= c;
#pragma unroll
      for (int u = 0; u < B; ++u) {
        const float w = ms[u] == -inf() ? 0.0f : expf(ms[u] - mx);
        den += w * ls[u];
        acc += w * as[u];
      }
      m_run = mx;
    }
    sh_m[threadIdx.x] = m_run;
    sh_l[threadIdx.x] = den;
    sh_acc[threadIdx.x] = acc;
  }
  __syncthreads();
  if (threadIdx.x < head_dim) {
    float big_m = -inf();
    for (unsigned int k = 0; k < groups; ++k) big_m = fmaxf(big_m, sh_m[k * head_dim + d]);
    float num = 0.0f, total = 0.0f;
    if (big_m != -inf()) {
      for (unsigned int k = 0; k < groups; ++k) {
        const float mk = sh_m[k * head_dim + d];
        const float w = mk == -inf() ? 0.0f : expf(mk - big_m);
        num += w * sh_acc[k * head_dim + d];
        total += w * sh_l[k * head_dim + d];
      }
    }
    o[d] = from_f32<T>(total > 0.0f ? num / total : 0.0f);
  }
}

// Decode attention in one launch (Kernel::AttentionCluster): the KILN_ATTN_CLUSTER_SPLITS splits
// of one (row, kv head, chunk of `chunk_heads` heads) are the blocks of one thread-block cluster.
// Each runs the split block above over its live split (its (acc, m, l) slots in its own shared
// memory instead of a workspace); thread x of block r merges output element r * 256 + x of the
// chunk from the active blocks' slots (two passes: the max, then the weighted sums in split
// order, as the CPU reference's merge), which every block pushed into the merging blocks' shared
// memory (KILN_ATTN_CLUSTER_PUSH below; or, for chunks of four heads, read through distributed
// shared memory after a cluster barrier); a last barrier keeps every block resident until the
// cluster is done. No
// merge launch, no workspace round trip through the L2. sm_90+ only (clusters): elsewhere the
// kernel traps. One entry point per chunk size CH (kiln_attention_cluster_g{1,2,4}_{dt}; the
// planner's `chunk_heads`), so that a chunk of one or two heads keeps the registers of one or two
// heads and more blocks fit on an SM (clusters need all 8 of their blocks resident at once).
#define KILN_ATTN_CLUSTER_SPLITS 8
// KILN_ATTN_KV_EARLY=1: the cluster kernel's split blocks load their first K/V rows before they
// wait for the prior grid (attention_cluster); with the merge's single distributed-shared-memory
// round trip (attention_cluster, da91256; it was two dependent loads per block) neither changes a
// result (greedy ids identical). Measured on the H200 (2026-12-02, session 24 call B, kiln bench,
// batch 1, context 128, same machine, two rounds; bench/results/2026-12-02-h200-decode-ab-s24.md),
// tok/s against neither: both +0.3% / +1.2% / +0.4% (0.5B / 1B / 8B); merge only +2.4% / 0.0% /
// +0.3%; early K/V only -0.6% / +0.3% / 0.0%. Early K/V on by default; overridable for sweeps.
#ifndef KILN_ATTN_KV_EARLY
#define KILN_ATTN_KV_EARLY 1
#endif
#define KILN_ATTN_CLUSTER_SLOTS (KILN_ATTN_SPLIT_MAX_GROUP * (KILN_ATTN_SPLIT_MAX_HEAD_DIM + 2))
// KILN_ATTN_CLUSTER_PUSH=1 (the default): chunks of one or two heads merge from slots each block pushed
// into the merging blocks' shared memory (st.async completing their mbarrier: common.cuh's push
// protocol) instead of reading them through distributed shared memory after a cluster barrier, whose
// default .release puts a GPU-scope fence (MEMBAR.ALL.GPU) in front of both of the kernel's barriers;
// the last barrier is relaxed. The same values merged in the same order: the same bits. Chunks of four
// heads keep the barriers (their pushed slots would need 33 KB of shared memory per block). The same
// change in attention_qkv.cu (KILN_QKV_ATTN_PUSH) won 5.35% on the 0.5B (session 53); 0 restores the
// barriers (KILN_NVRTC_DEFINES=KILN_ATTN_CLUSTER_PUSH=0).
#ifndef KILN_ATTN_CLUSTER_PUSH
#define KILN_ATTN_CLUSTER_PUSH 1
#endif
// KILN_ATTN_CLUSTER_LAST_BARRIER 0 (push only): no cluster barrier at the end, as attention_qkv.cu's
// KILN_QKV_ATTN_LAST_BARRIER (+2.05% with its warp-0 pushes on the 0.5B, session 64): only the merging
// blocks are pushed into, and each of their merging threads waits on the block's mbarrier, whose count
// covers every push, before it reads; no block reads another's shared memory. So every block may leave
// once it has pushed (and merged). 1 (the default): the relaxed last barrier. The same bits either way.
// Session 64 on an H100, kiln's 1B decode at context 128 over four placements, two rounds: 0 vs 1
// -0.24% (paired -0.25%), every placement; the same greedy ids; gate checks 1, 2, 5 and kernel_check's
// attention_split pass (bench/results/2026-12-06-decode-s64.md). Kept as a -D for A/Bs
// (KILN_NVRTC_DEFINES=KILN_ATTN_CLUSTER_LAST_BARRIER=0).
#ifndef KILN_ATTN_CLUSTER_LAST_BARRIER
#define KILN_ATTN_CLUSTER_LAST_BARRIER 1
#endif

template <typename T, int CH>
__device__ void attention_cluster(const T* q, const T* k_cache, const T* v_cache, const int* positions,
                                  const int* cache_base, T* __restrict__ out, unsigned int rows, unsigned int heads,
                                  unsigned int kv_heads, unsigned int head_dim, float scale, unsigned int kv_rows,
                                  unsigned int planned_len, unsigned int min_split_len, unsigned int chunk_heads,
                                  bool early) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __shared__ SplitShared sh;
  __shared__ __align__(16) float slots[KILN_ATTN_CLUSTER_SLOTS];
  constexpr unsigned int S = KILN_ATTN_CLUSTER_SPLITS;
  constexpr bool push = KILN_ATTN_CLUSTER_PUSH && CH <= 2;
  constexpr unsigned int RECV = push ? CH * (KILN_ATTN_SPLIT_MAX_HEAD_DIM + 2) : 2;
  __shared__ __align__(16) float recv[S][RECV];  // push: every split's slots, as the merging blocks read them
  __shared__ __align__(8) unsigned long long recv_bar;
  // Shapes the planner never plans: every block of the cluster returns alike (no barrier reached).
  if (!split_shape_ok(heads, kv_heads, head_dim, planned_len) || chunk_heads != CH) {
    if (early) wait_prior_grids();
    return;
  }
  const unsigned int group = heads / kv_heads;
  const unsigned int chunks = (group + chunk_heads - 1) / chunk_heads;
  unsigned int bx = blockIdx.x;
  const unsigned int chunk = bx % chunks;
  bx /= chunks;
  const unsigned int g = bx % kv_heads, t = bx / kv_heads, s = blockIdx.y;
  if (t >= rows) {  // the whole cluster: its blocks share blockIdx.x
    if (early) wait_prior_grids();
    return;
  }
#if (KILN_ABLATE) & 16
  // Timing ablation (common.cuh): the launch keeps its place in the chain and writes zeros, so that
  // the layers after it see the same (wrong) input on every run and greedy decode repeats.
  {
    wait_prior_grids();
    const unsigned int e = s * blockDim.x + threadIdx.x, h0 = g * group + chunk * chunk_heads;
    const unsigned int nh = min(chunk_heads, group - chunk * chunk_heads);
    if (e < nh * head_dim) out[((size_t)t * heads + h0) * head_dim + e] = from_f32<T>(0.0f);
    return;
  }
#endif
  const unsigned int nh = min(chunk_heads, group - chunk * chunk_heads);
  // push: each block sends its nh * (head_dim + 2) floats of slots to every block that merges.
  if constexpr (push) {
    if (threadIdx.x == 0) {
      mbar_init(smem_addr(&recv_bar));
      fence_mbarrier_init();
      mbar_expect(smem_addr(&recv_bar), s * blockDim.x < nh * head_dim ? S * nh * (head_dim + 2) * 4 : 0u);
    }
    cluster_arrive_relaxed();  // waited on before the first push: every block's mbarrier is live
  }
  const int p = early ? __ldcg(positions + t) : positions[t];
  const long long base_t = early ? __ldcg(cache_base + t) : cache_base[t];
  // KILN_ATTN_KV_EARLY: the split block loads its first K/V rows before it waits (all but row p,
  // which the prior grid writes), so their memory latency overlaps the prior grid's tail.
  const bool kv_early = KILN_ATTN_KV_EARLY && early;
  if (early && !kv_early) wait_prior_grids();
  const unsigned int split_len = live_split_len(p, S, planned_len, min_split_len);
  const unsigned int n_active = p < 0 ? 0u : min((unsigned int)p / split_len + 1u, S);
  const unsigned int h0 = g * group + chunk * chunk_heads;
  const unsigned int slot = head_dim + 2;
  if (s < n_active) {
    // The split block writes slot ((t * heads + h0 + i) * splits + s) of its workspace: with
    // splits = 1 and s = 0 that is slots + i * slot once the base is shifted back by those slots.
    float* ws = slots - ((size_t)t * heads + h0) * slot;
    split_block<T, CH>(sh, q, k_cache, v_cache, ws, t, h0, nh, g, 0, (long long)s * split_len, split_len, p, base_t, heads,
                   kv_heads, head_dim, scale, kv_rows, 1, kv_early);
  } else if (kv_early) {
    wait_prior_grids();
  }
  if constexpr (push) {
    __syncthreads();  // the block's slots are written (an empty split's are not read: pushed as they are)
    cluster_wait();
    const unsigned int pushed = nh * (head_dim + 2);
    for (unsigned int r = 0; r * blockDim.x < nh * head_dim; ++r) {
      const unsigned int to = remote_addr(smem_addr(&recv[s][0]), r), bar = remote_addr(smem_addr(&recv_bar), r);
      for (unsigned int u = threadIdx.x; 2 * u < pushed; u += blockDim.x) push8(to + 8 * u, slots[2 * u], slots[2 * u + 1], bar);
    }
  } else {
    cluster_sync();
  }
  const unsigned int e = s * blockDim.x + threadIdx.x;
  if (e < nh * head_dim) {
    const unsigned int i = e / head_dim, d = e % head_dim;
    const float* mine = slots + (size_t)i * slot;
    float big_m = -inf();
    float num = 0.0f, den = 0.0f;
    // Every active block's (m, acc, l) loaded at once (from the pushed copies, or one
    // distributed-shared-memory round trip), then folded in block order.
    float ms[S], as[S], ls[S];
    if constexpr (push) mbar_wait0(smem_addr(&recv_bar));
#pragma unroll
    for (unsigned int r = 0; r < S; ++r) {
      if (r < n_active) {
        const float* st = push ? &recv[r][(size_t)i * slot] : cluster_map(mine, r);
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
    out[((size_t)t * heads + h0 + i) * head_dim + d] = from_f32<T>(den > 0.0f ? num / den : 0.0f);
  }
  if constexpr (push) {
    if (KILN_ATTN_CLUSTER_LAST_BARRIER) {
      cluster_arrive_relaxed();  // no block leaves while a push may still target the cluster; no fence
      cluster_wait();
    }
  } else {
    cluster_sync();
  }
#else
  __trap();  // needs thread-block clusters (sm_90+); such a plan refuses to load before sm_90
#endif
}

}  // namespace kiln

#define KILN_ATTENTION_SPLIT(dt, T)                                                                     \
  extern "C" __global__ void __launch_bounds__(KILN_ATTN_SPLIT_THREADS, KILN_ATTN_SPLIT_MIN_BLOCKS)      \
      kiln_attention_split_##dt(                                                                        \
      const T* q, const T* k_cache, const T* v_cache, const int* positions, const int* cache_base,      \
      float* workspace, unsigned int rows, unsigned int heads, unsigned int kv_heads, unsigned int head_dim, \
      float scale, unsigned int kv_rows, unsigned int splits, unsigned int split_len,                   \
      unsigned int min_split_len, unsigned int early) {                                                 \
    KILN_TRACE_BLOCK_END();                                                                             \
    if (KILN_ATTN_EARLY_TRIGGER) kiln::allow_dependents();                                              \
    if (early == 0) kiln::wait_prior_grids();                                                           \
    kiln::attention_split<T>(q, k_cache, v_cache, positions, cache_base, workspace, rows, heads, kv_heads,  \
                             head_dim, scale, kv_rows, splits, split_len, min_split_len, early != 0);   \
  }                                                                                                     \
  extern "C" __global__ void __launch_bounds__(KILN_ATTN_MERGE_THREADS) kiln_attention_merge_##dt(      \
      const float* workspace, const int* positions, T* out, unsigned int rows, unsigned int heads,      \
      unsigned int head_dim, unsigned int splits, unsigned int split_len, unsigned int min_split_len,   \
      unsigned int early) {                                                                             \
    KILN_TRACE_BLOCK_END();                                                                             \
    if (KILN_ATTN_EARLY_TRIGGER) kiln::allow_dependents();                                              \
    if (early == 0) kiln::wait_prior_grids();                                                           \
    kiln::attention_merge<T>(workspace, positions, out, rows, heads, head_dim, splits, split_len,       \
                             min_split_len, early != 0);                                                \
  }
KILN_FOR_EACH_DTYPE(KILN_ATTENTION_SPLIT)

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KILN_ATTN_CLUSTER_ATTR __cluster_dims__(1, KILN_ATTN_CLUSTER_SPLITS, 1)
#else
#define KILN_ATTN_CLUSTER_ATTR
#endif
// Blocks per SM (MINB) 3, 2, 1 for chunks of 1, 2, 4 heads: src/plan/planner.rs ATTENTION_CLUSTER_WAVE.
#define KILN_ATTENTION_CLUSTER_G(dt, T, CH, MINB)                                                            \
  extern "C" __global__ void __launch_bounds__(KILN_ATTN_SPLIT_THREADS, MINB) KILN_ATTN_CLUSTER_ATTR        \
      kiln_attention_cluster_g##CH##_##dt(const T* q, const T* k_cache, const T* v_cache, const int* positions, \
                                  const int* cache_base, T* out, unsigned int rows, unsigned int heads,      \
                                  unsigned int kv_heads, unsigned int head_dim, float scale, unsigned int kv_rows, \
                                  unsigned int split_len, unsigned int min_split_len, unsigned int chunk_heads, \
                                  unsigned int early) {                                                      \
    KILN_TRACE_BLOCK_END();                                                                                  \
    if (KILN_ATTN_EARLY_TRIGGER) kiln::allow_dependents();                                                   \
    if (early == 0) kiln::wait_prior_grids();                                                                \
    kiln::attention_cluster<T, CH>(q, k_cache, v_cache, positions, cache_base, out, rows, heads, kv_heads,    \
                                   head_dim, scale, kv_rows, split_len, min_split_len, chunk_heads, early != 0); \
  }
#define KILN_ATTENTION_CLUSTER(dt, T) \
  KILN_ATTENTION_CLUSTER_G(dt, T, 1, 3) \
  KILN_ATTENTION_CLUSTER_G(dt, T, 2, 2) \
  KILN_ATTENTION_CLUSTER_G(dt, T, 4, 1)
KILN_FOR_EACH_DTYPE(KILN_ATTENTION_CLUSTER)
