// linear_fused.cu: the fused decode/prefill projections of Op::FusedLinear, Op::GatedLinear,
// Op::QkvLinear and Op::QkvRope.
//   kiln_fused_linear_{dt}_{outdt}(x, norm_w, weight, bias, residual, out, l2_prefetch, rows,
//                                  in_features, out_features, has_norm, eps, has_bias,
//                                  has_residual, l2_prefetch_bytes)
//   kiln_fused_linear_outnorm_bf16_bf16(.., out, l2_prefetch, out_norm_w, sumsq, ..)   (with an
//                                  ir::OutNorm: see its declaration near the end)
//   kiln_gated_linear_{dt}(x, norm_w, gate, up, out, rows, in_features, out_features, has_norm, eps)
//   kiln_qkv_linear_{dt}(x, norm_w, wq, wk, wv, bq, bk, bv, out_q, out_k, out_v, rows, in_features,
//                        nq, nk, nv, has_norm, eps, has_bias)   (Op::QkvLinear, near the end)
//   kiln_qkv_rope_{dt}(x, norm_w, weight, bias, positions, cache_base, q_out, k_cache, v_cache, rows,
//                      in_features, heads, kv_heads, head_dim, kv_rows, has_norm, eps, has_bias,
//                      early, <rope scalars>, RopeFreqs by value)   (Op::QkvRope, at the end)
//   Absent operands are null pointers (see src/runtime/cuda/abi.rs `pointers`). x, norm_w,
//   weight / gate / up and bias are dt; out and residual are outdt (gated: dt).
//
// Check on a GPU: python3 scripts/kernel_check.py --only fused,qkv,qkv_rope,dense   (NVRTC
// build, no GPU: cargo test --test kernels_compile)
//
// Semantics (CPU reference, src/runtime/cpu.rs), per row r, in f32:
//   h = x, c = 1                                                 without a norm
//   inv = 1 / sqrt(sum_k x[r,k]^2 / in + eps)
//   h[k] = dt(dt(x[r,k] * inv) * norm_w[k]), c = 1               f16 (norm before the dot:
//                                                                 what RmsNorm stores)
//   h[k] = dt(x[r,k] * norm_w[k]), c = inv                       f32, bf16 (after the dot:
//                                                                 PostNorm, ir::NormOrder)
//   acc[n] = c * sum_k h[k] * w[n,k] (+ bias[n])
//   fused: out = outdt(acc)                or outdt(outdt(acc) + residual[r,n])
//   gated: g = dt(c * h . gate[n]), u = dt(c * h . up[n]); out = dt(g / (1 + exp(-g)) * u)
// After the dot, the tensor-core path streams its weights against x at once (FusedPostNormX:
// h formed as each chunk is consumed, the squares of x summed on the way) and scales the sums
// in the epilogue; no reduction stands between the wait for the prior grids and the first MMA.
// Before it (f16), the rows' inverse RMS is computed once per block before the GEMV
// (FusedNormX).
//
// Paths, chosen from `rows` (the geometry in src/plan/geometry.rs matches):
// - rows <= 8: GEMV, one block per 16 output features, 256 threads (512 when the grid has fewer than
//   132 blocks); the default gated kernel's grids over one wave of slots have fewer blocks, each
//   walking several 16-feature tiles (linear.cu gemv_mma_walk, KILN_GEMV_WALK). f16 / bf16 with
//   in % 8 == 0 and 16-byte aligned operands: tensor cores (mma.m16n8k16, the layout of linear.cu's GEMV:
//   16 weight rows x up to 8 rows of x, k split over the warps, partial tiles summed in warp order
//   through shared memory), sharing linear.cu's main loop (gemv_mma_loop: a ring of KILN_FUSED_DEPTH
//   chunks per warp, KILN_GATED_DEPTH for the two matrices of the gated kernel); the norm's inverse
//   RMS comes from 16-byte loads over the whole block (fused_row_inv16); the normed rows are then
//   staged in shared memory when they fit KILN_FUSED_NORM_STAGE (FusedNormX), else x is normed as
//   each chunk is consumed. Otherwise SIMT: a warp per feature, lanes strided over k, warp-shuffle
//   sums.
// PDL: the tensor-core path issues its first weight loads before kiln::wait_prior_grids() and
// reads x, norm_w's row statistics, bias and residual and writes `out` only after it; every other
// path (and every early return) waits first. See linear.cu and common.cuh.
// - rows > 8: a plain shared-memory tiled kernel, 64x64 outputs per block, 256 threads, grid
//   (ceil(out / 64), ceil(rows / 64)). Correctness first.
// Reduction orders depend only on the shapes: deterministic, no atomics.
#include "linear.cu"  // the tensor-core GEMV main loop (gemv_mma_loop)
#include "rope.cuh"   // the rotary angle of QkvRope's epilogue (the bits of rope.cu)

