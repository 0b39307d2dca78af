// probe_qkv_attn_fold.cu: a probe for the decode QKV projection (RMSNorm, q/k/v rows, RoPE) computed
// inside the cluster attention (bench/NOTES-decode.md, session 48). NOT one of kiln's kernels:
// compiled only by scripts/probe_qkv_attn_fold.py, which times kiln's qkv_rope -> attention
// (cluster) chain against this one kernel.
//
//   probe_qkv_attn_fold(x, norm_w, w, bias, inv_freq, positions, cache_base, k_cache, v_cache, att,
//                       scale, eps, kv_rows, planned_len, min_split_len)
//     batch 1, bf16, the Qwen2.5-0.5B layer's attention half: x [896] (the residual stream),
//     norm_w [896], w [1152][896] (q | k | v rows, row-major), bias [1152], inv_freq [32] (the
//     rotary pairs' inverse frequencies, as kiln's RopeFreqs), the live position p =
//     positions[0] and the cache base; writes K and V row p of KV head g (the clusters of each
//     group's first head) and att [14][64] (bf16), the attention output that o reads.
//
// Why: the 0.5B's layer is five dependent launches, 20.0 us against 6.6 us of weight bytes (session
// 40's trace: qkv_rope 2.98, attention 5.79, o 1.92, gate/up 4.45, down 4.90 in place), and each
// boundary costs ~1.3 us before any byte moves. kiln's cluster attention already runs one cluster
// of 8 blocks per q head; here each cluster also computes the q/k/v rows its head needs (q of its
// head: 64 rows; k and v of its KV group: 128 rows, recomputed by the group's 7 clusters, whose
// extra reads of those 229 KB hit the L2), so qkv_rope's launch and its boundary go. Session 41's
// estimate of this fold ("a one-block-per-group attention on the critical path") assumed one block
// per KV group; here the attention keeps its 8 splits per head.
//
// Geometry: grid (14, 8), cluster (1, 8), block 256 (8 warps): cluster h = q head h (KV group g =
// h / 7), block rank s = split s. Rank s computes 24 rows: q dims {4s..4s+3, 32+4s..32+4s+3} of
// head h and k dims likewise of group g (so each rotary pair (i, i + 32) is in one block), and v
// dims 8s..8s+7 of group g; warp w takes rows 3w..3w+2, each lane 16-byte chunks lane + 32 c of
// the 896 inputs.
//
// Before the wait (PDL; none of it is written by the prior grid): the block's 24 weight rows and
// the norm weight into registers, the biases, the rotation angles of its 4 pairs (p predates the
// program), and the K/V rows of its split other than row p (kiln's KILN_ATTN_KV_EARLY loads).
// After it: x (one L2 round trip), its sum of squares (warp shuffles: every warp covers all of x),
// the 24 dot products, RoPE, a cluster barrier and one distributed-shared-memory round trip that
// gives every block q, k_p and v_p; then kiln's split attention (attention_split.cu, G = 1, the
// same lane layout, online softmax and warp tree) with row p from shared memory, and kiln's
// cluster merge.
//
// Numerics (as kiln's qkv_rope -> cluster attention, up to the order of the dot products' sums):
// h = bf16(x * norm_w), acc = inv * dot(h, w_row) + bias, rounded to bf16; (q, k) pairs rotated in
// f32 from the rounded values (rope_rotate) and rounded again; the attention as kiln's.
#include "probe_common.cuh"
#include "rope.cuh"

#define QF_H 14
#define QF_KVH 2
#define QF_GROUP 7
#define QF_HD 64
#define QF_IN 896
#define QF_NQ (QF_H * QF_HD)    // 896
#define QF_NK (QF_KVH * QF_HD)  // 128
#define QF_S 8                  // splits = blocks per cluster
#define QF_THREADS 256
#define QF_WARPS 8
#define QF_ROWS 24                    // q/k/v rows per block
#define QF_RPW (QF_ROWS / QF_WARPS)   // rows per warp
#define QF_CH ((QF_IN / 8 + 31) / 32)  // 16-byte chunks per lane: 4 (the last only for lanes < 16)
#define QF_U 2                        // kiln's KILN_ATTN_SPLIT_UNROLL
// Blocks per SM the registers must allow (-DQF_MINB=2 caps them at 128 so that a block of o fits
// beside one of the fold's; 1: no cap).
#ifndef QF_MINB
#define QF_MINB 1
#endif

