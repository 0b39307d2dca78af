// probe_attn_o_fold.cu: a probe for the decode attention recomputed inside every block of the o
// projection (bench/NOTES-decode.md, session 47). NOT one of kiln's kernels: compiled only by
// scripts/probe_attn_o_fold.py, which times kiln's QKV -> attention (cluster) -> o chain against
// QKV -> this kernel.
//
//   probe_attn_o_fold(q, k_cache, v_cache, positions, cache_base, w, y, scale)
//     batch 1, bf16, the Qwen2.5-0.5B attention (14 heads, 2 KV heads, head_dim 64) and its o
//     projection (y[n] = bf16(sum_k w[n, k] att[k]), 896 -> 896). Every block computes the whole
//     attention output att (bf16, 896 values) for the live position p = positions[0] over the keys
//     0..p at cache row cache_base[0] + j, then its 16 rows of y.
//
// Why: kiln's attention and o are two dependent launches per layer (attention 5.8 us and o 1.9 us
// per 0.5B layer in place, session 40's trace), and the attention's work at a short context is
// small (14 heads x <= 384 keys x 64). Here every o block redoes it on tensor cores: one launch and
// one boundary fewer per layer, at the price of the attention on every o block's critical path.
//
// Geometry: grid 56 (896 / 16 rows), block 512 (16 warps), dynamic shared memory PROBE_SMEM.
// Warps 0-7 take KV group 0 (heads 0-6), 8-15 group 1 (heads 7-13); warp w of a group takes the
// 16-key chunks w, w + 8, w + 16 (so p < 384). Per chunk: S = Q K^T with mma.m16n8k16 (M = the
// group's 7 heads padded to 16, N = 8 keys, K = 16 dims, the dims permuted alike in Q and K so each
// lane loads 32 contiguous bytes of a key), a softmax local to the warp, O += P V (P as the A
// operand straight from S's accumulators, V from shared memory by ldmatrix.trans); the 8 warps of a
// group merge (m, l, O) through shared memory, as a flash-decoding merge.
//
// Before the wait (PDL: they depend on nothing the prior grid writes): the block's 16 weight rows
// and V rows 0..p-1 into shared memory (cp.async), K rows 0..p-1 into registers, the position and
// the cache base. After it: q, and row p of K and V (written by the prior grid, QKV-RoPE in kiln).
#include "probe_common.cuh"

#define PF_HEADS 14
#define PF_KVH 2
#define PF_GROUP 7
#define PF_HD 64
#define PF_K (PF_HEADS * PF_HD)  // 896
#define PF_N 896
#define PF_ROWS 16
#define PF_THREADS 512
#define PF_WPG 8     // warps per KV group
#define PF_CPW 3     // 16-key chunks per warp
#define PF_MAXKEYS (PF_WPG * PF_CPW * 16)  // 384
// Shared memory: V [2 groups][384 rows][64] bf16 (rows swizzled by 16-byte chunk), the weight tile
// [16][896] bf16, the merge's partials [2][8 warps][7 heads][64] f32 and (m, l) [2][8][7][2] f32,
// att [896] bf16.
#define PF_V_BYTES (PF_KVH * PF_MAXKEYS * PF_HD * 2)
#define PF_W_BYTES (PF_ROWS * PF_K * 2)
#define PF_PART_BYTES (PF_KVH * PF_WPG * PF_GROUP * PF_HD * 4)
#define PF_ML_BYTES (PF_KVH * PF_WPG * PF_GROUP * 2 * 4)
#define PF_ATT_BYTES (PF_K * 2)
#define PROBE_SMEM (PF_V_BYTES + PF_W_BYTES + PF_PART_BYTES + PF_ML_BYTES + PF_ATT_BYTES)

__device__ __forceinline__ unsigned int pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const unsigned int*>(&v);
}
// The 16-byte chunk c of V row r (of one group) in shared memory: chunks swizzled by the row, so
// that ldmatrix's 8 rows at one chunk hit 8 different bank groups.
__device__ __forceinline__ unsigned int v_off(unsigned int r, unsigned int c) {
  return r * PF_HD * 2 + ((c ^ (r & 7)) << 4);
}