namespace kiln {

#define KILN_FUSED_GEMV_MAX_ROWS 8
#define KILN_FUSED_GEMV_FEATURES 16
#define KILN_FUSED_GEMV_MAX_WARPS 16
#define KILN_FUSED_TILE 64
#define KILN_FUSED_TILE_K 32
// Ring depth (chunks in flight per warp, see gemv_mma_loop in linear.cu) of the fused GEMV and of
// the gated one (two matrices: half the chunks for the same bytes in flight).
#ifndef KILN_FUSED_DEPTH
#define KILN_FUSED_DEPTH KILN_LINEAR_GEMV_DEPTH
#endif
#ifndef KILN_GATED_DEPTH
#define KILN_GATED_DEPTH (KILN_FUSED_DEPTH / 2 > 0 ? KILN_FUSED_DEPTH / 2 : 1)
#endif
#ifndef KILN_FUSED_K2_DEPTH
#define KILN_FUSED_K2_DEPTH 8
#endif
#ifdef KILN_FUSED_MAXNREG
#define KILN_FUSED_BOUNDS __maxnreg__(KILN_FUSED_MAXNREG)
#else
#define KILN_FUSED_BOUNDS __launch_bounds__(32 * KILN_FUSED_GEMV_MAX_WARPS)
#endif
// Bytes of shared memory for the normed x of the tensor-core GEMV (FusedNormX's STAGED path: rows x
// in elements; 16 KiB holds one row of up to 8192 features, or 2 of 4096); 0 turns staging off.
#ifndef KILN_FUSED_NORM_STAGE
#define KILN_FUSED_NORM_STAGE 16384
#endif
// With a norm after the dot product (FusedPostNormX), 1: the kernel copies the norm weight into
// that stage, 0: it reads it through the L1 and has no stage. Per variant: the default kernels
// (KILN_FUSED_POST_NW_SHARED) and the dense `_o3` / `_o3u` ones (..._DENSE). On the H200 (session
// 12, same-call A/B, batch 1) the L1 everywhere against the copy everywhere: Llama-3.2-1B +2.8%
// (its normed GEMVs take the default variant), Qwen2.5-0.5B +0.6%, Llama-3.1-8B -2.2% (its gate/up
// GEMV takes the dense one).
#ifndef KILN_FUSED_POST_NW_SHARED
#define KILN_FUSED_POST_NW_SHARED 0
#endif
#ifndef KILN_FUSED_POST_NW_SHARED_DENSE
#define KILN_FUSED_POST_NW_SHARED_DENSE 1
#endif
// Shared floats: the tiled path's three 32 x 65 tiles; the GEMV's partial tiles (2 x 16 x 4 x 32)
// fit in the same space.
#define KILN_FUSED_SMEM (3 * KILN_FUSED_TILE_K * (KILN_FUSED_TILE + 1))
static_assert(2 * KILN_FUSED_GEMV_MAX_WARPS * 4 * 32 <= KILN_FUSED_SMEM, "GEMV partials fit the tile space");

// inv_s[i] = 1 / sqrt(mean(x[row0 + i]^2) + eps) for i < n: a warp per row. Ends with a barrier.
template <typename T>
__device__ void fused_row_inv(const T* x, unsigned int row0, unsigned int n, unsigned int in, float eps,
                              float* inv_s) {
  const unsigned int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (unsigned int i = warp; i < n; i += warps) {
    const T* xr = x + (size_t)(row0 + i) * in;
    float ss = 0.0f;
    for (unsigned int k = lane; k < in; k += 32) {
      const float v = to_f32(xr[k]);
      ss = __fmaf_rn(v, v, ss);
    }
    ss = warp_sum(ss);
    if (lane == 0) inv_s[i] = 1.0f / sqrtf(ss / (float)in + eps);
  }
  __syncthreads();
}

// One element of the normed row, exactly as RmsNorm stores it.
template <typename T> __device__ __forceinline__ float norm_h(float xv, float inv, float wv) {
  return round_to<T>(__fmul_rn(round_to<T>(__fmul_rn(xv, inv)), wv));
}

// Whether a norm of storage type T is applied after the dot product (see the header): every
// type but f16, whose products x * norm_w could leave its range where the normed values do not.
template <typename T> struct PostNorm {
  static constexpr bool value = true;
};
template <> struct PostNorm<__half> {
  static constexpr bool value = false;
};

// The SIMT and tiled paths' element of the normed x (h) and their sums' scale: with the norm
// before the dot product, h is what RmsNorm stores and the sum stays; after it (PostNorm<T>),
// h = T(x * norm_w) and the sum is multiplied by the row's inverse RMS.
template <typename T> __device__ __forceinline__ float norm_in(float xv, float inv, float wv) {
  if constexpr (PostNorm<T>::value) {
    return round_to<T>(__fmul_rn(xv, wv));
  } else {
    return norm_h<T>(xv, inv, wv);
  }
}
template <typename T> __device__ __forceinline__ float norm_out(float s, float inv, bool has_norm) {
  if constexpr (PostNorm<T>::value) {
    return has_norm ? __fmul_rn(s, inv) : s;
  } else {
    return s;
  }
}

__device__ __forceinline__ unsigned int pack_pair(float a, float b, __half) {
  __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<const unsigned int*>(&h);
}
__device__ __forceinline__ unsigned int pack_pair(float a, float b, __nv_bfloat16) {
  __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<const unsigned int*>(&h);
}

// 8 storage elements of x and of the norm weight -> the 8 normed elements, packed.
template <typename H> __device__ __forceinline__ uint4 norm16(const uint4& xv, const uint4& wv, float inv) {
  float xf[8], wf[8];
  unpack16<H>(xv, xf);
  unpack16<H>(wv, wf);
#pragma unroll
  for (int i = 0; i < 8; ++i) xf[i] = norm_h<H>(xf[i], inv, wf[i]);
  return make_uint4(pack_pair(xf[0], xf[1], H()), pack_pair(xf[2], xf[3], H()), pack_pair(xf[4], xf[5], H()),
                    pack_pair(xf[6], xf[7], H()));
}

// inv_s[r] = 1 / sqrt(mean(x[r]^2) + eps) for r < rows <= 8, with 16-byte loads (in % 8 == 0, x
// aligned): the block's threads stride over the rows' 16-byte vectors, then warp sums and a sum
// over the warps in warp order (an order fixed by the shapes). `scratch` holds 16 x 8 floats.
// Every thread of the block calls it; it ends with a barrier.
template <typename T>
__device__ void fused_row_inv16(const T* x, unsigned int rows, unsigned int in, float eps, float* inv_s,
                                float* scratch) {
  const unsigned int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  float ss[KILN_FUSED_GEMV_MAX_ROWS];
#pragma unroll
  for (int r = 0; r < KILN_FUSED_GEMV_MAX_ROWS; ++r) ss[r] = 0.0f;
  for (unsigned int v = threadIdx.x; v < in / 8; v += blockDim.x) {
#pragma unroll
    for (int r = 0; r < KILN_FUSED_GEMV_MAX_ROWS; ++r) {
      if ((unsigned int)r < rows) {
        float f[8];
        unpack16<T>(load16_act(x + (size_t)r * in + 8 * v), f);
#pragma unroll
        for (int i = 0; i < 8; ++i) ss[r] = __fmaf_rn(f[i], f[i], ss[r]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < KILN_FUSED_GEMV_MAX_ROWS; ++r) {
    const float s = warp_sum(ss[r]);
    if (lane == 0) scratch[warp * KILN_FUSED_GEMV_MAX_ROWS + r] = s;
  }
  __syncthreads();
  if (threadIdx.x < rows) {
    float s = 0.0f;
    for (unsigned int w2 = 0; w2 < warps; ++w2) s += scratch[w2 * KILN_FUSED_GEMV_MAX_ROWS + threadIdx.x];
    inv_s[threadIdx.x] = 1.0f / sqrtf(s / (float)in + eps);
  }
  __syncthreads();
}

// The x operand of the fused GEMVs (see gemv_mma_loop): x row rx at element `first + off`, normed
// when the kernel has a norm. prepare() runs after kiln::wait_prior_grids(): it computes the rows'
// inverse RMS. NORM and STAGED are template parameters so that the main loop has no branch on them
// (ptxas then keeps the ring's loads where they are issued).
// - STAGED (the rows' normed x fits KILN_FUSED_NORM_STAGE bytes): prepare() also writes every
//   normed element of x to shared memory once per block (`hs`, rows x in of T), and the main loop
//   reads it from there as the plain GEMV reads x: no norm arithmetic between a chunk's load and
//   its MMAs. Same values: each element is norm16 of the same inputs.
//   Where each thread has at most 2 of the rows' 16-byte vectors (rows x ceil(in / 8 / threads):
//   batch 1 up to in = 16 x threads, every shape kiln benches; KILN_FUSED_NORM_ONE_PASS=0 turns
//   it off), one pass:
//   prefetch() loads the thread's norm-weight vectors before the wait (a weight: no kernel writes
//   it), prepare() loads its x vectors once, keeps them in registers for the sums of squares and
//   norms them from there into `hs`: one read of x after the wait and two barriers, where the
//   two-pass path (fused_row_inv16, then the staging loop) reads x twice, the norm weight after the
//   wait, and has three. The sums are fused_row_inv16's, in its order (a thread's vectors in
//   ascending order, 8 FMAs each, warp sums, then the warps' in warp order): the same bits.
// - otherwise the norm weight is read (from L1) and x normed as each chunk is consumed.
#ifndef KILN_FUSED_NORM_ONE_PASS
#define KILN_FUSED_NORM_ONE_PASS 1
#endif
template <typename T, bool NORM, bool STAGED = false> struct FusedNormX {
  const T* x;
  const T* px;  // x + rx * in + first
  const T* pn;  // norm_w + first
  const T* nw;  // norm_w
  unsigned int rows, in, rx;
  float eps;
  float* inv_s;
  float* scratch;
  float inv;
  T* hs;        // STAGED: the block's normed rows, [rows][in]
  const T* phs; // STAGED: hs + rx * in + first
  uint4 wv0, wv1;  // one pass: the norm weight's vectors at x vectors v0 and v1 (prepare_one_pass)
  // Vectors per row each thread takes (ceil(in / 8 / threads)); one pass when rows x that <= P.
  __device__ __forceinline__ unsigned int per_thread() const { return (in / 8 + blockDim.x - 1) / blockDim.x; }
  __device__ __forceinline__ bool one_pass() const {
    return KILN_FUSED_NORM_ONE_PASS != 0 && rows * per_thread() <= 2;
  }
  __device__ __forceinline__ void prefetch() {
    if constexpr (NORM && STAGED) {
      if (one_pass()) {
        // Two rows: both x vectors of the thread are at v0 (see prepare_one_pass).
        const unsigned int v0 = threadIdx.x, v1 = rows == 2 ? threadIdx.x : threadIdx.x + blockDim.x;
        if (v0 < in / 8) wv0 = __ldg(reinterpret_cast<const uint4*>(nw + 8 * (size_t)v0));
        if (v1 < in / 8) wv1 = __ldg(reinterpret_cast<const uint4*>(nw + 8 * (size_t)v1));
      }
    }
  }
  __device__ __forceinline__ void prepare() {
    inv = 1.0f;
    if constexpr (NORM) {
      if constexpr (STAGED) {
        if (one_pass()) {
          prepare_one_pass();
          return;
        }
      }
      fused_row_inv16<T>(x, rows, in, eps, inv_s, scratch);
      inv = inv_s[rx];
      if constexpr (STAGED) {
        const unsigned int per_row = in / 8;
        for (unsigned int v = threadIdx.x; v < rows * per_row; v += blockDim.x) {
          const unsigned int r = v / per_row;
          const size_t e = (size_t)(v - r * per_row) * 8;
          const uint4 xv = load16_act(x + (size_t)r * in + e);
          const uint4 wv2 = __ldg(reinterpret_cast<const uint4*>(nw + e));
          *reinterpret_cast<uint4*>(hs + (size_t)r * in + e) = norm16<T>(xv, wv2, inv_s[r]);
        }
        __syncthreads();
      }
    }
  }
  // rows x per_thread() <= 2: either one row and vectors v0 = threadIdx.x, v1 = v0 + blockDim.x
  // (both of row 0), or two rows and v0 = v1 = threadIdx.x (x vector j of row j). No register
  // array is indexed by a runtime value (that would put it in local memory).
  __device__ __forceinline__ void prepare_one_pass() {
    const unsigned int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const unsigned int per_row = in / 8;
    const bool two_rows = rows == 2;
    const unsigned int v0 = threadIdx.x, v1 = two_rows ? threadIdx.x : threadIdx.x + blockDim.x;
    const bool h0 = v0 < per_row, h1 = v1 < per_row && (two_rows || per_thread() == 2);
    const T* x1 = x + (two_rows ? (size_t)in : 0);
    uint4 xv0 = make_uint4(0u, 0u, 0u, 0u), xv1 = xv0;
    if (h0) xv0 = load16_act(x + 8 * (size_t)v0);
    if (h1) xv1 = load16_act(x1 + 8 * (size_t)v1);
    // Each row's sum: its vectors in ascending order, 8 FMAs each (fused_row_inv16's order).
    float ss0 = 0.0f, ss1 = 0.0f;
    if (h0) {
      float f[8];
      unpack16<T>(xv0, f);
#pragma unroll
      for (int k = 0; k < 8; ++k) ss0 = __fmaf_rn(f[k], f[k], ss0);
    }
    if (h1) {
      float f[8];
      unpack16<T>(xv1, f);
      float a = two_rows ? 0.0f : ss0;
#pragma unroll
      for (int k = 0; k < 8; ++k) a = __fmaf_rn(f[k], f[k], a);
      if (two_rows) ss1 = a; else ss0 = a;
    }
    ss0 = warp_sum(ss0);
    ss1 = warp_sum(ss1);
    if (lane == 0) {
      scratch[warp * KILN_FUSED_GEMV_MAX_ROWS] = ss0;
      if (two_rows) scratch[warp * KILN_FUSED_GEMV_MAX_ROWS + 1] = ss1;
    }
    __syncthreads();
    float t0 = 0.0f, t1 = 0.0f;
    for (unsigned int w2 = 0; w2 < warps; ++w2) t0 += scratch[w2 * KILN_FUSED_GEMV_MAX_ROWS];
    const float inv0 = 1.0f / sqrtf(t0 / (float)in + eps);
    float inv1 = inv0;
    if (two_rows) {
      for (unsigned int w2 = 0; w2 < warps; ++w2) t1 += scratch[w2 * KILN_FUSED_GEMV_MAX_ROWS + 1];
      inv1 = 1.0f / sqrtf(t1 / (float)in + eps);
    }
    if (threadIdx.x < rows) inv_s[threadIdx.x] = threadIdx.x == 0 ? inv0 : inv1;
    inv = rx == 1 ? inv1 : inv0;
    if (h0) *reinterpret_cast<uint4*>(hs + 8 * (size_t)v0) = norm16<T>(xv0, wv0, inv0);
    if (h1) {
      T* h1p = hs + (two_rows ? (size_t)in : 0) + 8 * (size_t)v1;
      *reinterpret_cast<uint4*>(h1p) = norm16<T>(xv1, wv1, two_rows ? inv1 : inv0);
    }
    __syncthreads();
  }
  __device__ __forceinline__ uint4 load(unsigned int off) const {
    if constexpr (NORM && STAGED) {
      return *reinterpret_cast<const uint4*>(phs + off);
    } else {
      return load16_act(px + off);
    }
  }
  __device__ __forceinline__ uint4 finish(const uint4& v, unsigned int off) const {
    if constexpr (NORM && !STAGED) {
      return norm16<T>(v, __ldg(reinterpret_cast<const uint4*>(pn + off)), inv);
    } else {
      return v;
    }
  }
};

// The x operand of a tensor-core GEMV whose norm comes after the dot product (PostNorm<T>): the
// MMA's B side is h = T(x * norm_w), element by element as each chunk is consumed, and the lane
// sums the squares of the x it loads (`ss`, in its load order, 8 FMAs per vector). Nothing waits
// for the row statistics: they join the partial tiles' sum (post_norm_put / post_norm_scale).
// Each chunk's norm weight is read through the L1, or, NW_SHARED (fused_post_nw_shared: the
// dense variants by default, where norm_w fits KILN_FUSED_NORM_STAGE bytes), from a copy that
// prefetch() makes in shared memory with cp.async before kiln::wait_prior_grids() (a weight: no
// kernel writes it) and prepare() waits for behind the block's one barrier. Same values.
template <typename T, bool NW_SHARED> struct FusedPostNormX {
  const T* px;  // x + rx * in + first
  const T* pn;  // norm_w + first
  const T* nw;  // norm_w
  T* ns;        // NW_SHARED: the block's copy of norm_w
  unsigned int in, first;
  float ss;
  const T* nsf;  // NW_SHARED: ns + first
  __device__ __forceinline__ void prefetch() {
    if constexpr (NW_SHARED) {
      for (unsigned int v = threadIdx.x; v < in / 8; v += blockDim.x) {
        const unsigned int dst = static_cast<unsigned int>(__cvta_generic_to_shared(ns + 8 * (size_t)v));
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(nw + 8 * (size_t)v) : "memory");
      }
      asm volatile("cp.async.commit_group;\n" ::: "memory");
    }
  }
  __device__ __forceinline__ void prepare() {
    if constexpr (NW_SHARED) {
      nsf = ns + first;
      asm volatile("cp.async.wait_all;\n" ::: "memory");
      __syncthreads();
    }
  }
  __device__ __forceinline__ uint4 load(unsigned int off) const { return load16_act(px + off); }
  __device__ __forceinline__ uint4 finish(const uint4& v, unsigned int off) {
    static_assert(sizeof(T) == 2 && PostNorm<T>::value, "the tensor-core post-norm operand is bf16");
    uint4 wv;
    if constexpr (NW_SHARED) {
      wv = *reinterpret_cast<const uint4*>(nsf + off);
    } else {
      wv = __ldg(reinterpret_cast<const uint4*>(pn + off));
    }
    // Squares in element order (the low half of each word first), then the products: one
    // rounding each, as T(f32 x * f32 norm_w) (the f32 product of two bf16 values is exact).
    const unsigned int xs[4] = {v.x, v.y, v.z, v.w}, ws[4] = {wv.x, wv.y, wv.z, wv.w};
    unsigned int hs[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float lo = __uint_as_float(xs[i] << 16), hi = __uint_as_float(xs[i] & 0xffff0000u);
      ss = __fmaf_rn(lo, lo, ss);
      ss = __fmaf_rn(hi, hi, ss);
      const __nv_bfloat162 p = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&xs[i]),
                                       *reinterpret_cast<const __nv_bfloat162*>(&ws[i]));
      hs[i] = *reinterpret_cast<const unsigned int*>(&p);
    }
    return make_uint4(hs[0], hs[1], hs[2], hs[3]);
  }
};

// Post-norm, before gemv_mma_sum (whose barrier publishes them): the warp's sum of squares of x
// row g (lanes t = 0..3 of group g hold its four k-strands), into `smem` after the Q x WARPS
// partial tiles, by lane (g, 0) for g < rows. Lanes of groups past `rows` summed row 0 again:
// not stored.
template <int Q, int WARPS> __device__ __forceinline__ void post_norm_put(float ss, unsigned int rows, float* smem) {
  ss += __shfl_xor_sync(0xffffffffu, ss, 1);
  ss += __shfl_xor_sync(0xffffffffu, ss, 2);
  const unsigned int lane = threadIdx.x & 31, g = lane >> 2;
  if ((lane & 3) == 0 && g < rows) smem[Q * WARPS * 128 + (threadIdx.x >> 5) * 8 + g] = ss;
}

// Post-norm, after gemv_mma_sum: s[q] (threads < 128: row 2 (l % 4) + i % 2, as gemv_mma_sum
// returns it) times the row's inverse RMS, from the warps' sums in warp order.
template <int Q, int WARPS>
__device__ __forceinline__ void post_norm_scale(unsigned int rows, unsigned int in, float eps, const float* smem,
                                                float (&s)[Q]) {
  if (threadIdx.x < 128) {
    const unsigned int i = threadIdx.x >> 5, l = threadIdx.x & 31, r = 2 * (l & 3) + (i & 1);
    if (r < rows) {
      float t = 0.0f;
#pragma unroll
      for (int w2 = 0; w2 < WARPS; ++w2) t += smem[Q * WARPS * 128 + w2 * 8 + r];
      const float inv = 1.0f / sqrtf(t / (float)in + eps);
#pragma unroll
      for (int q = 0; q < Q; ++q) s[q] = __fmul_rn(s[q], inv);
    }
  }
}
static_assert(2 * KILN_FUSED_GEMV_MAX_WARPS * 4 * 32 + KILN_FUSED_GEMV_MAX_WARPS * 8 <= KILN_FUSED_SMEM,
              "post-norm sums fit after the GEMV partials");

// Bytes of a fused kernel's stage (shared memory): the normed rows before the dot product, the
// norm weight after it where KILN_FUSED_POST_NW_SHARED, else none (16: an array needs a size).
// WIDE: the default variant (else `_o3` / `_o3u`).
template <bool WIDE> __host__ __device__ constexpr bool fused_post_nw_shared() {
  return WIDE ? KILN_FUSED_POST_NW_SHARED != 0 : KILN_FUSED_POST_NW_SHARED_DENSE != 0;
}
template <typename T, bool WIDE> __host__ __device__ constexpr unsigned int fused_stage_bytes() {
  return (PostNorm<T>::value && !fused_post_nw_shared<WIDE>()) || KILN_FUSED_NORM_STAGE == 0 ? 16u
                                                                                             : KILN_FUSED_NORM_STAGE;
}
// Whether the stage holds this launch's normed rows (before) or norm weight (after the dot).
template <typename T, bool WIDE> __device__ __forceinline__ bool fused_staged(unsigned int rows, unsigned int in) {
  if constexpr (PostNorm<T>::value) {
    return fused_post_nw_shared<WIDE>() && (size_t)in * sizeof(T) <= KILN_FUSED_NORM_STAGE;
  } else {
    return (size_t)rows * in * sizeof(T) <= KILN_FUSED_NORM_STAGE;
  }
}

// The epilogue of one output of a GEMV without the gate: the f32 sum s, plus the bias, rounded to O
// and plus the residual's value `res` when has_res.
template <typename T, typename O>
__device__ __forceinline__ O fused_finish_plain(float s, const T* bias, unsigned int n, bool has_bias, bool has_res,
                                                float res) {
  float v = has_bias ? s + to_f32(bias[n]) : s;
  if (has_res) v = round_to<O>(v) + res;
  return from_f32<O>(v);
}

// Thread threadIdx.x's epilogue slot of the tensor-core GEMV's 16 features from n0 (threads < 128
// hold the sums gemv_mma_sum returns): output n of row r.
__device__ __forceinline__ void fused_gemv_slot(unsigned int n0, unsigned int& n, unsigned int& r) {
  const unsigned int i = threadIdx.x >> 5, l = threadIdx.x & 31;
  n = n0 + (l >> 2) + 8 * (i >> 1);
  r = 2 * (l & 3) + (i & 1);
}

// The epilogue of one output: s (and su, gated) are the f32 sums.
template <typename T, typename O, bool GATED>
__device__ __forceinline__ O fused_finish(float s, float su, const T* bias, const O* residual,
                                          size_t idx, unsigned int n, bool has_bias, bool has_res) {
  if constexpr (GATED) {
    const float g = round_to<O>(s), u = round_to<O>(su);
    return from_f32<O>(__fmul_rn(g / (1.0f + expf(-g)), u));
  } else {
    return fused_finish_plain<T, O>(s, bias, n, has_bias, has_res, has_res ? to_f32(residual[idx]) : 0.0f);
  }
}

// The tensor-core GEMV's sums (f16 / bf16, in % 8 == 0, aligned), WARPS = blockDim.x / 32: the
// main loop of linear.cu (gemv_mma_loop, which also waits for the prior grids after its first
// weight loads) over this lane's weight rows ra (tile rows 0-7) and rb (8-15) of the Q matrices
// wq, against x normed when NORM, then the warp-order sum: s[q] in threads < 128 as
// gemv_mma_sum returns it. Q = 2 is the gated pair (gate, up).
template <typename T, int Q, int WARPS, bool NORM, bool STAGED>
__device__ __forceinline__ void fused_gemv_sums(const T* x, const T* nw, const T* const (&wq)[Q], unsigned int ra,
                                                unsigned int rb, unsigned int rows, unsigned int in, float eps,
                                                float* inv_s, float* smem, T* hs, float (&s)[Q]) {
  constexpr int U = KILN_LINEAR_GEMV_UNROLL;
  constexpr int D = Q == 2 ? KILN_GATED_DEPTH : KILN_FUSED_DEPTH;
  const unsigned int g = (threadIdx.x & 31) >> 2;
  const unsigned int rx = g < rows ? g : 0;
  const unsigned int first = gemv_mma_first<WARPS, U>();
  // The norm's scratch and the partial tiles share `smem`: the scratch is last read before the
  // barrier that ends fused_row_inv16, the partials first written after the main loop.
  float c[Q][4];
#pragma unroll
  for (int q = 0; q < Q; ++q)
#pragma unroll
    for (int i = 0; i < 4; ++i) c[q][i] = 0.0f;
  if constexpr (NORM && PostNorm<T>::value) {
    // STAGED here: the norm weight is copied into the stage (fused_staged).
    FusedPostNormX<T, STAGED> xop{x + (size_t)rx * in + first, nw + first, nw, hs, in, first, 0.0f, nullptr};
    gemv_mma_loop<T, Q, WARPS, D, (D % U == 0 ? U : 1), KILN_LINEAR_GEMV_XPRE != 0>(wq, ra, rb, in, xop, c);
    post_norm_put<Q, WARPS>(xop.ss, rows, smem);
    gemv_mma_sum<Q, WARPS>(c, smem, s);
    post_norm_scale<Q, WARPS>(rows, in, eps, smem, s);
  } else {
    FusedNormX<T, NORM, STAGED> xop{x, x + (size_t)rx * in + first, nw + first, nw, rows, in, rx, eps, inv_s, smem,
                                    1.0f, hs, hs + (size_t)rx * in + first, {}, {}};
    gemv_mma_loop<T, Q, WARPS, D, (D % U == 0 ? U : 1), KILN_LINEAR_GEMV_XPRE != 0>(wq, ra, rb, in, xop, c);
    gemv_mma_sum<Q, WARPS>(c, smem, s);
  }
}

// Expands CALL(WARPS, NORM, STAGED) with the tensor-core fused GEMV variant of this block size
// (16 warps for 512-thread blocks, else 8), norm and staging (the norm's staging only where it has
// one): the one dispatch of fused_linear, qkv_linear and qkv_rope. WIDE = false (the `_o3`
// variants, whose launch bounds allow 256 threads only) leaves the 16-warp paths out: dead code
// there that still raised the register demand of every path.
#define KILN_FUSED_GEMV_DISPATCH(WIDE, has_norm, staged, CALL)   \
  if ((WIDE) && blockDim.x == 32 * KILN_FUSED_GEMV_MAX_WARPS) {  \
    if ((has_norm) && (staged)) {                                \
      CALL(KILN_FUSED_GEMV_MAX_WARPS, true, true);               \
    } else if (has_norm) {                                       \
      CALL(KILN_FUSED_GEMV_MAX_WARPS, true, false);              \
    } else {                                                     \
      CALL(KILN_FUSED_GEMV_MAX_WARPS, false, false);             \
    }                                                            \
  } else if ((has_norm) && (staged)) {                           \
    CALL(8, true, true);                                         \
  } else if (has_norm) {                                         \
    CALL(8, true, false);                                        \
  } else {                                                       \
    CALL(8, false, false);                                       \
  }

// Op::FusedLinear's out_norm (ir::OutNorm; kiln_fused_linear_outnorm_*): the next norm's weight w
// and the row statistics `sumsq`, f32 [rows][outf / 8]: the squares of each 8 outputs o as the
// linear would store them, while `out` gets O(o * w). Tensor-core GEMV paths only (the plan
// checker's rule 14; outf % 8 == 0).
template <typename O> struct OutNormArgs {
  const O* w;
  float* sumsq;
};

// The out-norm epilogue of the tensor-core GEMV's slot (n, r) (fused_gemv_slot): o its output as
// the linear would store it and wn the norm weight at n, where `mine` (r < rows, n < outf); returns
// what `out` stores, O(o * wn). Every lane of warps 0-3 calls it (the groups' sums are shuffles).
// Lanes l, l ^ 4, .., l ^ 28 (the same l % 4) of warp i hold row r's features n0 + 8 (i / 2) + l / 4:
// xor 4 adds features j and j ^ 1, xor 8 those pairs, xor 16 the halves: ir::group_sumsq's tree,
// ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)), in every lane.
template <typename O>
__device__ __forceinline__ O out_norm_slot(const OutNormArgs<O>& on, O o, float wn, bool mine, unsigned int n,
                                           unsigned int r, unsigned int outf) {
  const float v = mine ? to_f32(o) : 0.0f;
  float sq = __fmul_rn(v, v);
  sq = __fadd_rn(sq, __shfl_xor_sync(0xffffffffu, sq, 4));
  sq = __fadd_rn(sq, __shfl_xor_sync(0xffffffffu, sq, 8));
  sq = __fadd_rn(sq, __shfl_xor_sync(0xffffffffu, sq, 16));
  if (mine && ((threadIdx.x & 31) >> 2) == 0) on.sumsq[(size_t)r * (outf / 8) + n / 8] = sq;
  return from_f32<O>(__fmul_rn(v, wn));
}

// The tensor-core GEMV's epilogue for the 16 features from n0: threads < 128 hold s[q] as
// gemv_mma_sum returns them. ON: also the out-norm's operands (out_norm_slot).
template <typename T, typename O, bool GATED, int Q, bool ON = false>
__device__ __forceinline__ void fused_gemv_store(unsigned int n0, const float (&s)[Q], const T* bias, const O* residual,
                                                 O* __restrict__ out, unsigned int rows, unsigned int outf,
                                                 bool has_bias, bool has_res,
                                                 const OutNormArgs<O>& on = OutNormArgs<O>{nullptr, nullptr}) {
  if (threadIdx.x < 128) {
    unsigned int n, r;
    fused_gemv_slot(n0, n, r);
    const bool mine = r < rows && n < outf;
    const size_t idx = (size_t)r * outf + n;
    O o = from_f32<O>(0.0f);
    if (mine) o = fused_finish<T, O, GATED>(s[0], s[Q - 1], bias, residual, idx, n, has_bias, has_res);
    if constexpr (ON) o = out_norm_slot<O>(on, o, mine ? to_f32(__ldg(on.w + n)) : 0.0f, mine, n, r, outf);
    if (mine) out[idx] = o;
  }
}

// Tensor-core GEMV (f16 / bf16, in % 8 == 0, aligned): fused_gemv_sums over 16 consecutive
// features per block, then the epilogue (fused_gemv_mma_tile); or, where KILN_GEMV_WALK has the
// kernel's bit (linear.cu gemv_mma_walk), each block walks the tiles blockIdx.x, + gridDim.x, ...
// with one ring (fused_gemv_mma_walk), each tile's sums and epilogue in the same order.
#if KILN_GEMV_WALK
template <typename T, typename O, bool GATED, int WARPS, bool NORM, bool STAGED, bool ON>
__device__ void fused_gemv_mma_walk(const T* x, const T* nw, const T* w,
                               const T* wu, const T* bias, const O* residual,
                               O* __restrict__ out, unsigned int rows, unsigned int in, unsigned int outf, float eps, bool has_bias, bool has_res, float* inv_s, float* smem, T* hs, const OutNormArgs<O>& on) {
  constexpr int Q = GATED ? 2 : 1;
  constexpr int U = KILN_LINEAR_GEMV_UNROLL;
  constexpr int D = Q == 2 ? KILN_GATED_DEPTH : KILN_FUSED_DEPTH;
  constexpr int UU = D % U == 0 ? U : 1;
  const unsigned int g = (threadIdx.x & 31) >> 2;
  const unsigned int rx = g < rows ? g : 0;
  const unsigned int first = gemv_mma_first<WARPS, UU>();
  const unsigned int tiles = (outf + KILN_FUSED_GEMV_FEATURES - 1) / KILN_FUSED_GEMV_FEATURES;
  const T* wq[Q];
  wq[0] = w;
  if constexpr (GATED) wq[Q - 1] = wu;
  auto rows_of = [&](unsigned int t, unsigned int& a, unsigned int& b) {
    gemv_tile_rows(t * KILN_FUSED_GEMV_FEATURES, g, outf, a, b);
  };
  auto epilogue = [&](unsigned int t, const float (&s)[Q]) {
    fused_gemv_store<T, O, GATED, Q, ON>(t * KILN_FUSED_GEMV_FEATURES, s, bias, residual, out, rows, outf, has_bias,
                                         has_res, on);
  };
  if constexpr (NORM && PostNorm<T>::value) {
    FusedPostNormX<T, STAGED> xop{x + (size_t)rx * in + first, nw + first, nw, hs, in, first, 0.0f, nullptr};
    auto done = [&](unsigned int t, const float (&c)[Q][4]) {
      if (t != blockIdx.x) __syncthreads();  // the previous tile's partials have been read
      post_norm_put<Q, WARPS>(xop.ss, rows, smem);
      xop.ss = 0.0f;
      float s[Q];
      gemv_mma_sum<Q, WARPS>(c, smem, s);
      post_norm_scale<Q, WARPS>(rows, in, eps, smem, s);
      epilogue(t, s);
    };
    gemv_mma_walk<T, Q, WARPS, D, UU, KILN_LINEAR_GEMV_XPRE != 0>(wq, in, tiles, xop, rows_of, done);
  } else {
    FusedNormX<T, NORM, STAGED> xop{x, x + (size_t)rx * in + first, nw + first, nw, rows, in, rx, eps, inv_s, smem,
                                    1.0f, hs, hs + (size_t)rx * in + first, {}, {}};
    auto done = [&](unsigned int t, const float (&c)[Q][4]) {
      if (t != blockIdx.x) __syncthreads();  // the previous tile's partials have been read
      float s[Q];
      gemv_mma_sum<Q, WARPS>(c, smem, s);
      epilogue(t, s);
    };
    gemv_mma_walk<T, Q, WARPS, D, UU, KILN_LINEAR_GEMV_XPRE != 0>(wq, in, tiles, xop, rows_of, done);
  }
}
#endif
// KILN_FUSED_EARLY_RESIDUAL (default 1; `KILN_NVRTC_DEFINES=KILN_FUSED_EARLY_RESIDUAL=0` for an A/B):
// a GEMV without a norm whose epilogue adds a residual (the o and down projections) loads each
// epilogue thread's residual element right after its wait for the prior grids (EarlyResidualX),
// instead of after the block's sum, so that one L2 round trip leaves the end of every such launch,
// i.e. the critical path (two launches per decoder layer). The same values, added in the same
// order: the same bits (greedy ids identical on the three bench shapes). Measured on the H200
// (session 34 call A, bench/results/2026-12-03-h200-decode-ab-s34.md, two rounds, batch 1, context
// 128): 0.5B 1771.9 -> 1790.5 tok/s (+1.0%), 1B 1250.0 -> 1249.0 (unchanged), 8B 257.2 -> 258.4 (+0.5%).
#ifndef KILN_FUSED_EARLY_RESIDUAL
#define KILN_FUSED_EARLY_RESIDUAL 1
#endif

// A planned L2 prefetch (Kernel::FusedLinear's `l2_prefetch`, src/plan/planner.rs
// `plan_l2_prefetch`): block b asks the L2 for bytes [b * bytes, (b + 1) * bytes) from `p`, the
// first weights of the launch after this one, before its wait, in 16 KiB pieces
// (`cp.async.bulk.prefetch.L2`, one per thread: a hint, no value depends on it). The planner
// plans it for the o projection, whose blocks are resident and idle during the attention it waits
// for, a window in which the attention leaves the DRAM idle; it keeps the span inside the weight.
// Measured on the H200 (bench/results/2026-12-04-h200-decode-ab-s38.md, -s39.md).
struct L2Span {
  const char* p;
  unsigned int bytes;
  __device__ __forceinline__ void issue() const {
    constexpr unsigned int piece = 16384u;
    if (p == nullptr || bytes == 0) return;
    const unsigned int at = threadIdx.x * piece;
    if (at < bytes)
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + (size_t)blockIdx.x * bytes + at),
                   "r"(min(piece, bytes - at))
                   : "memory");
  }
};

