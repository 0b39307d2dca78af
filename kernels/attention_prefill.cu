// attention_prefill.cu: kiln_attention_prefill_{f16,bf16}(q, k_cache, v_cache, positions, cache_base, out,
//                       rows, heads, kv_heads, head_dim, scale, kv_rows)
//
// Check on a GPU: python3 scripts/kernel_check.py --only attention_prefill --bench   (NVRTC build,
// no GPU: cargo test --test kernels_compile, or python3 scripts/kernel_check.py --compile-only)
//
// Semantics: exactly those of kiln_attention (attention.cu, Op::Attention), for head_dim 64 and
// 128 and f16 / bf16 storage. For row t with p = positions[t], base = cache_base[t]:
// - p < 0 (padding), base < 0, or no cache row in range: out[t, :] = 0;
// - else, for head h (kv head g = h / (heads / kv_heads)), over j in 0..len with
//   len = min(p + 1, kv_rows - base):
//     s_j = scale * dot(q[t, h], k_cache[base + j, g])        (f32)
//     out[t, h] = sum_j softmax(s)_j * v_cache[base + j, g]   (f32, rounded once)
// Rows >= `rows` are never written; cache rows outside [0, kv_rows) are never read. Other
// head_dims write zeros (the planner sends only 64 and 128). q, k_cache and v_cache must be
// 16-byte aligned (plan operands are 256-byte aligned).
// One rounding differs from attention.cu, as in every flash attention: the softmax weights
// exp(s_j - m) are rounded to T before the P.V tensor-core product (the row sum l is taken in f32
// before that rounding), so the output carries an extra error of about unit(T) * max|v|.
//
// CPU reference (as attention.cu):
//   for t, h: if p < 0: out = 0; continue
//     s[j] = scale * sum_d f32(q[t,h,d]) * f32(k[base+j,g,d]);  m = max_j s[j]
//     e[j] = exp(s[j] - m);  out[t,h,d] = T(sum_j e[j] * f32(v[base+j,g,d]) / sum_j e[j])
//
// Algorithm (flash attention 2): one block of KILN_FA_WARPS warps per (tile of KILN_FA_BM = 16 *
// warps query rows, head); warp w owns the tile's rows 16w..16w+15. The block walks the KV blocks
// j = 0, 1, ... of KILN_FA_BN cache rows (base + j * BN ...), double-buffered in shared memory by
// cp.async (the next block's K and V load while this one is used; XOR-swizzled 16-byte chunks so
// that ldmatrix is conflict-free). Per KV block each warp computes S = Q K^T with mma.sync
// m16n8k16 (Q fragments stay in registers, K fragments by ldmatrix), masks keys j > its row's last
// key, updates the online softmax (m, l, per-row rescale alpha, in registers, exp2 of scores
// pre-scaled by scale * log2 e) and adds P V (P converted from the S accumulators to T fragments,
// V by ldmatrix.trans). The tile visits blocks up to its largest last key; a warp whose 16 rows
// all end before block j skips it. At the end each row is divided by its l and rounded once.
// Tiles are launched heaviest (last) first: grid (heads, tiles), blockIdx.y = 0 takes the last
// tile of every head, so the longest blocks start first and the short ones fill the tail.
//
// Tiles whose rows have different cache_base (several sequences in one plan): the tile is done in
// passes, one per distinct base among its valid rows (smallest first); a pass loads that base's
// cache rows and treats every row of another base as padding. A tile of one sequence (the normal
// prefill chunk) takes one pass. Correct for any mix, but a tile of 64 sequences reads 64 caches.
//
// Bit identity (kiln gate runs one prompt in several row buckets): a row's output depends only on
// its own q, p, base and the cache, never on `rows`, on padding rows or on the other rows of its
// tile:
// - the KV blocks are always j = 0, 1, ... of fixed size BN from the row's base, and every row's
//   state (m, l, O, per lane) is updated in that order; each element of an mma depends only on
//   its own row of A, so other rows of the tile never enter the row's arithmetic;
// - the tile's largest key (the only thing other rows decide) only decides how many blocks are
//   visited; a block wholly past the row's last key leaves its state bit-unchanged: every score is
//   -inf, so m stays (finite from block 0, which always holds key 0), alpha = exp2(m - m) = 1
//   exactly, P = exp2(-inf) = 0 exactly, l = l * 1 + 0 and O = O * 1 + 0 * V (V there is a cache
//   row of the same tile, or zero-filled beyond the tile's largest key); whether a warp skips such
//   a block or runs it is therefore the same to the bit;
// - padding rows (p < 0) and rows of other bases are excluded from the tile's largest key and
//   from the bases of its passes, and a row is written only by the pass of its own base.
//
// Geometry (src/plan/geometry.rs `attention_prefill_geometry`): grid (heads, ceil(rows / BM)),
// block 32 * KILN_FA_WARPS, dynamic shared (BM + 4 * BN) * head_dim * 2 bytes (the Q tile and two
// K and two V buffers): 40 KiB at head_dim 64, 80 KiB at 128 (above 48 KiB: the runtime raises
// the function's dynamic shared limit).
// Every block first waits for the grids it depends on (kiln::wait_prior_grids, common.cuh), so a
// graph may launch it programmatically after its predecessor.
#include "common.cuh"