namespace qf {

__device__ __forceinline__ float bf16r(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }
__device__ __forceinline__ float weight_of(float x, float m) { return x == -kiln::inf() ? 0.0f : __expf(x - m); }
// Dim of rank s's j-th q (or k) row within its head (j < 8): the rotary pairs (j, j + 4) of the block.
__device__ __forceinline__ unsigned int qk_dim(unsigned int s, unsigned int j) {
  return j < 4 ? 4 * s + j : 32 + 4 * s + (j - 4);
}
// kiln's live_split_len (attention_split.cu), the same integer arithmetic.
__device__ __forceinline__ unsigned int live_split_len(int p, unsigned int splits, unsigned int split_len,
                                                       unsigned int min_split_len) {
  const unsigned int keys = (unsigned int)max(p, 0) + 1u;
  const unsigned int even = (keys + splits - 1u) / splits;
  const unsigned int q = (even + 15u) / 16u * 16u;
  return max(min(max(q, min_split_len), split_len), 1u);
}
__device__ __forceinline__ void unpack8(const uint4& r, float (&f)[8]) {
  const unsigned int w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[i]));
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}

template <bool ATTN>
__device__ void qkv_attn_fold(const __nv_bfloat16* x, const __nv_bfloat16* norm_w, const __nv_bfloat16* w,
                              const __nv_bfloat16* bias, const float* inv_freq, const int* positions,
                              const int* cache_base, __nv_bfloat16* k_cache, __nv_bfloat16* v_cache,
                              __nv_bfloat16* att, float scale, float eps, unsigned int kv_rows,
                              unsigned int planned_len, unsigned int min_split_len) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __shared__ float vals[QF_ROWS];           // the block's dot products (+ bias, rounded)
  __shared__ float mine[QF_ROWS];           // its q, k (rotated) and v values, read by the cluster
  __shared__ __align__(16) __nv_bfloat16 full[3 * QF_HD];  // q, k_p, v_p of the head, gathered
  __shared__ float2 ang[4];
  __shared__ float sh_m[QF_WARPS], sh_l[QF_WARPS];
  __shared__ float sh_acc[QF_WARPS / 2][QF_HD];
  __shared__ float slot[QF_HD + 2];         // this split's (acc, m, l), merged by rank 0
  const unsigned int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const unsigned int h = blockIdx.x, s = blockIdx.y, g = h / QF_GROUP;

  // ---- before the wait ----------------------------------------------------------------------
  const int p = ld_cgi(positions);  // step inputs: older than the program (kiln's `early`)
  const long long base_t = ld_cgi(cache_base);
  uint4 wr[QF_RPW][QF_CH], nr[QF_CH];
  float br[QF_RPW];
#pragma unroll
  for (int i = 0; i < QF_RPW; ++i) {
    const unsigned int r = QF_RPW * warp + i;
    const unsigned int row = r < 8 ? h * QF_HD + qk_dim(s, r)
                             : r < 16 ? QF_NQ + g * QF_HD + qk_dim(s, r - 8)
                                      : QF_NQ + QF_NK + g * QF_HD + 8 * s + (r - 16);
    const __nv_bfloat16* wp = w + (size_t)row * QF_IN;
#pragma unroll
    for (int c = 0; c < QF_CH; ++c) {
      const unsigned int k = lane + 32 * c;
      wr[i][c] = k < QF_IN / 8 ? ld_stream16(wp + 8 * k) : make_uint4(0, 0, 0, 0);
    }
    br[i] = __bfloat162float(bias[row]);
  }