// An x operand X that also loads, in prepare() (right after kiln::wait_prior_grids() in
// gemv_mma_ring_start), this thread's epilogue residual element `res` (null: none) into `v`, and
// issues the launch's planned L2 prefetch `pf` in prefetch() (before the wait, after the ring's
// first weight loads).
template <typename X, typename O> struct EarlyResidualX {
  X x;
  const O* res;
  float v;
  L2Span pf;
  __device__ __forceinline__ void prefetch() {
    x.prefetch();
    pf.issue();
  }
  __device__ __forceinline__ void prepare() {
    x.prepare();
    if (res != nullptr) v = to_f32(*res);
  }
  __device__ __forceinline__ uint4 load(unsigned int off) const { return x.load(off); }
  __device__ __forceinline__ uint4 finish(const uint4& raw, unsigned int off) const { return x.finish(raw, off); }
};

template <typename T, typename O, bool GATED, int WARPS, bool NORM, bool STAGED, bool ON>
__device__ void fused_gemv_mma_tile(const T* x, const T* nw, const T* w,
                               const T* wu, const T* bias, const O* residual,
                               O* __restrict__ out, unsigned int rows, unsigned int in, unsigned int outf, float eps, bool has_bias, bool has_res, float* inv_s, float* smem, T* hs, L2Span pf, const OutNormArgs<O>& on) {
  constexpr int Q = GATED ? 2 : 1;
  const unsigned int g = (threadIdx.x & 31) >> 2;
  const unsigned int n0 = blockIdx.x * KILN_FUSED_GEMV_FEATURES;
  // Rows past the ends read row 0: their outputs are never stored.
  unsigned int ra, rb;
  gemv_tile_rows(n0, g, outf, ra, rb);
  const T* wq[Q];
  wq[0] = w;
  if constexpr (GATED) wq[Q - 1] = wu;
  if constexpr (KILN_FUSED_EARLY_RESIDUAL && !GATED && !NORM) {
    if (has_res) {
      // This thread's epilogue slot (fused_gemv_store's): output n of row r.
      unsigned int n, r;
      fused_gemv_slot(n0, n, r);
      const bool mine = threadIdx.x < 128 && r < rows && n < outf;
      const size_t idx = (size_t)r * outf + n;
      constexpr int U = KILN_LINEAR_GEMV_UNROLL;
      constexpr int D = KILN_FUSED_DEPTH;
      constexpr int UU = D % U == 0 ? U : 1;
      const unsigned int rx = g < rows ? g : 0;
      // x as fused_gemv_sums reads it without a norm (FusedNormX<T, false>: the same loads).
      EarlyResidualX<GemvPlainX<T>, O> xop{GemvPlainX<T>{x + (size_t)rx * in + gemv_mma_first<WARPS, U>()},
                                           mine ? residual + idx : nullptr, 0.0f, pf};
      // ON: this slot's norm weight, a weight: loaded before the wait, with the first weight loads
      // (volatile, so that the compiler does not sink it into the epilogue: a DRAM round trip there).
      unsigned short wn_bits = 0;
      if constexpr (ON) {
        if (mine) asm volatile("ld.global.nc.u16 %0, [%1];" : "=h"(wn_bits) : "l"(on.w + n));
      }
      float c[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
      gemv_mma_loop<T, 1, WARPS, D, UU, KILN_LINEAR_GEMV_XPRE != 0>(wq, ra, rb, in, xop, c);
      KILN_TRACE_PHASE_AFTER(0, __float_as_uint(c[0][0]));  // trace builds: thread 0's products done
      const float wn = __uint_as_float((unsigned int)wn_bits << 16);  // bf16 (the out-norm's dtype)
      float s1[1];
      gemv_mma_sum<1, WARPS>(c, smem, s1);
      KILN_TRACE_PHASE(1);                                   // the warps' sums
      KILN_TRACE_PHASE_AFTER(2, __float_as_uint(xop.v));     // thread 0's residual (loaded after the wait)
      O o = from_f32<O>(0.0f);
      if (mine) o = fused_finish_plain<T, O>(s1[0], bias, n, has_bias, true, xop.v);
      if constexpr (ON) {
        if (threadIdx.x < 128) o = out_norm_slot<O>(on, o, wn, mine, n, r, outf);
      }
      if (mine) out[idx] = o;
      return;
    }
  }
  float s[Q];
  fused_gemv_sums<T, Q, WARPS, NORM, STAGED>(x, nw, wq, ra, rb, rows, in, eps, inv_s, smem, hs, s);
  fused_gemv_store<T, O, GATED, Q, ON>(n0, s, bias, residual, out, rows, outf, has_bias, has_res, on);
}
template <typename T, typename O, bool GATED, bool WIDE, int WARPS, bool NORM, bool STAGED, bool ON>
__device__ __forceinline__ void fused_gemv_mma(const T* x, const T* nw, const T* w, const T* wu, const T* bias,
                                               const O* residual, O* __restrict__ out, unsigned int rows,
                                               unsigned int in, unsigned int outf, float eps, bool has_bias,
                                               bool has_res, float* inv_s, float* smem, T* hs, L2Span pf,
                                               const OutNormArgs<O>& on) {
#if KILN_GEMV_WALK
  // KILN_GEMV_WALK bits (linear.cu): 1 the default gated kernel, 8 the dense one, 4 the other fused
  // ones; 256-thread blocks only (a grid of 512-thread blocks has fewer blocks than SMs).
  if constexpr (((KILN_GEMV_WALK) & (GATED ? (WIDE ? 1 : 8) : 4)) != 0 && WARPS == 8) {
    fused_gemv_mma_walk<T, O, GATED, WARPS, NORM, STAGED, ON>(x, nw, w, wu, bias, residual, out, rows, in, outf, eps,
                                                              has_bias, has_res, inv_s, smem, hs, on);
  } else
#endif
  {
    fused_gemv_mma_tile<T, O, GATED, WARPS, NORM, STAGED, ON>(x, nw, w, wu, bias, residual, out, rows, in, outf, eps,
                                                              has_bias, has_res, inv_s, smem, hs, pf, on);
  }
}

// The sums of one weight row `wr` against rows [r0, r0 + nr) of x (nr <= 8), normed by inv_s (the
// rows' inverse RMS, indexed from r0) and nw when has_norm: lanes strided over k, f32 FMAs in k
// order, then a warp sum, handed to done(r, sum) in lane 0 for each r < nr. The SIMT path of
// qkv_linear and qkv_rope.
template <typename T, typename Done>
__device__ __forceinline__ void simt_row_sums(const T* wr, const T* x, const T* nw, const float* inv_s,
                                              unsigned int r0, unsigned int nr, unsigned int in, bool has_norm,
                                              Done done) {
  constexpr int R = KILN_FUSED_GEMV_MAX_ROWS;
  const unsigned int lane = threadIdx.x & 31;
  float sum[R];
#pragma unroll
  for (int r = 0; r < R; ++r) sum[r] = 0.0f;
  for (unsigned int k = lane; k < in; k += 32) {
    const float wf = to_f32(wr[KILN_W_COL(T, k)]);
    const float nwk = has_norm ? to_f32(nw[k]) : 0.0f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if ((unsigned int)r < nr) {
        float h = to_f32(x[(size_t)(r0 + r) * in + k]);
        if (has_norm) h = norm_in<T>(h, inv_s[r], nwk);
        sum[r] = __fmaf_rn(h, wf, sum[r]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if ((unsigned int)r < nr) {
      const float s = norm_out<T>(warp_sum(sum[r]), has_norm ? inv_s[r] : 1.0f, has_norm);
      if (lane == 0) done((unsigned int)r, s);
    }
  }
}

// SIMT GEMV (any dtype, alignment, in): a warp per feature, rows <= 8.
template <typename T, typename O, bool GATED>
__device__ void fused_gemv_simt(const T* x, const T* nw, const T* w,
                                const T* wu, const T* bias, const O* residual,
                                O* __restrict__ out, unsigned int rows, unsigned int in, unsigned int outf,
                                bool has_norm, bool has_bias, bool has_res, const float* inv_s) {
  constexpr int R = KILN_FUSED_GEMV_MAX_ROWS;
  constexpr int Q = GATED ? 2 : 1;
  const unsigned int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (unsigned int f = warp; f < KILN_FUSED_GEMV_FEATURES; f += warps) {
    const unsigned int n = blockIdx.x * KILN_FUSED_GEMV_FEATURES + f;
    if (n >= outf) break;
    const T* wr[2] = {w + KILN_W_ROW(T, n, in), (GATED ? wu : w) + KILN_W_ROW(T, n, in)};
    float acc[Q][R];
#pragma unroll
    for (int q = 0; q < Q; ++q)
#pragma unroll
      for (int r = 0; r < R; ++r) acc[q][r] = 0.0f;
    for (unsigned int k = lane; k < in; k += 32) {
      float wf[Q];
#pragma unroll
      for (int q = 0; q < Q; ++q) wf[q] = to_f32(wr[q][KILN_W_COL(T, k)]);
      const float nwk = has_norm ? to_f32(nw[k]) : 0.0f;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if ((unsigned int)r < rows) {
          float h = to_f32(x[(size_t)r * in + k]);
          if (has_norm) h = norm_in<T>(h, inv_s[r], nwk);
#pragma unroll
          for (int q = 0; q < Q; ++q) acc[q][r] = __fmaf_rn(h, wf[q], acc[q][r]);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if ((unsigned int)r < rows) {
        float s[2] = {0.0f, 0.0f};
#pragma unroll
        for (int q = 0; q < Q; ++q) s[q] = norm_out<T>(warp_sum(acc[q][r]), has_norm ? inv_s[r] : 1.0f, has_norm);
        if (lane == 0) {
          const size_t idx = (size_t)r * outf + n;
          out[idx] = fused_finish<T, O, GATED>(s[0], s[1], bias, residual, idx, n, has_bias, has_res);
        }
      }
    }
  }
}

// Tiled (rows > 8): 64 x 64 outputs per block, each thread 4 x 4 (x 2 gated).
template <typename T, typename O, bool GATED>
__device__ void fused_tiled(const T* x, const T* nw, const T* w,
                            const T* wu, const T* bias, const O* residual,
                            O* __restrict__ out, unsigned int rows, unsigned int in, unsigned int outf, bool has_norm,
                            bool has_bias, bool has_res, const float* inv_s, float* smem) {
  constexpr int TM = KILN_FUSED_TILE, TK = KILN_FUSED_TILE_K, LD = KILN_FUSED_TILE + 1;
  constexpr int Q = GATED ? 2 : 1;
  float* xs = smem;                 // [TK][LD]
  float* ws = smem + TK * LD;       // [Q][TK][LD]
  const unsigned int tid = threadIdx.x;
  const unsigned int tx = tid % 16, ty = tid / 16;
  const unsigned int row0 = blockIdx.y * TM, col0 = blockIdx.x * TM;
  const T* wq[2] = {w, GATED ? wu : w};
  float acc[Q][4][4];
#pragma unroll
  for (int q = 0; q < Q; ++q)
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[q][i][j] = 0.0f;
  for (unsigned int k0 = 0; k0 < in; k0 += TK) {
    for (unsigned int e = tid; e < TM * TK; e += blockDim.x) {
      const unsigned int m = e / TK, kk = e % TK;
      const unsigned int k = k0 + kk;
      const unsigned int r = row0 + m, cidx = col0 + m;
      float xv = 0.0f;
      if (r < rows && k < in) {
        xv = to_f32(x[(size_t)r * in + k]);
        if (has_norm) xv = norm_in<T>(xv, inv_s[m], to_f32(nw[k]));
      }
      xs[kk * LD + m] = xv;
#pragma unroll
      for (int q = 0; q < Q; ++q)
        ws[(q * TK + kk) * LD + m] =
            (cidx < outf && k < in) ? to_f32(wq[q][KILN_W_ROW(T, cidx, in) + KILN_W_COL(T, k)]) : 0.0f;
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < TK; ++kk) {
      float a[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = xs[kk * LD + ty + 16 * i];
#pragma unroll
      for (int q = 0; q < Q; ++q) {
        float b[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) b[j] = ws[(q * TK + kk) * LD + tx + 16 * j];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[q][i][j] = __fmaf_rn(a[i], b[j], acc[q][i][j]);
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const unsigned int r = row0 + ty + 16 * i;
    if (r >= rows) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const unsigned int n = col0 + tx + 16 * j;
      if (n >= outf) continue;
      const size_t idx = (size_t)r * outf + n;
      const float inv = has_norm ? inv_s[ty + 16 * i] : 1.0f;
      out[idx] = fused_finish<T, O, GATED>(norm_out<T>(acc[0][i][j], inv, has_norm),
                                           norm_out<T>(acc[Q - 1][i][j], inv, has_norm), bias, residual, idx, n,
                                           has_bias, has_res);
    }
  }
}

// WIDE = false: the `_o3` variants. Their tensor-core path is the one every dense launch takes
// (8 warps, a norm whose rows are staged: src/plan/geometry.rs `dense_variant_covers`; with the
// norm after the dot product, bf16, any norm); any other input
// takes the SIMT / tiled path (correct, slower; no plan asks for it). With every tensor-core path
// inline, the dense kernels spilled, mostly amid the MMA loops (ptxas: 248 bytes of spill stores
// in fused_linear_o3, 184 in gated_linear_o3; SASS: 63 of fused_linear_o3's 89 local loads within
// 40 instructions of an HMMA); with this one path, none. UNSTAGED (fused_linear only: the
// `_o3u` variants) keeps instead the path of a norm whose rows are not staged (more rows of a
// wider x than KILN_FUSED_NORM_STAGE holds: the Llama-3.1-8B packed QKV at 4 and 8 rows), also
// without spills alone (ptxas: 80 registers, 0 bytes; both paths in one kernel spilled 112 bytes).
// ON (kiln_fused_linear_outnorm_*, not gated): the out-norm's operands too (OutNormArgs), on the
// tensor-core GEMV paths; any other path traps (the plan checker's rule 14 plans none).
template <typename T, typename O, bool GATED, bool WIDE, bool UNSTAGED = false, bool ON = false, bool GEMV_ONLY = false>
__device__ void fused_linear(const T* x, const T* nw, const T* w, const T* wu, const T* bias, const O* residual, O* out,
                             unsigned int rows, unsigned int in, unsigned int outf, unsigned int has_norm_u, float eps,
                             unsigned int has_bias_u, unsigned int has_res_u, L2Span pf = L2Span{nullptr, 0u},
                             OutNormArgs<O> on = OutNormArgs<O>{nullptr, nullptr}) {
  static_assert(!ON || !GATED, "the out-norm is a plain fused linear's");
  static_assert(!ON || (sizeof(O) == 2 && PostNorm<O>::value), "the out-norm's output is bf16");
  __shared__ __align__(16) float smem[KILN_FUSED_SMEM];
  __shared__ float inv_s[KILN_FUSED_TILE];
  KILN_ABLATED(GATED ? 1 : 2);
#if (KILN_ABLATE) & 512
  // Timing ablation of the gate/up GEMV's last partial wave (common.cuh, bit 512): blocks from
  // KILN_ABLATE_GATED_FROM on (the Llama-3.1-8B gate/up's 896 blocks on 396 dense slots: the
  // 104 of its third wave) keep their launch and do no work.
  if (GATED && blockIdx.x >= (KILN_ABLATE_GATED_FROM)) {
    ::kiln::wait_prior_grids();
    return;
  }
#endif
  const bool has_norm = has_norm_u != 0 && nw != nullptr && !((KILN_ABLATE) & 256);
  const bool has_bias = has_bias_u != 0 && bias != nullptr;
  const bool has_res = has_res_u != 0 && residual != nullptr;
  if constexpr (IsHalf16<T>::value) {
    const bool aligned = aligned16(x) && aligned16(w) && (!GATED || aligned16(wu)) && (!has_norm || aligned16(nw));
    // Waits for the prior grids inside, after its first weight loads.
    __shared__ __align__(16) unsigned char stage[fused_stage_bytes<T, WIDE>()];
    const bool staged = fused_staged<T, WIDE>(rows, in);
#define KILN_FUSED_GEMV_CALL(WARPS, NORM, STAGED)                                                               \
  fused_gemv_mma<T, O, GATED, WIDE, WARPS, NORM, STAGED, ON>(x, nw, w, wu, bias, residual, out, rows, in, outf, eps, \
                                                             has_bias, has_res, inv_s, smem, reinterpret_cast<T*>(stage), \
                                                             pf, on)
    if (rows != 0 && rows <= KILN_FUSED_GEMV_MAX_ROWS && in != 0 && in % 8 == 0 && aligned) {
      if constexpr (WIDE) {
        KILN_FUSED_GEMV_DISPATCH(true, has_norm, staged, KILN_FUSED_GEMV_CALL)
        return;
      } else if constexpr (UNSTAGED) {
        if (has_norm) {  // staged or not: the same bits (FusedNormX)
          KILN_FUSED_GEMV_CALL(8, true, false);
          return;
        }
      } else {
        if (has_norm && staged) {
          KILN_FUSED_GEMV_CALL(8, true, true);
          return;
        }
        // After the dot product with the norm weight through L1: any row count and width. (With
        // the copy, a norm weight wider than the stage takes the SIMT path, as unstaged rows do
        // before the dot; the planner asks for neither. One path keeps the kernel free of spills.)
        if constexpr (PostNorm<T>::value && !fused_post_nw_shared<false>()) {
          if (has_norm) {
            KILN_FUSED_GEMV_CALL(8, true, false);
            return;
          }
        }
      }
    }
#undef KILN_FUSED_GEMV_CALL
  }
  // No out-norm off the tensor-core paths (see above); GEMV_ONLY (kiln_gated_linear_gemv_*): a launch
  // the runtime knows takes one of them (src/runtime/cuda/abi.rs `gemv_only_entry`).
  if constexpr (ON || GEMV_ONLY) __trap();
#if KILN_GEMV_WALK
  // A walked grid (fewer blocks than tiles) is planned for the tensor-core path only.
  if (rows <= KILN_FUSED_GEMV_MAX_ROWS && gridDim.x * KILN_FUSED_GEMV_FEATURES < outf) __trap();
#endif
  allow_dependents();
  wait_prior_grids();
  if (rows == 0 || in == 0) return;
  if (rows > KILN_FUSED_GEMV_MAX_ROWS) {
    const unsigned int row0 = blockIdx.y * KILN_FUSED_TILE;
    if (row0 >= rows) return;
    if (has_norm) fused_row_inv<T>(x, row0, min(rows - row0, (unsigned int)KILN_FUSED_TILE), in, eps, inv_s);
    fused_tiled<T, O, GATED>(x, nw, w, wu, bias, residual, out, rows, in, outf, has_norm, has_bias, has_res, inv_s,
                             smem);
    return;
  }
  if (has_norm) fused_row_inv<T>(x, 0, rows, in, eps, inv_s);
  fused_gemv_simt<T, O, GATED>(x, nw, w, wu, bias, residual, out, rows, in, outf, has_norm, has_bias, has_res, inv_s);
}

// ---- QKV: three linears over one normed x (Op::QkvLinear) ---------------------------------------
// The outputs of q, k and v in order form one feature range [0, nq + nk + nv); block b takes
// features [16 b, 16 b + 16) of it, whichever matrices they fall in (each lane finds its own two
// weight rows, so the boundaries need not be multiples of 16). Per output, exactly FusedLinear's
// arithmetic without a residual.
template <typename T> struct QkvOut {
  const T* w[3];
  const T* b[3];
  T* o[3];
  unsigned int n[3];
  // Matrix (0 q, 1 k, 2 v) of feature f and f's row in it.
  __device__ __forceinline__ unsigned int seg(unsigned int f, unsigned int& local) const {
    if (f < n[0]) {
      local = f;
      return 0;
    }
    f -= n[0];
    if (f < n[1]) {
      local = f;
      return 1;
    }
    local = f - n[1];
    return 2;
  }
  // Feature f's weight row (weight_row in its matrix; weight_col of k on top is element k).
  __device__ __forceinline__ const T* row(unsigned int f, unsigned int in) const {
    unsigned int l;
    const unsigned int s = seg(f, l);
    return w[s] + KILN_W_ROW(T, l, in);
  }
  __device__ __forceinline__ void store(unsigned int f, unsigned int r, float acc, bool has_bias) const {
    unsigned int l;
    const unsigned int s = seg(f, l);
    o[s][(size_t)r * n[s] + l] = from_f32<T>(has_bias ? acc + to_f32(b[s][l]) : acc);
  }
};

// Tensor-core path (f16 / bf16, rows <= 8, in % 8 == 0, aligned): fused_gemv_mma's, with the
// weight rows from QkvOut.
template <typename T, int WARPS, bool NORM>
__device__ void qkv_gemv_mma(const T* x, const T* nw, const QkvOut<T>& qo, unsigned int rows, unsigned int in, float eps,
                             bool has_bias, float* inv_s, float* smem) {
  constexpr int U = KILN_LINEAR_GEMV_UNROLL;
  constexpr int D = KILN_FUSED_DEPTH;
  const unsigned int total = qo.n[0] + qo.n[1] + qo.n[2];
  const unsigned int g = (threadIdx.x & 31) >> 2;
  const unsigned int n0 = blockIdx.x * KILN_FUSED_GEMV_FEATURES;
  // Features past the end and rows past `rows` read feature / row 0: never stored.
  const unsigned int fa = n0 + g < total ? n0 + g : 0, fb = n0 + g + 8 < total ? n0 + g + 8 : 0;
  const unsigned int rx = g < rows ? g : 0;
  const unsigned int first = gemv_mma_first<WARPS, U>();
  float c[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
  const T* const rows_a[1] = {qo.row(fa, in)};
  const T* const rows_b[1] = {qo.row(fb, in)};
  float s[1];
  if constexpr (NORM && PostNorm<T>::value) {
    FusedPostNormX<T, false> xop{x + (size_t)rx * in + first, nw + first, nw, nullptr, in, first, 0.0f, nullptr};
    gemv_mma_loop_rows<T, 1, WARPS, D, (D % U == 0 ? U : 1), KILN_LINEAR_GEMV_XPRE != 0>(rows_a, rows_b, in, xop, c);
    post_norm_put<1, WARPS>(xop.ss, rows, smem);
    gemv_mma_sum<1, WARPS>(c, smem, s);
    post_norm_scale<1, WARPS>(rows, in, eps, smem, s);
  } else {
    FusedNormX<T, NORM> xop{x, x + (size_t)rx * in + first, nw + first, nw, rows, in, rx, eps, inv_s, smem, 1.0f, nullptr, nullptr};
    gemv_mma_loop_rows<T, 1, WARPS, D, (D % U == 0 ? U : 1), KILN_LINEAR_GEMV_XPRE != 0>(rows_a, rows_b, in, xop, c);
    gemv_mma_sum<1, WARPS>(c, smem, s);
  }
  if (threadIdx.x < 128) {
    const unsigned int i = threadIdx.x >> 5, l = threadIdx.x & 31;
    const unsigned int n = n0 + (l >> 2) + 8 * (i >> 1), r = 2 * (l & 3) + (i & 1);
    if (r < rows && n < total) qo.store(n, r, s[0], has_bias);
  }
}

// SIMT path (any dtype, alignment, rows): a warp per feature, 8 rows at a time.
template <typename T>
__device__ void qkv_simt(const T* x, const T* nw, const QkvOut<T>& qo, unsigned int rows, unsigned int in, float eps,
                         bool has_norm, bool has_bias, float* inv_s) {
  constexpr int R = KILN_FUSED_GEMV_MAX_ROWS;
  const unsigned int warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const unsigned int total = qo.n[0] + qo.n[1] + qo.n[2];
  for (unsigned int r0 = 0; r0 < rows; r0 += R) {
    const unsigned int nr = min(rows - r0, (unsigned int)R);
    if (has_norm) fused_row_inv<T>(x, r0, nr, in, eps, inv_s);
    for (unsigned int f = warp; f < KILN_FUSED_GEMV_FEATURES; f += warps) {
      const unsigned int n = blockIdx.x * KILN_FUSED_GEMV_FEATURES + f;
      if (n >= total) break;
      simt_row_sums<T>(qo.row(n, in), x, nw, inv_s, r0, nr, in, has_norm,
                       [&](unsigned int r, float s) { qo.store(n, r0 + r, s, has_bias); });
    }
    __syncthreads();  // inv_s is rewritten for the next 8 rows
  }
}

template <typename T, bool WIDE>
__device__ void qkv_linear(const T* x, const T* nw, const T* wq, const T* wk, const T* wv, const T* bq, const T* bk,
                           const T* bv, T* oq, T* ok, T* ov, unsigned int rows, unsigned int in, unsigned int nq,
                           unsigned int nk, unsigned int nv, unsigned int has_norm_u, float eps, unsigned int has_bias_u) {
  __shared__ __align__(16) float smem[KILN_FUSED_SMEM];
  __shared__ float inv_s[KILN_FUSED_TILE];
  const bool has_norm = has_norm_u != 0 && nw != nullptr;
  const bool has_bias = has_bias_u != 0 && bq != nullptr && bk != nullptr && bv != nullptr;
  const QkvOut<T> qo{{wq, wk, wv}, {bq, bk, bv}, {oq, ok, ov}, {nq, nk, nv}};
  KILN_ABLATED(8);
  if constexpr (IsHalf16<T>::value) {
    const bool aligned = aligned16(x) && aligned16(wq) && aligned16(wk) && aligned16(wv) && (!has_norm || aligned16(nw));
    if (rows != 0 && rows <= KILN_FUSED_GEMV_MAX_ROWS && in != 0 && in % 8 == 0 && aligned) {
      // Waits for the prior grids inside, after its first weight loads.
#define KILN_QKV_GEMV_CALL(WARPS, NORM, STAGED) \
  qkv_gemv_mma<T, WARPS, NORM>(x, nw, qo, rows, in, eps, has_bias, inv_s, smem)
      KILN_FUSED_GEMV_DISPATCH(WIDE, has_norm, false, KILN_QKV_GEMV_CALL)  // never staged
#undef KILN_QKV_GEMV_CALL
      return;
    }
  }
  allow_dependents();
  wait_prior_grids();
  if (rows == 0 || in == 0) return;
  qkv_simt<T>(x, nw, qo, rows, in, eps, has_norm, has_bias, inv_s);
}

// ---- QKV with RoPE and the KV write (Op::QkvRope) ----------------------------------------------
// The packed QKV GEMV (fused_linear over the three weights laid out back to back, rows q | k | v),
// then rope_kv_write's arithmetic in the epilogue: q rotated into q_out, k rotated and v written
// to cache row cache_base[r] + positions[r] (no KV write when p < 0 or the row is outside the
// cache; q copied unrotated when p < 0). No qkv tensor in between: each output is rounded to T as
// fused_linear stores it, then rotated and rounded as rope_pair stores it, so the results are
// the bits of the two launches. Needs head_dim % 16 == 0 and rotary_dim == head_dim (the fusion
// pass checks both).
//
// Features are numbered q | k | v (nq = heads * head_dim, nk = nv = kv_heads * head_dim); block b
// computes 16 of them. A q or k block holds 8 rotary pairs of one head: slot j < 8 is the first
// element of pair i = 8 c + j (c: the block's 16-feature chunk of its head), slot j + 8 the
// second ((i, i + head_dim / 2) halved, (2i, 2i + 1) interleaved), so that both elements of every
// pair land in one block. A v block holds 16 consecutive features. Grid: (nq + 2 nk) / 16 blocks,
// fused_linear's GEMV geometry. Per output, fused_linear's arithmetic (the same main loop, norm
// staging and warp-order sum), whichever slot computes it.
//
// Planned early reads (`early`, Kernel::QkvRope): the positions and cache bases are step fields
// that no launch of the program writes before this one (the host or the previous step or loop
// iteration did, all finished before the program began), so they are read through the L2, and
// the rotation angles computed (f64 pow and sincos: microseconds of latency), before
// kiln::wait_prior_grids(), off the critical path.
struct QkvRopeTile {
  unsigned int heads, kv_heads, head_dim, interleaved;
  __device__ __forceinline__ bool rotated(unsigned int b) const { return 16 * b < (heads + kv_heads) * head_dim; }
  // Pair index of slot j (< 8) of rotated block b.
  __device__ __forceinline__ unsigned int pair(unsigned int b, unsigned int j) const {
    return 8 * ((16 * b) % head_dim / 16) + j;
  }
  __device__ __forceinline__ unsigned int feature(unsigned int b, unsigned int j) const {
    const unsigned int f0 = 16 * b;
    if (!rotated(b)) return f0 + j;
    const unsigned int i = pair(b, j & 7), second = j >> 3;
    return f0 - f0 % head_dim + (interleaved ? 2 * i + second : i + second * (head_dim / 2));
  }
};

struct QkvRopeArgs {
  const int* positions;
  const int* cache_base;
  unsigned int kv_rows, rotary_dim, scaling_kind, orig;
  float theta, factor, low, high;
  const float* inv_freq;  // the host's table (rope_table), or null: rope_inv_freq
};

// What one epilogue thread needs of its row: the position, the cache row (-1: no KV write) and,
// for a rotated block's thread, the rotation of its pair.
struct QkvRopeLane {
  int p;
  long long row;
  RopeAngle a;
};

// Thread t's epilogue slot: rotated blocks use threads < 64 (pair t % 8, row t / 8), v blocks
// threads < 128 (slot t % 16, row t / 16). `active` is false for threads without one.
__device__ __forceinline__ void qkv_rope_slot(const QkvRopeTile& tile, unsigned int nr, unsigned int& j,
                                              unsigned int& r, bool& active) {
  if (tile.rotated(blockIdx.x)) {
    j = threadIdx.x & 7;
    r = threadIdx.x >> 3;
    active = threadIdx.x < 64 && r < nr;
  } else {
    j = threadIdx.x & 15;
    r = threadIdx.x >> 4;
    active = threadIdx.x < 128 && r < nr;
  }
}

// The step-block reads of a lane (position, cache row: what `early` reads before the wait).
__device__ __forceinline__ QkvRopeLane qkv_rope_lane_rows(const QkvRopeArgs& a, unsigned int r) {
  QkvRopeLane l{-1, -1, RopeAngle{0.0f, 1.0f}};
  l.p = __ldcg(a.positions + r);
  if (l.p >= 0) {
    const long long row = (long long)__ldcg(a.cache_base + r) + l.p;
    l.row = row < 0 || row >= (long long)a.kv_rows ? -1 : row;
  }
  return l;
}

// A lane's rotation, from its position (arithmetic only).
__device__ __forceinline__ void qkv_rope_lane_angle(const QkvRopeTile& tile, const QkvRopeArgs& a, unsigned int j,
                                                    QkvRopeLane& l) {
  if (l.p >= 0 && tile.rotated(blockIdx.x))
    l.a = rope_angle_or(a.inv_freq, l.p, tile.pair(blockIdx.x, j), a.rotary_dim, a.theta, a.scaling_kind, a.factor,
                        a.low, a.high, a.orig);
}

__device__ __forceinline__ QkvRopeLane qkv_rope_lane(const QkvRopeTile& tile, const QkvRopeArgs& a, unsigned int j,
                                                     unsigned int r) {
  QkvRopeLane l = qkv_rope_lane_rows(a, r);
  qkv_rope_lane_angle(tile, a, j, l);
  return l;
}

// The epilogue of one slot: acc[j][rl] is the f32 sum of slot j, row rl of this pass (row r0 + rl).
template <typename T>
__device__ __forceinline__ void qkv_rope_store(const float (*acc)[KILN_FUSED_GEMV_MAX_ROWS], const T* bias,
                                               const QkvRopeTile& tile, const QkvRopeLane& l, unsigned int j,
                                               unsigned int rl, size_t row, bool has_bias, T* q_out, T* k_cache,
                                               T* v_cache) {
  const unsigned int b = blockIdx.x;
  const unsigned int nq = tile.heads * tile.head_dim, nkv = tile.kv_heads * tile.head_dim;
  // Output as fused_linear stores it: T(acc (+ bias)), read back as f32.
  auto value = [&](unsigned int slot) -> float {
    const float v = acc[slot][rl];
    return to_f32(from_f32<T>(has_bias ? v + to_f32(bias[tile.feature(b, slot)]) : v));
  };
  if (tile.rotated(b)) {
    const unsigned int fa = tile.feature(b, j), fb = tile.feature(b, j + 8);
    const float x0 = value(j), x1 = value(j + 8);
    const float2 o = l.p >= 0 ? rope_rotate(x0, x1, l.a) : make_float2(x0, x1);
    if (fa < nq) {
      q_out[row * nq + fa] = from_f32<T>(o.x);
      q_out[row * nq + fb] = from_f32<T>(o.y);
    } else if (l.row >= 0) {
      k_cache[(size_t)l.row * nkv + fa - nq] = from_f32<T>(o.x);
      k_cache[(size_t)l.row * nkv + fb - nq] = from_f32<T>(o.y);
    }
  } else if (l.row >= 0) {
    v_cache[(size_t)l.row * nkv + tile.feature(b, j) - nq - nkv] = from_f32<T>(value(j));
  }
}

// Tensor-core path (f16 / bf16, rows <= 8, in % 8 == 0, aligned): fused_gemv_sums over the rows of
// QkvRopeTile, the sums to `acc`.
template <typename T, int WARPS, bool NORM, bool STAGED>
__device__ void qkv_rope_gemv_mma(const T* x, const T* nw, const T* w, const QkvRopeTile& tile, unsigned int rows,
                                  unsigned int in, float eps, float* inv_s, float* smem, T* hs,
                                  float (*acc)[KILN_FUSED_GEMV_MAX_ROWS]) {
  const unsigned int g = (threadIdx.x & 31) >> 2;
  const unsigned int ra = tile.feature(blockIdx.x, g), rb = tile.feature(blockIdx.x, g + 8);
  const T* wq[1] = {w};
  float s[1];
  fused_gemv_sums<T, 1, WARPS, NORM, STAGED>(x, nw, wq, ra, rb, rows, in, eps, inv_s, smem, hs, s);
  if (threadIdx.x < 128) {
    const unsigned int i = threadIdx.x >> 5, l = threadIdx.x & 31;
    acc[(l >> 2) + 8 * (i >> 1)][2 * (l & 3) + (i & 1)] = s[0];
  }
}

// GEMV_ONLY (kiln_qkv_rope_gemv_*): the tensor-core GEMV path with a norm at 256 threads only (in the
// `_o3` variant, a staged norm: fused_staged); any other input traps
// (src/runtime/cuda/abi.rs `qkv_rope_gemv_entry` calls it only for launches that take that path).
template <typename T, bool WIDE, bool GEMV_ONLY = false>
__device__ void qkv_rope(const T* x, const T* nw, const T* w, const T* bias, const int* positions,
                         const int* cache_base, T* q_out, T* k_cache, T* v_cache, unsigned int rows, unsigned int in,
                         unsigned int heads, unsigned int kv_heads, unsigned int head_dim, unsigned int kv_rows,
                         unsigned int has_norm_u, float eps, unsigned int has_bias_u, unsigned int early,
                         unsigned int rotary_dim, unsigned int interleaved, float theta, unsigned int scaling_kind,
                         float factor, float low, float high, unsigned int orig, const RopeFreqs& freqs) {
  __shared__ __align__(16) float smem[KILN_FUSED_SMEM];
  __shared__ float inv_s[KILN_FUSED_TILE];
  __shared__ float acc[KILN_FUSED_GEMV_FEATURES][KILN_FUSED_GEMV_MAX_ROWS];
  KILN_ABLATED(8);
  // GEMV_ONLY: a constant true, so that the dispatch below keeps only its norm paths.
  const bool has_norm = GEMV_ONLY || (has_norm_u != 0 && nw != nullptr && !((KILN_ABLATE) & 256));
  const bool has_bias = has_bias_u != 0 && bias != nullptr;
  const QkvRopeTile tile{heads, kv_heads, head_dim, interleaved};
  const float* inv_freq = rope_table(freqs, rotary_dim);
  const QkvRopeArgs a{positions, cache_base, kv_rows, rotary_dim, scaling_kind, orig, theta, factor, low, high, inv_freq};
  // Shapes the fusion pass never emits: nothing to do (the plan checker refuses them first).
  if (head_dim == 0 || head_dim % 16 != 0 || rotary_dim != head_dim || rows == 0 || in == 0 ||
      blockIdx.x >= (heads + 2 * kv_heads) * head_dim / 16) {
    allow_dependents();
    wait_prior_grids();
    return;
  }
  if constexpr (IsHalf16<T>::value) {
    const bool aligned = aligned16(x) && aligned16(w) && (!has_norm || aligned16(nw));
    if (rows <= KILN_FUSED_GEMV_MAX_ROWS && in % 8 == 0 && aligned) {
      unsigned int j, r;
      bool active;
      qkv_rope_slot(tile, rows, j, r, active);
      // Early: the default variant reads the lane (position, cache row) and computes its angle
      // before the GEMV, in registers. The dense variant (`_o3`, 80 registers) spilled ~300
      // bytes so: its early reads land in shared memory (each thread reads back its own slot)
      // and its angle waits for the epilogue.
      QkvRopeLane l{-1, -1, RopeAngle{0.0f, 1.0f}};
      // One slot per thread that can be active: qkv_rope_slot's threads < 128.
      __shared__ int early_p[WIDE ? 1 : 128];
      __shared__ long long early_row[WIDE ? 1 : 128];
      if (early != 0 && active) {
        if constexpr (WIDE) {
          l = qkv_rope_lane(tile, a, j, r);
        } else {
          const QkvRopeLane e = qkv_rope_lane_rows(a, r);
          early_p[threadIdx.x] = e.p;
          early_row[threadIdx.x] = e.row;
        }
      }
      __shared__ __align__(16) unsigned char stage[fused_stage_bytes<T, WIDE>()];
      T* hs = reinterpret_cast<T*>(stage);
      const bool staged = fused_staged<T, WIDE>(rows, in);
      // Waits for the prior grids inside, after its first weight loads.
#define KILN_QKV_ROPE_CALL(WARPS, NORM, STAGED) \
  qkv_rope_gemv_mma<T, WARPS, NORM, STAGED>(x, nw, w, tile, rows, in, eps, inv_s, smem, hs, acc)
      // GEMV_ONLY: 256 threads (8 warps) only, and in the dense variant a staged norm (its spills:
      // 92 bytes of stores with both of its paths, none with this one).
      if (GEMV_ONLY && (blockDim.x != 32 * 8 || (!WIDE && !staged))) __trap();
      KILN_FUSED_GEMV_DISPATCH(WIDE && !GEMV_ONLY, has_norm, staged || (GEMV_ONLY && !WIDE), KILN_QKV_ROPE_CALL)
#undef KILN_QKV_ROPE_CALL
      if (early == 0 && active) {
        l = qkv_rope_lane(tile, a, j, r);
      } else if constexpr (!WIDE) {
        if (active) {
          l.p = early_p[threadIdx.x];
          l.row = early_row[threadIdx.x];
          qkv_rope_lane_angle(tile, a, j, l);
        }
      }
      __syncthreads();
      if (active) qkv_rope_store<T>(acc, bias, tile, l, j, r, r, has_bias, q_out, k_cache, v_cache);
      return;
    }
  }
  if constexpr (GEMV_ONLY) __trap();
  allow_dependents();
  wait_prior_grids();
  // SIMT: fused_gemv_simt's arithmetic (a warp per feature, lanes strided over k), 8 rows at a time.
  constexpr int R = KILN_FUSED_GEMV_MAX_ROWS;
  const unsigned int warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (unsigned int r0 = 0; r0 < rows; r0 += R) {
    const unsigned int nr = min(rows - r0, (unsigned int)R);
    if (has_norm) fused_row_inv<T>(x, r0, nr, in, eps, inv_s);
    for (unsigned int j = warp; j < KILN_FUSED_GEMV_FEATURES; j += warps) {
      simt_row_sums<T>(w + KILN_W_ROW(T, tile.feature(blockIdx.x, j), in), x, nw, inv_s, r0, nr, in, has_norm,
                       [&](unsigned int r, float s) { acc[j][r] = s; });
    }
    __syncthreads();
    unsigned int j, rl;
    bool active;
    qkv_rope_slot(tile, nr, j, rl, active);
    if (active) {
      const QkvRopeArgs ar{positions + r0, cache_base + r0, kv_rows, rotary_dim, scaling_kind, orig, theta, factor, low, high,
                           inv_freq};
      qkv_rope_store<T>(acc, bias, tile, qkv_rope_lane(tile, ar, j, rl), j, rl, r0 + rl, has_bias, q_out, k_cache, v_cache);
    }
    __syncthreads();  // acc and inv_s are rewritten for the next 8 rows
  }
}

// kiln_fused_linear_res_{dt}_{outdt}: kiln_fused_linear's signature and the one path a decode o or down
// projection takes (src/runtime/cuda/abi.rs `launch_symbol` picks it: default variant, at most
// KILN_FUSED_GEMV_MAX_ROWS rows, 16-bit, in % 8 == 0, no norm, a residual, no out-norm, no walking):
// fused_gemv_mma_tile's early-residual GEMV at 16 or 8 warps, the same code as kiln_fused_linear's
// there and so the same bits, in a function of ~1/8 the instructions. Session 54's Nsight Compute of
// the 0.5B's o and down (an H100, kernels serialized) put 2/3 of their warp-stall samples on
// `no_inst` (instruction fetch) in the ~9700-instruction kiln_fused_linear; this entry is the A/B
// of that (`KILN_FUSED_RES_ENTRY=0` at run time calls kiln_fused_linear as before). The runtime
// checks the preconditions the planner guarantees (aligned operands: every offset is 256-aligned).
template <typename T, typename O>
__device__ __forceinline__ void fused_linear_res(const T* x, const T* w, const T* bias, const O* residual, O* out,
                                                 unsigned int rows, unsigned int in, unsigned int outf,
                                                 unsigned int has_bias_u, L2Span pf) {
  __shared__ __align__(16) float smem[KILN_FUSED_SMEM];
  KILN_ABLATED(2);
  const bool has_bias = has_bias_u != 0 && bias != nullptr;
  const OutNormArgs<O> on{nullptr, nullptr};
  if (blockDim.x == 32 * KILN_FUSED_GEMV_MAX_WARPS) {
    fused_gemv_mma_tile<T, O, false, KILN_FUSED_GEMV_MAX_WARPS, false, false, false>(
        x, nullptr, w, nullptr, bias, residual, out, rows, in, outf, 0.0f, has_bias, true, nullptr, smem, nullptr, pf, on);
  } else {
    fused_gemv_mma_tile<T, O, false, 8, false, false, false>(x, nullptr, w, nullptr, bias, residual, out, rows, in,
                                                             outf, 0.0f, has_bias, true, nullptr, smem, nullptr, pf, on);
  }
}

// kiln_fused_linear_res_k2_{dt}_{dt}: kiln_fused_linear_res's 16-warp GEMV (a 512-thread block's) split
// over a cluster of two 256-thread blocks, unless the plan knob KILN_GEMV_K2=0 (src/plan/geometry.rs
// `gemv_k2`: a one-row-GEMV o / down projection of 512-thread blocks with no L2 prefetch whose doubled
// grid still fits one block per SM; the Qwen2.5-0.5B's down: 112 blocks instead of 56). Blocks 2t and
// 2t + 1 take tile t: rank r's warp w runs the main loop of the 512-thread block's warp 8r + w (the
// same chunks: x and the weight rows shifted by 8 chunks, the chunk count taken over in - 256 elements,
// which gives every warp of rank 1 the count warp 8 + w had), rank 1 pushes its warps' partial sums into
// rank 0's shared memory (st.async, completing rank 0's mbarrier) and rank 0 sums the 16 in
// gemv_mma_sum's order and runs the epilogue: the same bits as kiln_fused_linear_res_* at 512 threads.
// Why: a 256-thread block at <= 96 registers fits beside two of the gate/up GEMV's dense blocks and a
// block of the fused QKV-attention fits beside it (scripts/coresidency.py), where the 512-thread
// down's blocks wait for both to drain. Session 33's split-K (a different reduction, the general
// kernel at 105 registers) lost 2.6% by crowding the next launch. Session 56's H100 A/B of this one at
// the ring of 4 was a tie (bench/results/2026-12-05-decode-ab-s56.md): the same 3.6 MB in flight as the
// 512-thread blocks, so the down was no faster; KILN_FUSED_K2_DEPTH below sets a deeper ring, and at its
// default of 8 session 57's won +2.35% (the down 4.90 -> 4.14 us; bench/results/2026-12-06-decode-ab-s57.md).
// Any other input traps.
template <typename T, typename O>
__device__ __forceinline__ void fused_linear_res_k2(const T* x, const T* w, const T* bias, const O* residual, O* out,
                                                    unsigned int rows, unsigned int in, unsigned int outf,
                                                    unsigned int has_bias_u) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int WARPS = KILN_FUSED_GEMV_MAX_WARPS, PW = WARPS / 2;  // the sums' warps, this block's
  constexpr int U = KILN_LINEAR_GEMV_UNROLL, D = KILN_FUSED_K2_DEPTH;
  static_assert(D % U == 0, "the ring holds whole runs");
  constexpr unsigned int SHIFT = PW * U * 32;  // rank 1's first element: warp PW's
  constexpr unsigned int PART = PW * 4 * 32;   // floats of one rank's partial sums
  __shared__ __align__(16) float smem[KILN_FUSED_SMEM];
  __shared__ __align__(8) unsigned long long bar;
  KILN_ABLATED(2);
  if (blockDim.x != 32 * PW || (gridDim.x & 1u) != 0u || in <= SHIFT || rows == 0 ||
      rows > KILN_FUSED_GEMV_MAX_ROWS)
    __trap();
  const unsigned int rank = blockIdx.x & 1u;  // %cluster_ctarank under __cluster_dims__(2, 1, 1)
  const unsigned int n0 = (blockIdx.x >> 1) * KILN_FUSED_GEMV_FEATURES;
  const unsigned int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2;
  const unsigned int bar_a = smem_addr(&bar);
  if (rank == 0 && threadIdx.x == 0) {
    mbar_init(bar_a);
    fence_mbarrier_init();
    mbar_expect(bar_a, PART * 4);
  }
  cluster_arrive_relaxed();  // waited on before rank 1's push: rank 0's mbarrier is live
  unsigned int ra, rb;
  gemv_tile_rows(n0, g, outf, ra, rb);
  unsigned int n, r;
  fused_gemv_slot(n0, n, r);
  const bool mine = rank == 0 && threadIdx.x < 128 && r < rows && n < outf;
  const size_t idx = (size_t)r * outf + n;
  const unsigned int shift = rank * SHIFT;
  const unsigned int rx = g < rows ? g : 0;
  EarlyResidualX<GemvPlainX<T>, O> xop{GemvPlainX<T>{x + (size_t)rx * in + shift + gemv_mma_first<WARPS, U>()},
                                       mine ? residual + idx : nullptr, 0.0f, L2Span{nullptr, 0u}};
  const T* rows_a[1] = {w + KILN_W_ROW(T, ra, in) + KILN_W_STEP(T, shift)};
  const T* rows_b[1] = {w + KILN_W_ROW(T, rb, in) + KILN_W_STEP(T, shift)};
  float c[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
  gemv_mma_loop_rows<T, 1, WARPS, D, U, KILN_LINEAR_GEMV_XPRE != 0>(rows_a, rows_b, in - shift, xop, c);
#pragma unroll
  for (int i = 0; i < 4; ++i) smem[(warp * 4 + i) * 32 + lane] = c[0][i];  // gemv_mma_sum's layout
  __syncthreads();
  cluster_wait();
  if (rank != 0) {
    // Warps 0-7 of rank 1 are warps 8-15 of the sums: floats [PART, 2 PART) of rank 0's partials.
    const float4 v = reinterpret_cast<const float4*>(smem)[threadIdx.x];
    push16(remote_addr(smem_addr(smem) + 4 * PART + 16 * threadIdx.x, 0), v, remote_addr(bar_a, 0));
    return;
  }
  if (threadIdx.x >= 128) return;
  mbar_wait0(bar_a);
  const unsigned int i = threadIdx.x >> 5;
  float s = 0.0f;
#pragma unroll
  for (int w2 = 0; w2 < WARPS; ++w2) s += smem[(w2 * 4 + i) * 32 + lane];
  const bool has_bias = has_bias_u != 0 && bias != nullptr;
  if (mine) out[idx] = fused_finish_plain<T, O>(s, bias, n, has_bias, true, xop.v);
#else
  __trap();
#endif
}

}  // namespace kiln

// Each kernel in its default and `_o3` variants (see linear.cu: KILN_GEMV_DENSE_BOUNDS); fused_linear
// also as `_o3u` (dense, a norm not staged).
#define KILN_FUSED_LINEAR_VARIANT(dt, T, outdt, O, SUFFIX, BOUNDS, WIDE, UNSTAGED)                                \
  extern "C" __global__ void BOUNDS kiln_fused_linear_##dt##_##outdt##SUFFIX(                                   \
      const T* x, const T* norm_w, const T* weight, const T* bias, const O* residual, O* out,                     \
      const char* l2_prefetch, unsigned int rows, unsigned int in_features, unsigned int out_features,            \
      unsigned int has_norm, float eps, unsigned int has_bias, unsigned int has_residual,                         \
      unsigned int l2_prefetch_bytes) {                                                                           \
    KILN_TRACE_BLOCK_END();                                                                                       \
    kiln::fused_linear<T, O, false, WIDE, UNSTAGED>(x, norm_w, weight, nullptr, bias, residual, out, rows,        \
                                                    in_features, out_features, has_norm, eps, has_bias,           \
                                                    has_residual, kiln::L2Span{l2_prefetch, l2_prefetch_bytes});  \
  }
#define KILN_FUSED_LINEAR_OUT(dt, T, outdt, O)                                                                     \
  KILN_FUSED_LINEAR_VARIANT(dt, T, outdt, O, , KILN_FUSED_BOUNDS, true, false)                                    \
  KILN_FUSED_LINEAR_VARIANT(dt, T, outdt, O, _o3, KILN_GEMV_DENSE_BOUNDS, false, false)                           \
  KILN_FUSED_LINEAR_VARIANT(dt, T, outdt, O, _o3u, KILN_GEMV_DENSE_BOUNDS, false, true)
#define KILN_FUSED_LINEAR_RES(dt, T, outdt, O)                                                                     \
  extern "C" __global__ void KILN_FUSED_BOUNDS kiln_fused_linear_res_##dt##_##outdt(                              \
      const T* x, const T* norm_w, const T* weight, const T* bias, const O* residual, O* out,                     \
      const char* l2_prefetch, unsigned int rows, unsigned int in_features, unsigned int out_features,            \
      unsigned int has_norm, float eps, unsigned int has_bias, unsigned int has_residual,                         \
      unsigned int l2_prefetch_bytes) {                                                                           \
    KILN_TRACE_BLOCK_END();                                                                                       \
    kiln::fused_linear_res<T, O>(x, weight, bias, residual, out, rows, in_features, out_features, has_bias,       \
                                 kiln::L2Span{l2_prefetch, l2_prefetch_bytes});                                  \
  }
KILN_FUSED_LINEAR_RES(f16, __half, f16, __half)
KILN_FUSED_LINEAR_RES(bf16, __nv_bfloat16, bf16, __nv_bfloat16)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KILN_FUSED_K2_CLUSTER_ATTR __cluster_dims__(2, 1, 1)
#else
#define KILN_FUSED_K2_CLUSTER_ATTR
#endif
// At most KILN_FUSED_K2_MAXNREG registers (128: one block fits beside a fused-attention block; 96 = 256
// threads x 96, the room two dense gate/up blocks leave on an SM, holds a ring of 4) and a ring of
// KILN_FUSED_K2_DEPTH slots (8: 126 registers, no spills, twice the 512-thread blocks' bytes in flight; the
// order of the sums does not depend on it).
#ifndef KILN_FUSED_K2_MAXNREG
#define KILN_FUSED_K2_MAXNREG 128
#endif
#define KILN_FUSED_LINEAR_RES_K2(dt, T)                                                                          \
  extern "C" __global__ void __maxnreg__(KILN_FUSED_K2_MAXNREG) KILN_FUSED_K2_CLUSTER_ATTR                                         \
      kiln_fused_linear_res_k2_##dt##_##dt(const T* x, const T* norm_w, const T* weight, const T* bias,          \
                                           const T* residual, T* out, const char* l2_prefetch, unsigned int rows, \
                                           unsigned int in_features, unsigned int out_features,                  \
                                           unsigned int has_norm, float eps, unsigned int has_bias,              \
                                           unsigned int has_residual, unsigned int l2_prefetch_bytes) {          \
    KILN_TRACE_BLOCK_END();                                                                                      \
    kiln::fused_linear_res_k2<T, T>(x, weight, bias, residual, out, rows, in_features, out_features, has_bias);  \
  }
KILN_FUSED_LINEAR_RES_K2(f16, __half)
KILN_FUSED_LINEAR_RES_K2(bf16, __nv_bfloat16)
KILN_FUSED_LINEAR_OUT(f32, float, f32, float)
KILN_FUSED_LINEAR_OUT(f16, __half, f16, __half)
KILN_FUSED_LINEAR_OUT(f16, __half, f32, float)
KILN_FUSED_LINEAR_OUT(bf16, __nv_bfloat16, bf16, __nv_bfloat16)
KILN_FUSED_LINEAR_OUT(bf16, __nv_bfloat16, f32, float)

// kiln_fused_linear_outnorm_{dt}_{dt}(x, norm_w, weight, bias, residual, out, l2_prefetch, out_norm_w,
// sumsq, <the scalars of kiln_fused_linear>): Op::FusedLinear with an out_norm (ir::OutNorm,
// lower::fuse rewrite 10: the last down projection carrying the output norm), default variant only
// (no dense variant covers it: src/plan/geometry.rs dense_variant_covers). bf16: the rewrite's only
// dtype. With o what kiln_fused_linear stores, out[r, n] = bf16(o[r, n] * out_norm_w[n]) and
// sumsq[r, g] the squares of o[r, 8g .. 8g + 8] (ir::group_sumsq's order). CPU reference: the
// `Kernel::FusedLinear` arm of src/runtime/cpu.rs (`store_out_norm`). Check on a GPU:
// python3 scripts/kernel_check.py --only out_norm
#define KILN_FUSED_LINEAR_OUTNORM(dt, T)                                                                         \
  extern "C" __global__ void KILN_FUSED_BOUNDS kiln_fused_linear_outnorm_##dt##_##dt(                            \
      const T* x, const T* norm_w, const T* weight, const T* bias, const T* residual, T* out,                     \
      const char* l2_prefetch, const T* out_norm_w, float* sumsq, unsigned int rows,                             \
      unsigned int in_features, unsigned int out_features, unsigned int has_norm, float eps,                     \
      unsigned int has_bias, unsigned int has_residual, unsigned int l2_prefetch_bytes) {                        \
    KILN_TRACE_BLOCK_END();                                                                                     \
    kiln::fused_linear<T, T, false, true, false, true>(x, norm_w, weight, nullptr, bias, residual, out, rows,   \
                                                       in_features, out_features, has_norm, eps, has_bias,      \
                                                       has_residual, kiln::L2Span{l2_prefetch, l2_prefetch_bytes}, \
                                                       kiln::OutNormArgs<T>{out_norm_w, sumsq});                \
  }
KILN_FUSED_LINEAR_OUTNORM(bf16, __nv_bfloat16)

// INFIX: empty, or `gemv_` with GEMV_ONLY true (the GEMV-only entries below).
#define KILN_GATED_LINEAR_VARIANT(dt, T, SUFFIX, BOUNDS, WIDE, INFIX, GEMV_ONLY)                                        \
  extern "C" __global__ void BOUNDS kiln_gated_linear_##INFIX##dt##SUFFIX(                                      \
      const T* x, const T* norm_w, const T* gate, const T* up, T* out, unsigned int rows, unsigned int in_features, \
      unsigned int out_features, unsigned int has_norm, float eps) {                                              \
    KILN_TRACE_BLOCK_END();                                                                                         \
    kiln::fused_linear<T, T, true, WIDE, false, false, GEMV_ONLY>(x, norm_w, gate, up, nullptr, nullptr, out, rows, \
                                                                   in_features, out_features, has_norm, eps, 0u, 0u); \
  }
#define KILN_GATED_LINEAR_AS(dt, T, INFIX, GEMV_ONLY)                                                             \
  KILN_GATED_LINEAR_VARIANT(dt, T, , KILN_FUSED_BOUNDS, true, INFIX, GEMV_ONLY)                                   \
  KILN_GATED_LINEAR_VARIANT(dt, T, _o3, KILN_GEMV_DENSE_BOUNDS, false, INFIX, GEMV_ONLY)
#define KILN_GATED_LINEAR(dt, T) KILN_GATED_LINEAR_AS(dt, T, , false)
KILN_FOR_EACH_DTYPE(KILN_GATED_LINEAR)
// kiln_gated_linear_gemv_{dt}[_o3] (16-bit): the same with only the tensor-core GEMV paths (any other
// input traps), called by default (KILN_GEMV_ONLY_ENTRY=0 off; linear.cu's kiln_linear_gemv_*).
#define KILN_GATED_LINEAR_GEMV(dt, T) KILN_GATED_LINEAR_AS(dt, T, gemv_, true)
KILN_GATED_LINEAR_GEMV(f16, __half)
KILN_GATED_LINEAR_GEMV(bf16, __nv_bfloat16)

// (x, norm_w|0, wq, wk, wv, bq|0, bk|0, bv|0, out_q, out_k, out_v, rows, in_features, nq, nk, nv,
//  has_norm, eps, has_bias): Op::QkvLinear, grid (ceil((nq + nk + nv) / 16)).
#define KILN_QKV_LINEAR_VARIANT(dt, T, SUFFIX, BOUNDS, WIDE)                                                            \
  extern "C" __global__ void BOUNDS kiln_qkv_linear_##dt##SUFFIX(                                               \
      const T* x, const T* norm_w, const T* wq, const T* wk, const T* wv, const T* bq, const T* bk, const T* bv,  \
      T* out_q, T* out_k, T* out_v, unsigned int rows, unsigned int in_features, unsigned int nq, unsigned int nk, \
      unsigned int nv, unsigned int has_norm, float eps, unsigned int has_bias) {                                  \
    KILN_TRACE_BLOCK_END();                                                                                             \
    kiln::qkv_linear<T, WIDE>(x, norm_w, wq, wk, wv, bq, bk, bv, out_q, out_k, out_v, rows, in_features, nq, nk, nv,    \
                        has_norm, eps, has_bias);                                                                 \
  }