template <bool MATH>
__device__ void attn_o_fold(const __nv_bfloat16* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache,
                            const int* positions, const int* cache_base, const __nv_bfloat16* w, __nv_bfloat16* y,
                            float scale) {
  extern __shared__ __align__(16) unsigned char smem[];
  unsigned char* vs = smem;                                     // [2][384][64] bf16, swizzled
  unsigned char* ws = vs + PF_V_BYTES;                          // [16][896] bf16
  float* part = reinterpret_cast<float*>(ws + PF_W_BYTES);      // [2][8][7][64]
  float* ml = part + PF_KVH * PF_WPG * PF_GROUP * PF_HD;        // [2][8][7][2]
  __nv_bfloat16* att = reinterpret_cast<__nv_bfloat16*>(ml + PF_KVH * PF_WPG * PF_GROUP * 2);
  const unsigned int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const unsigned int gq = lane >> 2, t4 = lane & 3;  // mma groupID, thread in group
  const unsigned int kvg = warp / PF_WPG, wg = warp % PF_WPG;
  const unsigned int kv_dim = PF_KVH * PF_HD;

  // ---- before the wait --------------------------------------------------------------------
  const int p = ld_cgi(positions);  // step inputs: older than the program
  const long long base = ld_cgi(cache_base);
  const unsigned int nkeys = (unsigned int)p + 1;  // keys 0..p
  if (p < 0 || nkeys > PF_MAXKEYS) __trap();
  const size_t row0 = (size_t)blockIdx.x * PF_ROWS;
  for (unsigned int i = tid; i < PF_W_BYTES / 16; i += PF_THREADS)
    cp_async16(ws + 16 * i, reinterpret_cast<const unsigned char*>(w + row0 * PF_K) + 16 * i);
  const unsigned int nk16 = (nkeys + 15) & ~15u;
  for (unsigned int i = tid; i < PF_KVH * nk16 * 8; i += PF_THREADS) {
    const unsigned int c = i & 7, r = (i >> 3) % nk16, g = (i >> 3) / nk16;
    unsigned char* dst = vs + (size_t)g * PF_MAXKEYS * PF_HD * 2 + v_off(r, c);
    if (r < (unsigned int)p)
      cp_async16(dst, v_cache + (size_t)(base + r) * kv_dim + g * PF_HD + 8 * c);
    else if (r != (unsigned int)p)
      *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);  // past p zeros; row p after the wait
  }
  // K: for chunk i of this warp (keys 16 ch + 8 h + gq, h = 0, 1), this lane's 16 dims 16 t4..
  uint4 kr[PF_CPW][2][2];
#pragma unroll
  for (int i = 0; i < PF_CPW; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const unsigned int key = 16 * (wg + PF_WPG * i) + 8 * h + gq;
      const __nv_bfloat16* kp = k_cache + (size_t)(base + key) * kv_dim + kvg * PF_HD + 16 * t4;
      const bool old = key < (unsigned int)p;
      kr[i][h][0] = old ? ld_cg16(kp) : make_uint4(0, 0, 0, 0);
      kr[i][h][1] = old ? ld_cg16(kp + 8) : make_uint4(0, 0, 0, 0);
    }

  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");

  // ---- after the wait: q and row p ---------------------------------------------------------
  if constexpr (!MATH) {  // the timing floor: the same loads, att = q, no attention arithmetic
    for (unsigned int i = tid; i < PF_K / 8; i += PF_THREADS)
      reinterpret_cast<uint4*>(att)[i] = ld_cg16(q + 8 * i);
    cp_async_wait_all();
    __syncthreads();
  } else {
  uint4 qr[2] = {make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0)};
  if (gq < PF_GROUP) {
    const __nv_bfloat16* qp = q + (size_t)(kvg * PF_GROUP + gq) * PF_HD + 16 * t4;
    qr[0] = ld_cg16(qp);
    qr[1] = ld_cg16(qp + 8);
  }