#pragma unroll
  for (int c = 0; c < QF_CH; ++c) {
    const unsigned int k = lane + 32 * c;
    nr[c] = k < QF_IN / 8 ? ld_nc16(norm_w + 8 * k) : make_uint4(0, 0, 0, 0);
  }
  if (tid < 4) {
    const kiln::RopeAngle a = kiln::rope_angle_at(p, inv_freq[4 * s + tid], 0, 1.0f);
    ang[tid] = make_float2(a.s, a.c);
  }
  // The split (kiln's attention_cluster / split_block, G = 1, head_dim 64: 8 lanes per key, 4 keys
  // per warp step, U = 2 steps per stage).
  const unsigned int pi = lane >> 3, d0 = (lane & 7) * 8;
  const unsigned int split_len = live_split_len(p, QF_S, planned_len, min_split_len);
  const unsigned int n_active = p < 0 ? 0u : min((unsigned int)p / split_len + 1u, (unsigned int)QF_S);
  long long base = base_t, lo = (long long)s * split_len, hi = min(lo + (long long)split_len, (long long)p + 1);
  if (base < 0) {
    base = 0;
    hi = lo;
  } else {
    hi = min(hi, (long long)kv_rows - base);
  }
  const bool active = s < n_active;
  const long long per_warp = QF_U * 4, stride = QF_WARPS * per_warp;
  const __nv_bfloat16* kp = k_cache + (size_t)base * QF_NK + g * QF_HD + d0;
  const __nv_bfloat16* vp = v_cache + (size_t)base * QF_NK + g * QF_HD + d0;
  long long j0 = lo + warp * per_warp;
  uint4 kr[QF_U], vr[QF_U];
  auto load_steps = [&](long long first, uint4(&kk)[QF_U], uint4(&vv)[QF_U], long long skip) {
#pragma unroll
    for (int u = 0; u < QF_U; ++u) {
      const long long j = first + u * 4 + pi;
      if (active && j < hi && j != skip) {
        kk[u] = ld_cg16(kp + (size_t)j * QF_NK);
        vv[u] = ld_cg16(vp + (size_t)j * QF_NK);
      } else {
        kk[u] = make_uint4(0, 0, 0, 0);
        vv[u] = make_uint4(0, 0, 0, 0);
      }
    }
  };
  load_steps(j0, kr, vr, p);

  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");

  // ---- after the wait: x, the 24 rows, RoPE -----------------------------------------------------
  uint4 xr[QF_CH];
#pragma unroll
  for (int c = 0; c < QF_CH; ++c) {
    const unsigned int k = lane + 32 * c;
    xr[c] = k < QF_IN / 8 ? ld_cg16(x + 8 * k) : make_uint4(0, 0, 0, 0);
  }
  float ss = 0.0f, dot[QF_RPW] = {};
#pragma unroll
  for (int c = 0; c < QF_CH; ++c) {
    float xf[8], nf[8], hf[8];
    unpack8(xr[c], xf);
    unpack8(nr[c], nf);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      ss = __fmaf_rn(xf[e], xf[e], ss);
      hf[e] = bf16r(xf[e] * nf[e]);
    }