// Tuning knobs: overridable only for the sweep of scripts/kernel_check.py --bench.
#ifndef KILN_FA_WARPS
#define KILN_FA_WARPS 4
#endif
#ifndef KILN_FA_BN
#define KILN_FA_BN 64
#endif
// Blocks per SM the register allocation must allow (__launch_bounds__).
#ifndef KILN_FA_MIN_BLOCKS
#define KILN_FA_MIN_BLOCKS 1
#endif
// 1: grid (heads, tiles), so that the heaviest (last) tile of every head is dispatched before any
// lighter one; 0: grid (tiles, heads), heaviest first within each head only.
#ifndef KILN_FA_HEADS_ON_X
#define KILN_FA_HEADS_ON_X 1
#endif
#define KILN_FA_THREADS (32 * KILN_FA_WARPS)
#define KILN_FA_BM (16 * KILN_FA_WARPS)

namespace kiln {
namespace fa {

__device__ __forceinline__ unsigned int smem_addr(const void* p) {
  return static_cast<unsigned int>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(unsigned int (&r)[4], unsigned int addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned int (&r)[4], unsigned int addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// 2^x (MUFU.EX2; subnormal results flush to 0): exactly 1 at 0 and 0 at -inf.
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// The head and the query tile of this block (see KILN_FA_HEADS_ON_X); the last tile comes first.
__device__ __forceinline__ void block_head_tile(unsigned int& head, unsigned int& tile) {
#if KILN_FA_HEADS_ON_X
  head = blockIdx.x;
  tile = gridDim.y - 1 - blockIdx.y;
#else
  head = blockIdx.y;
  tile = gridDim.x - 1 - blockIdx.x;
#endif
}

// Two f32 as a T pair (round to nearest even), a in the low half: the mma fragment order.
__device__ __forceinline__ unsigned int pack2(float a, float b, __nv_bfloat16) {
  __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<unsigned int*>(&v);
}
__device__ __forceinline__ unsigned int pack2(float a, float b, __half) {
  __half2 v = __floats2half2_rn(a, b);
  return *reinterpret_cast<unsigned int*>(&v);
}

// Byte offset of 16-byte chunk `chunk` of tile row `row` (CH chunks per row): chunks are XOR
// swizzled by row & 7, so the 8 rows of an ldmatrix matrix hit 8 different bank groups.
template <int CH> __device__ __forceinline__ unsigned int swizzle(int row, int chunk) {
  return static_cast<unsigned int>((row * CH + (chunk ^ (row & 7))) * 16);
}

template <typename T, int HD>
__device__ void attention_prefill(const T* q, const T* k_cache, const T* v_cache,
                                  const int* positions, const int* cache_base,
                                  T* __restrict__ out, unsigned int rows, unsigned int heads, unsigned int kv_heads,
                                  float scale, unsigned int kv_rows) {
  constexpr int BM = KILN_FA_BM, BN = KILN_FA_BN, THREADS = KILN_FA_THREADS;
  constexpr int CH = HD / 8;  // 16-byte chunks per row of a tile
  constexpr int TILE_Q = BM * HD * 2, TILE_KV = BN * HD * 2;
  static_assert(HD % 16 == 0 && CH >= 8 && BN % 16 == 0, "tile shapes");
  extern __shared__ __align__(128) unsigned char kiln_fa_smem[];
  __shared__ int s_last[BM];  // the row's last key (len - 1) while pending, -1 once done or never valid
  __shared__ int s_base[BM];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  unsigned int h, tile;
  block_head_tile(h, tile);
  if (h >= heads || kv_heads == 0) return;  // uniform over the block
  const long long row0 = (long long)tile * BM;
  const unsigned int group = heads / kv_heads;
  const unsigned int g = h / (group == 0 ? 1 : group);
  const size_t kv_stride = (size_t)kv_heads * HD;  // elements between cache rows

  const unsigned int sq = smem_addr(kiln_fa_smem);
  const unsigned int sk = sq + TILE_Q;               // K buffers 0, 1
  const unsigned int sv = sk + 2 * TILE_KV;          // V buffers 0, 1

  // The Q tile (rows past `rows` zero-filled), as commit group 0.
  for (int i = tid; i < BM * CH; i += THREADS) {
    const int r = i / CH, c = i % CH;
    const long long t = row0 + r;
    const bool valid = t < (long long)rows;
    cp_async16(sq + swizzle<CH>(r, c), q + ((size_t)(valid ? t : 0) * heads + h) * HD + c * 8, valid);
  }
  cp_async_commit();

  if (tid < BM) {
    const long long t = row0 + tid;
    int last = -1, base = 0;
    if (t < (long long)rows) {
      const int p = positions[t];
      const long long b = cache_base[t];
      long long len = (long long)p + 1;
      if (b + len > (long long)kv_rows) len = (long long)kv_rows - b;
      if (p >= 0 && b >= 0 && len > 0) {
        last = (int)(len - 1);
        base = (int)b;
      } else {
        T* o = out + ((size_t)t * heads + h) * HD;
        for (int d = 0; d < HD; ++d) o[d] = kiln::zero<T>();
      }
    }
    s_last[tid] = last;
    s_base[tid] = base;
  }

  const float scale_log2 = scale * 1.4426950408889634f;
  const int quad_row = lane >> 2, quad_col = 2 * (lane & 3);
  const int r_lo = warp * 16 + quad_row, r_hi = r_lo + 8;  // the two tile rows of this lane

  for (;;) {
    __syncthreads();  // s_last / s_base written
    // This pass: the smallest base among pending rows, and its rows.
    int pass_base = 0x7fffffff, tile_last = -1;
    for (int r = 0; r < BM; ++r) {
      if (s_last[r] >= 0) pass_base = min(pass_base, s_base[r]);
    }
    for (int r = 0; r < BM; ++r) {
      if (s_last[r] >= 0 && s_base[r] == pass_base) tile_last = max(tile_last, s_last[r]);
    }
    if (tile_last < 0) break;  // uniform: every thread read the same shared state
    const int last_lo = s_last[r_lo] >= 0 && s_base[r_lo] == pass_base ? s_last[r_lo] : -1;
    const int last_hi = s_last[r_hi] >= 0 && s_base[r_hi] == pass_base ? s_last[r_hi] : -1;
    int warp_max = max(last_lo, last_hi), warp_min = min(last_lo, last_hi);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      warp_max = max(warp_max, __shfl_xor_sync(0xffffffffu, warp_max, o));
      warp_min = min(warp_min, __shfl_xor_sync(0xffffffffu, warp_min, o));
    }
    const int blocks = tile_last / BN + 1;
    const T* kbase = k_cache + (size_t)pass_base * kv_stride + (size_t)g * HD;
    const T* vbase = v_cache + (size_t)pass_base * kv_stride + (size_t)g * HD;

    // K and V of block j into buffer `buf`; keys past the tile's last key are zero-filled.
    auto load_kv = [&](int j, int buf) {
      for (int i = tid; i < BN * CH; i += THREADS) {
        const int r = i / CH, c = i % CH;
        const int key = j * BN + r;
        const bool valid = key <= tile_last;
        const size_t off = (size_t)(valid ? key : 0) * kv_stride + c * 8;
        cp_async16(sk + buf * TILE_KV + swizzle<CH>(r, c), kbase + off, valid);
        cp_async16(sv + buf * TILE_KV + swizzle<CH>(r, c), vbase + off, valid);
      }
    };

    unsigned int qf[HD / 16][4];
    float acc[HD / 8][4];
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    float m_lo = -kiln::inf(), m_hi = -kiln::inf(), l_lo = 0.0f, l_hi = 0.0f;

    load_kv(0, 0);
    cp_async_commit();
    for (int j = 0; j < blocks; ++j) {
      if (j + 1 < blocks) load_kv(j + 1, (j + 1) & 1);
      cp_async_commit();  // possibly empty: the wait below always leaves exactly the next block
      cp_async_wait<1>();
      __syncthreads();
      if (j * BN <= warp_max) {  // warp-uniform: some row of this warp sees a key of block j
        const unsigned int kb = sk + (j & 1) * TILE_KV, vb = sv + (j & 1) * TILE_KV;
        if (j == 0) {
#pragma unroll
          for (int kk = 0; kk < HD / 16; ++kk) ldmatrix_x4(qf[kk], sq + swizzle<CH>(warp * 16 + (lane & 15), 2 * kk + (lane >> 4)));
        }
        // S = Q K^T (16 x BN per warp).
        float s[BN / 8][4];
#pragma unroll
        for (int n = 0; n < BN / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk) {
#pragma unroll
          for (int np = 0; np < BN / 16; ++np) {
            unsigned int b[4];
            ldmatrix_x4(b, kb + swizzle<CH>(np * 16 + (lane & 7) + ((lane >> 4) << 3), 2 * kk + ((lane >> 3) & 1)));
            kiln::mma_m16n8k16<T>(s[2 * np], qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], b[0], b[1]);
            kiln::mma_m16n8k16<T>(s[2 * np + 1], qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], b[2], b[3]);
          }
        }
        // Scale to the exp2 domain and mask keys past each row's last key.
        const bool masked = (j + 1) * BN - 1 > warp_min;
        float mx_lo = m_lo, mx_hi = m_hi;
#pragma unroll
        for (int n = 0; n < BN / 8; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = j * BN + n * 8 + quad_col + (e & 1);
            float x = s[n][e] * scale_log2;
            if (masked && key > (e < 2 ? last_lo : last_hi)) x = -kiln::inf();
            s[n][e] = x;
          }
          mx_lo = fmaxf(mx_lo, fmaxf(s[n][0], s[n][1]));
          mx_hi = fmaxf(mx_hi, fmaxf(s[n][2], s[n][3]));
        }
        mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, 1));
        mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, 2));
        mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, 1));
        mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, 2));
        // A row with no key yet keeps m = -inf; subtract 0 then, so that exp2 gives 0, not NaN.
        const float use_lo = mx_lo == -kiln::inf() ? 0.0f : mx_lo;
        const float use_hi = mx_hi == -kiln::inf() ? 0.0f : mx_hi;
        const float alpha_lo = ex2(m_lo - use_lo), alpha_hi = ex2(m_hi - use_hi);
        m_lo = mx_lo;
        m_hi = mx_hi;
        float sum_lo = 0.0f, sum_hi = 0.0f;