#pragma unroll
  for (int i = 0; i < PF_CPW; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const unsigned int key = 16 * (wg + PF_WPG * i) + 8 * h + gq;
      if (key == (unsigned int)p) {
        const __nv_bfloat16* kp = k_cache + (size_t)(base + key) * kv_dim + kvg * PF_HD + 16 * t4;
        kr[i][h][0] = ld_cg16(kp);
        kr[i][h][1] = ld_cg16(kp + 8);
      }
    }
  if (tid < PF_KVH * 8) {
    const unsigned int g = tid >> 3, c = tid & 7;
    *reinterpret_cast<uint4*>(vs + (size_t)g * PF_MAXKEYS * PF_HD * 2 + v_off(p, c)) =
        ld_cg16(v_cache + (size_t)(base + p) * kv_dim + g * PF_HD + 8 * c);
  }
  cp_async_wait_all();
  __syncthreads();

  // ---- S = Q K^T, per chunk two n-tiles of 8 keys --------------------------------------------
  const unsigned int qw[8] = {qr[0].x, qr[0].y, qr[0].z, qr[0].w, qr[1].x, qr[1].y, qr[1].z, qr[1].w};
  float s[PF_CPW][2][4];
  float mloc = -__int_as_float(0x7f800000);
#pragma unroll
  for (int i = 0; i < PF_CPW; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float d[4] = {0.f, 0.f, 0.f, 0.f};
      const unsigned int kw[8] = {kr[i][h][0].x, kr[i][h][0].y, kr[i][h][0].z, kr[i][h][0].w,
                                  kr[i][h][1].x, kr[i][h][1].y, kr[i][h][1].z, kr[i][h][1].w};
      const bool any = 16 * (wg + PF_WPG * i) < nkeys;
      if (any) {
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) mma_bf16(d, qw[2 * ks], 0u, qw[2 * ks + 1], 0u, kw[2 * ks], kw[2 * ks + 1]);
      }
      // c0, c1: head gq, keys 16 ch + 8 h + 2 t4 + {0, 1}
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const unsigned int key = 16 * (wg + PF_WPG * i) + 8 * h + 2 * t4 + e;
        s[i][h][e] = key < nkeys ? d[e] * scale : -__int_as_float(0x7f800000);
        mloc = fmaxf(mloc, s[i][h][e]);
      }
    }
  // The warp's max per head: over the 4 lanes of a head.
  mloc = fmaxf(mloc, __shfl_xor_sync(0xffffffffu, mloc, 1));
  mloc = fmaxf(mloc, __shfl_xor_sync(0xffffffffu, mloc, 2));
  const bool none = mloc == -__int_as_float(0x7f800000);
  float lsum = 0.f;
  float o[8][4];