#pragma unroll
    for (int i = 0; i < QF_RPW; ++i) {
      float wf[8];
      unpack8(wr[i][c], wf);
#pragma unroll
      for (int e = 0; e < 8; ++e) dot[i] = __fmaf_rn(hf[e], wf[e], dot[i]);
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    ss += __shfl_xor_sync(0xffffffffu, ss, o);
#pragma unroll
    for (int i = 0; i < QF_RPW; ++i) dot[i] += __shfl_xor_sync(0xffffffffu, dot[i], o);
  }
  const float inv = 1.0f / sqrtf(ss / (float)QF_IN + eps);
  if (lane == 0) {
#pragma unroll
    for (int i = 0; i < QF_RPW; ++i) vals[QF_RPW * warp + i] = bf16r(__fmaf_rn(inv, dot[i], 0.0f) + br[i]);
  }
  __syncthreads();
  if (tid < 4 || (tid >= 8 && tid < 12)) {  // q pairs (tid), k pairs (tid - 8)
    const unsigned int j = tid & 3, o = tid & 8;
    const kiln::RopeAngle a{ang[j].x, ang[j].y};
    const float2 r = kiln::rope_rotate(vals[o + j], vals[o + j + 4], a);
    mine[o + j] = bf16r(r.x);
    mine[o + j + 4] = bf16r(r.y);
  } else if (tid >= 16 && tid < 24) {
    mine[tid] = vals[tid];
  }
  kiln::cluster_sync();
  if (tid < 3 * QF_HD) {  // q, k_p, v_p of the head from the blocks that computed them
    const unsigned int which = tid / QF_HD, d = tid % QF_HD;
    unsigned int rank, idx;
    if (which < 2) {
      rank = (d % 32) / 4;
      idx = 8 * which + d % 4 + (d >= 32 ? 4 : 0);
    } else {
      rank = d / 8;
      idx = 16 + d % 8;
    }
    full[tid] = __float2bfloat16_rn(*kiln::cluster_map(&mine[idx], rank));
  }
  // K and V row p for later steps: the clusters of each group's first head, each rank its own dims.
  if (h % QF_GROUP == 0 && tid < 16 && p >= 0 && base_t >= 0 && base_t + p < (long long)kv_rows) {
    const size_t row = (size_t)(base_t + p) * QF_NK + g * QF_HD;
    if (tid < 8) k_cache[row + qk_dim(s, tid)] = __float2bfloat16_rn(mine[8 + tid]);
    else v_cache[row + 8 * s + (tid - 8)] = __float2bfloat16_rn(mine[16 + tid - 8]);
  }
  __syncthreads();

  if constexpr (!ATTN) {  // timing floor: the QKV part alone, att = q
    if (s == 0 && tid < QF_HD) att[h * QF_HD + tid] = full[tid];
    kiln::cluster_sync();
    return;
  }
  // ---- the split attention (kiln's attention_split_block, G = 1) with row p from `full` ------
  float qv[8], acc[8], m = -kiln::inf(), l = 0.0f;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    qv[e] = __bfloat162float(full[d0 + e]);
    acc[e] = 0.0f;
  }
  const uint4 kfresh = *reinterpret_cast<const uint4*>(&full[QF_HD + d0]);
  const uint4 vfresh = *reinterpret_cast<const uint4*>(&full[2 * QF_HD + d0]);
  if (active) {
#pragma unroll
    for (int u = 0; u < QF_U; ++u) {
      if (j0 + u * 4 + pi == p && p < hi) {
        kr[u] = kfresh;
        vr[u] = vfresh;
      }
    }
    for (; j0 < hi; j0 += stride) {
      uint4 kn[QF_U], vn[QF_U];
      const long long nxt = j0 + stride < hi ? j0 + stride : hi;
      load_steps(nxt, kn, vn, p);
#pragma unroll
      for (int u = 0; u < QF_U; ++u) {
        if (nxt + u * 4 + pi == p && p < hi) {
          kn[u] = kfresh;
          vn[u] = vfresh;
        }
      }
      float sc[QF_U];
#pragma unroll
      for (int u = 0; u < QF_U; ++u) {
        float kf[8];
        unpack8(kr[u], kf);
        float d = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) d = __fmaf_rn(qv[e], kf[e], d);
        sc[u] = d;
      }
#pragma unroll
      for (int o = 4; o > 0; o >>= 1)
#pragma unroll
        for (int u = 0; u < QF_U; ++u) sc[u] += __shfl_xor_sync(0xffffffffu, sc[u], o);
#pragma unroll
      for (int u = 0; u < QF_U; ++u) sc[u] = j0 + u * 4 + pi < hi ? scale * sc[u] : -kiln::inf();
      float mx = m;
#pragma unroll
      for (int u = 0; u < QF_U; ++u) mx = fmaxf(mx, sc[u]);
      const bool any = mx != -kiln::inf();
      const float corr = any ? weight_of(m, mx) : 1.0f;
      l *= corr;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[e] *= corr;
#pragma unroll
      for (int u = 0; u < QF_U; ++u) {
        sc[u] = any ? weight_of(sc[u], mx) : 0.0f;
        l += sc[u];
      }
      m = any ? mx : m;
#pragma unroll
      for (int u = 0; u < QF_U; ++u) {
        float vf[8];
        unpack8(vr[u], vf);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[e] = __fmaf_rn(sc[u], vf[e], acc[e]);
      }
#pragma unroll
      for (int u = 0; u < QF_U; ++u) {
        kr[u] = kn[u];
        vr[u] = vn[u];
      }
    }
    // The warp's position groups (lanes l, l ^ 8, l ^ 16, l ^ 24), then across warps.
    for (unsigned int o = 8; o < 32; o <<= 1) {
      const float mo = __shfl_xor_sync(0xffffffffu, m, o);
      const float lo2 = __shfl_xor_sync(0xffffffffu, l, o);
      const float mx = fmaxf(m, mo);
      const float a = weight_of(m, mx), b = weight_of(mo, mx);
      l = a * l + b * lo2;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float ao = __shfl_xor_sync(0xffffffffu, acc[e], o);
        acc[e] = a * acc[e] + b * ao;
      }
      m = mx;
    }
    if (lane == 0) {
      sh_m[warp] = m;
      sh_l[warp] = l;
    }
    __syncthreads();
    float big_m = -kiln::inf(), big_l = 0.0f;