#pragma unroll
        for (int n = 0; n < BN / 8; ++n) {
          s[n][0] = ex2(s[n][0] - use_lo);
          s[n][1] = ex2(s[n][1] - use_lo);
          s[n][2] = ex2(s[n][2] - use_hi);
          s[n][3] = ex2(s[n][3] - use_hi);
          sum_lo += s[n][0] + s[n][1];
          sum_hi += s[n][2] + s[n][3];
        }
        l_lo = l_lo * alpha_lo + sum_lo;
        l_hi = l_hi * alpha_hi + sum_hi;
#pragma unroll
        for (int n = 0; n < HD / 8; ++n) {
          acc[n][0] *= alpha_lo;
          acc[n][1] *= alpha_lo;
          acc[n][2] *= alpha_hi;
          acc[n][3] *= alpha_hi;
        }
        // O += P V: the S accumulators of keys 16kk..16kk+15 are the A fragment of step kk.
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
          const unsigned int a0 = pack2(s[2 * kk][0], s[2 * kk][1], T());
          const unsigned int a1 = pack2(s[2 * kk][2], s[2 * kk][3], T());
          const unsigned int a2 = pack2(s[2 * kk + 1][0], s[2 * kk + 1][1], T());
          const unsigned int a3 = pack2(s[2 * kk + 1][2], s[2 * kk + 1][3], T());