#define KILN_QKV_LINEAR(dt, T)                                                                                    \
  KILN_QKV_LINEAR_VARIANT(dt, T, , KILN_FUSED_BOUNDS, true)                                                       \
  KILN_QKV_LINEAR_VARIANT(dt, T, _o3, KILN_GEMV_DENSE_BOUNDS, false)
KILN_FOR_EACH_DTYPE(KILN_QKV_LINEAR)

// (x, norm_w|0, weight, bias|0, positions, cache_base, q_out, k_cache, v_cache, rows, in_features,
//  heads, kv_heads, head_dim, kv_rows, has_norm, eps, has_bias, early, rotary_dim, interleaved,
//  theta, scaling_kind, factor, low_freq_factor, high_freq_factor, original_max_position, freqs (RopeFreqs,
//  by value)):
//  Op::QkvRope, weight [(heads + 2 kv_heads) * head_dim, in_features] (q | k | v rows), grid
//  ((heads + 2 kv_heads) * head_dim / 16).
#define KILN_QKV_ROPE_VARIANT(dt, T, SUFFIX, BOUNDS, WIDE, INFIX, GEMV_ONLY)                                          \
  extern "C" __global__ void BOUNDS kiln_qkv_rope_##INFIX##dt##SUFFIX(                                          \
      const T* x, const T* norm_w, const T* weight, const T* bias, const int* positions, const int* cache_base,    \
      T* q_out, T* k_cache, T* v_cache, unsigned int rows, unsigned int in_features, unsigned int heads,          \
      unsigned int kv_heads, unsigned int head_dim, unsigned int kv_rows, unsigned int has_norm, float eps,       \
      unsigned int has_bias, unsigned int early, unsigned int rotary_dim, unsigned int interleaved, float theta,  \
      unsigned int scaling_kind, float factor, float low_freq_factor, float high_freq_factor,                     \
      unsigned int original_max_position, const __grid_constant__ kiln::RopeFreqs freqs) {                        \
    KILN_TRACE_BLOCK_END();                                                                                                         \
    kiln::qkv_rope<T, WIDE, GEMV_ONLY>(x, norm_w, weight, bias, positions, cache_base, q_out, k_cache, v_cache, rows, in_features,  \
                      heads, kv_heads, head_dim, kv_rows, has_norm, eps, has_bias, early, rotary_dim, interleaved, \
                      theta, scaling_kind, factor, low_freq_factor, high_freq_factor, original_max_position, freqs); \
  }