#pragma unroll
    for (int wv = 0; wv < QF_WARPS; ++wv) big_m = fmaxf(big_m, sh_m[wv]);
#pragma unroll
    for (int wv = 0; wv < QF_WARPS; ++wv) big_l += weight_of(sh_m[wv], big_m) * sh_l[wv];
    const float own = weight_of(m, big_m);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] *= own;
    const bool writer = pi == 0;
#pragma unroll
    for (unsigned int half = QF_WARPS / 2; half > 0; half >>= 1) {
      if (writer && warp >= half && warp < 2 * half) {
#pragma unroll
        for (int e = 0; e < 8; ++e) sh_acc[warp - half][d0 + e] = acc[e];
      }
      __syncthreads();
      if (writer && warp < half) {
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[e] += sh_acc[warp][d0 + e];
      }
      __syncthreads();
    }
    if (warp == 0 && writer) {
#pragma unroll
      for (int e = 0; e < 8; ++e) slot[d0 + e] = acc[e];
      if (lane == 0) {
        slot[QF_HD] = big_m;
        slot[QF_HD + 1] = big_l;
      }
    }
  }
  kiln::cluster_sync();
  if (s == 0 && tid < QF_HD) {  // kiln's cluster merge: every active split's slot, in split order
    float ms[QF_S], as[QF_S], ls[QF_S], big_m = -kiln::inf(), num = 0.0f, den = 0.0f;
#pragma unroll
    for (unsigned int r = 0; r < QF_S; ++r) {
      if (r < n_active) {
        const float* st = kiln::cluster_map(slot, r);
        ms[r] = st[QF_HD];
        as[r] = st[tid];
        ls[r] = st[QF_HD + 1];
      } else {
        ms[r] = -kiln::inf();
        as[r] = 0.0f;
        ls[r] = 0.0f;
      }
    }
#pragma unroll
    for (unsigned int r = 0; r < QF_S; ++r) big_m = fmaxf(big_m, ms[r]);
    if (big_m != -kiln::inf()) {
#pragma unroll
      for (unsigned int r = 0; r < QF_S; ++r) {
        if (r < n_active) {
          const float wt = weight_of(ms[r], big_m);
          num += wt * as[r];
          den += wt * ls[r];
        }
      }
    }
    att[h * QF_HD + tid] = __float2bfloat16_rn(den > 0.0f ? num / den : 0.0f);
  }
  kiln::cluster_sync();
#else
  __trap();
#endif
}

}  // namespace qf

#define QF_ARGS                                                                                                   \
  const __nv_bfloat16 *x, const __nv_bfloat16 *norm_w, const __nv_bfloat16 *w, const __nv_bfloat16 *bias,        \
      const float *inv_freq, const int *positions, const int *cache_base, __nv_bfloat16 *k_cache,                \
      __nv_bfloat16 *v_cache, __nv_bfloat16 *att, float scale, float eps, unsigned int kv_rows,                   \
      unsigned int planned_len, unsigned int min_split_len
#define QF_PASS x, norm_w, w, bias, inv_freq, positions, cache_base, k_cache, v_cache, att, scale, eps, kv_rows, \
                planned_len, min_split_len

extern "C" __global__ void __launch_bounds__(QF_THREADS, QF_MINB) __cluster_dims__(1, QF_S, 1)
    probe_qkv_attn_fold(QF_ARGS) {
  qf::qkv_attn_fold<true>(QF_PASS);
}
// The QKV part alone (no attention arithmetic; att = q): what the fold's attention costs on top.
extern "C" __global__ void __launch_bounds__(QF_THREADS, QF_MINB) __cluster_dims__(1, QF_S, 1)
    probe_qkv_attn_fold_noattn(QF_ARGS) {
  qf::qkv_attn_fold<false>(QF_PASS);
}