#pragma unroll
          for (int dp = 0; dp < HD / 16; ++dp) {
            unsigned int b[4];
            ldmatrix_x4_trans(b, vb + swizzle<CH>(kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3), 2 * dp + (lane >> 4)));
            kiln::mma_m16n8k16<T>(acc[2 * dp], a0, a1, a2, a3, b[0], b[1]);
            kiln::mma_m16n8k16<T>(acc[2 * dp + 1], a0, a1, a2, a3, b[2], b[3]);
          }
        }
      }
      __syncthreads();  // block j's buffer is free for block j + 2
    }

    // The row sums over the quad, then the rows of this pass, rounded once.
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, 1);
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, 2);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, 1);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, 2);
    const float inv_lo = l_lo > 0.0f ? 1.0f / l_lo : 0.0f, inv_hi = l_hi > 0.0f ? 1.0f / l_hi : 0.0f;
    T* o_lo = out + ((size_t)(row0 + r_lo) * heads + h) * HD + quad_col;
    T* o_hi = out + ((size_t)(row0 + r_hi) * heads + h) * HD + quad_col;
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) {
      if (last_lo >= 0) *reinterpret_cast<unsigned int*>(o_lo + n * 8) = pack2(acc[n][0] * inv_lo, acc[n][1] * inv_lo, T());
      if (last_hi >= 0) *reinterpret_cast<unsigned int*>(o_hi + n * 8) = pack2(acc[n][2] * inv_hi, acc[n][3] * inv_hi, T());
    }
    __syncthreads();  // every thread has read this pass's rows
    if (tid < BM && s_last[tid] >= 0 && s_base[tid] == pass_base) s_last[tid] = -1;
  }
  cp_async_wait<0>();  // nothing in flight when the block exits (a tile with no valid row)
}