#pragma unroll
  for (int n = 0; n < 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  const unsigned char* vg = vs + (size_t)kvg * PF_MAXKEYS * PF_HD * 2;
#pragma unroll
  for (int i = 0; i < PF_CPW; ++i) {
    const unsigned int k0 = 16 * (wg + PF_WPG * i);
    if (k0 >= nkeys) break;
    unsigned int a[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float e0 = none ? 0.f : __expf(s[i][h][0] - mloc), e1 = none ? 0.f : __expf(s[i][h][1] - mloc);
      const __nv_bfloat162 pb = __floats2bfloat162_rn(e0, e1);
      const float2 pf = __bfloat1622float2(pb);
      lsum += pf.x + pf.y;
      a[h] = *reinterpret_cast<const unsigned int*>(&pb);
    }
    // O += P V over keys k0..k0+15: ldmatrix.x4.trans of V rows (keys) for dims 16 m .. 16 m + 15.
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      // lanes 0-7: keys k0+0..7 at dims 16m..+7; 8-15: keys k0+8..15 same dims; 16-31: dims +8.
      const unsigned int r = k0 + (lane & 7) + 8 * ((lane >> 3) & 1);
      const unsigned int c = 2 * m + (lane >> 4);
      const unsigned int addr = smem_u32(vg + v_off(r, c));
      unsigned int b0, b1, b2, b3;
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                   : "=r"(b0), "=r"(b1), "=r"(b2), "=r"(b3)
                   : "r"(addr));
      mma_bf16(o[2 * m], a[0], 0u, a[1], 0u, b0, b1);
      mma_bf16(o[2 * m + 1], a[0], 0u, a[1], 0u, b2, b3);
    }
  }
  lsum += __shfl_xor_sync(0xffffffffu, lsum, 1);
  lsum += __shfl_xor_sync(0xffffffffu, lsum, 2);
  // The warp's partials: O[head gq][dims 8 n + 2 t4 + {0, 1}] in o[n][0..1].
  if (gq < PF_GROUP) {
    float* pp = part + ((size_t)(kvg * PF_WPG + wg) * PF_GROUP + gq) * PF_HD;
#pragma unroll
    for (int n = 0; n < 8; ++n) *reinterpret_cast<float2*>(pp + 8 * n + 2 * t4) = make_float2(o[n][0], o[n][1]);
    if (t4 == 0) {
      float* mp = ml + ((size_t)(kvg * PF_WPG + wg) * PF_GROUP + gq) * 2;
      mp[0] = mloc;
      mp[1] = lsum;
    }
  }
  __syncthreads();
  // ---- merge over the 8 warps of each group; att in bf16 -------------------------------------
  for (unsigned int e = tid; e < PF_K; e += PF_THREADS) {
    const unsigned int hd = e / PF_HD, d = e % PF_HD, g = hd / PF_GROUP, hh = hd % PF_GROUP;
    float big = -__int_as_float(0x7f800000);
#pragma unroll
    for (int j = 0; j < PF_WPG; ++j) big = fmaxf(big, ml[((g * PF_WPG + j) * PF_GROUP + hh) * 2]);
    float den = 0.f, num = 0.f;
#pragma unroll
    for (int j = 0; j < PF_WPG; ++j) {
      const float mj = ml[((g * PF_WPG + j) * PF_GROUP + hh) * 2];
      const float f = mj == -__int_as_float(0x7f800000) ? 0.f : __expf(mj - big);
      den = __fmaf_rn(f, ml[((g * PF_WPG + j) * PF_GROUP + hh) * 2 + 1], den);
      num = __fmaf_rn(f, part[((g * PF_WPG + j) * PF_GROUP + hh) * PF_HD + d], num);
    }
    att[e] = __float2bfloat16_rn(den > 0.f ? num / den : 0.f);
  }
  __syncthreads();
  }
  // ---- the o projection: warp r takes row r of the block's 16 ---------------------------------
  {
    const uint4* wr = reinterpret_cast<const uint4*>(ws + (size_t)warp * PF_K * 2);
    const uint4* xv = reinterpret_cast<const uint4*>(att);
    float acc = 0.f;
    for (unsigned int c = lane; c < PF_K / 8; c += 32) acc = dot8(wr[c], xv[c], acc);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0 && row0 + warp < PF_N) y[row0 + warp] = __float2bfloat16_rn(acc);
  }
}

extern "C" __global__ void __launch_bounds__(PF_THREADS, 1)
    probe_attn_o_fold(const __nv_bfloat16* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache,
                      const int* positions, const int* cache_base, const __nv_bfloat16* w, __nv_bfloat16* y,
                      float scale) {
  attn_o_fold<true>(q, k_cache, v_cache, positions, cache_base, w, y, scale);
}
// The same kernel without the attention's arithmetic (att = q): what the loads, the wait and the
// o rows cost alone (the output is not checked).
extern "C" __global__ void __launch_bounds__(PF_THREADS, 1)
    probe_attn_o_fold_nomath(const __nv_bfloat16* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache,
                             const int* positions, const int* cache_base, const __nv_bfloat16* w,
                             __nv_bfloat16* y, float scale) {
  attn_o_fold<false>(q, k_cache, v_cache, positions, cache_base, w, y, scale);
}