// Default and `_o3` variants, as qkv_linear: the dense one reads its early lanes into shared
// memory and computes the RoPE angle in the epilogue (see qkv_rope), 80 registers with ~12 bytes of
// spills in bf16 (ptxas, sm_90a; 420 with the default variant's register-resident early lane).
#define KILN_QKV_ROPE_AS(dt, T, INFIX, GEMV_ONLY)                                \
  KILN_QKV_ROPE_VARIANT(dt, T, , KILN_FUSED_BOUNDS, true, INFIX, GEMV_ONLY)     \
  KILN_QKV_ROPE_VARIANT(dt, T, _o3, KILN_GEMV_DENSE_BOUNDS, false, INFIX, GEMV_ONLY)
#define KILN_QKV_ROPE(dt, T) KILN_QKV_ROPE_AS(dt, T, , false)
KILN_FOR_EACH_DTYPE(KILN_QKV_ROPE)
// kiln_qkv_rope_gemv_{dt}[_o3] (16-bit): the same with only the tensor-core GEMV path with a norm at 256
// threads (in `_o3` a staged norm; any other input traps): the decode QKV-RoPE of the Llama-3.2-1B /
// 3.1-8B in 2792 / 2856 SASS instructions against kiln_qkv_rope_bf16's 7528 / _o3's 6768 (sm_90a).
// Called with KILN_QKV_ROPE_GEMV_ENTRY=1 (abi.rs `qkv_rope_gemv_entry`), as kiln_fused_linear_res_* and
// the GEMV-only entries above (sessions 54, 55: instruction fetch); off, since session 56's H100 A/B
// lost 1.5% on the 1B (bench/results/2026-12-05-decode-ab-s56.md).
#define KILN_QKV_ROPE_GEMV(dt, T) KILN_QKV_ROPE_AS(dt, T, gemv_, true)
KILN_QKV_ROPE_GEMV(f16, __half)
KILN_QKV_ROPE_GEMV(bf16, __nv_bfloat16)