// Unsupported head_dim: zero rows (the planner never sends one).
template <typename T>
__device__ void attention_prefill_zero(T* __restrict__ out, unsigned int rows, unsigned int heads, unsigned int head_dim) {
  unsigned int h, tile;
  block_head_tile(h, tile);
  const long long row0 = (long long)tile * KILN_FA_BM;
  if (h >= heads) return;
  for (int i = threadIdx.x; i < KILN_FA_BM * (int)head_dim; i += KILN_FA_THREADS) {
    const long long t = row0 + i / (int)head_dim;
    if (t < (long long)rows) out[((size_t)t * heads + h) * head_dim + i % head_dim] = kiln::zero<T>();
  }
}

}  // namespace fa
}  // namespace kiln

#define KILN_ATTENTION_PREFILL(dt, T)                                                                            \
  extern "C" __global__ void __launch_bounds__(KILN_FA_THREADS, KILN_FA_MIN_BLOCKS) kiln_attention_prefill_##dt( \
      const T* q, const T* k_cache, const T* v_cache, const int* positions, const int* cache_base, T* out,       \
      unsigned int rows, unsigned int heads, unsigned int kv_heads, unsigned int head_dim, float scale,          \
      unsigned int kv_rows) {                                                                                    \
    KILN_TRACE_BLOCK_END();                                                                                      \
    kiln::wait_prior_grids();                                                                                    \
    if (head_dim == 128)                                                                                         \
      kiln::fa::attention_prefill<T, 128>(q, k_cache, v_cache, positions, cache_base, out, rows, heads, kv_heads, \
                                          scale, kv_rows);                                                       \
    else if (head_dim == 64)                                                                                     \
      kiln::fa::attention_prefill<T, 64>(q, k_cache, v_cache, positions, cache_base, out, rows, heads, kv_heads,  \
                                         scale, kv_rows);                                                        \
    else                                                                                                         \
      kiln::fa::attention_prefill_zero<T>(out, rows, heads, head_dim);                                           \
  }
KILN_ATTENTION_PREFILL(f16, __half)
KILN_ATTENTION_PREFILL(bf16, __nv_bfloat16)
