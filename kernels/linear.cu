// linear.cu: kiln_linear_{dt}_{outdt}(x, weight, bias, out, rows, in_features, out_features, has_bias)
//   dt in {f32, f16, bf16} is the storage type of x, weight and bias; outdt in {dt, f32} is the
//   type of out (f32 for logits). `bias` is a null pointer when has_bias == 0.
//
// Check on a GPU: python3 scripts/kernel_check.py --only linear --bench   (NVRTC build, no GPU:
// cargo test --test kernels_compile, or python3 scripts/kernel_check.py --compile-only)
//
// Semantics (Op::Linear): out[r, n] = sum_k x[r, k] * weight[n, k] (+ bias[n]), accumulated in
// f32, rounded once to outdt. weight is [out_features, in_features] row-major (HF layout).
//
// CPU reference:
//   for r, n: acc = 0f32; for k: acc += f32(x[r,k]) * f32(w[n,k]); if has_bias: acc += f32(b[n])
//             out[r,n] = OutT(acc)
//
// Two algorithms, chosen from `rows` alone so that src/plan/geometry.rs can pick the matching
// grid (both use 256 threads):
// - rows <= KILN_LINEAR_GEMV_MAX_ROWS (decode): GEMV, bound by reading the weight once. One block
//   per KILN_LINEAR_GEMV_FEATURES (16) output features; grid (ceil(out_features / 16), 1).
//   * f16 / bf16 with in_features % 8 == 0 and 16-byte aligned x and weight: tensor cores. The
//     block's 16 weight rows are the M = 16 side of `mma.m16n8k16` and the (up to 8) rows of x
//     the N = 8 side; k is split over the 8 warps in runs of KILN_LINEAR_GEMV_UNROLL 32-wide
//     chunks. Lane (g, t) = (lane / 4, lane % 4) loads 16 bytes of weight rows g and g + 8 and
//     of x row g at k + 8t: the same permutation of k on both operands, so every load is
//     16 bytes and nothing is reshuffled. Each warp keeps UNROLL x 2 weight loads in flight;
//     the weight goes around the L1 (streamed once), x stays in it. The 8 warps' partial
//     16x8 tiles are summed through shared memory in warp order: deterministic, no atomics.
//   * otherwise (f32, unaligned, in_features % 8 != 0): SIMT, 2 features per warp, lanes
//     strided over k (16-byte loads when aligned, scalar otherwise), warp-shuffle sums.
// - otherwise (prefill): a plain shared-memory tiled kernel, 64x64 outputs per block, each
//   thread 4x4. Grid (ceil(out_features / 64), ceil(rows / 64)). Correctness first; a faster
//   (tensor-core) path replaces it later.
// Every reduction order depends only on the shapes: results are identical between runs.
#include "common.cuh"

namespace kiln {

#define KILN_LINEAR_GEMV_MAX_ROWS 8
#define KILN_LINEAR_GEMV_WARPS 8
#define KILN_LINEAR_GEMV_FEATURES 16
// 32-wide k chunks each warp loads before its first MMA. Overridable only for the tuning sweep
// of scripts/kernel_check.py --bench (the geometry does not depend on it).
#ifndef KILN_LINEAR_GEMV_UNROLL
#define KILN_LINEAR_GEMV_UNROLL 4
#endif
#define KILN_LINEAR_TILE 64
#define KILN_LINEAR_TILE_K 32
static_assert(KILN_LINEAR_GEMV_MAX_ROWS == 8, "the MMA's N side holds at most 8 rows of x");
static_assert(KILN_LINEAR_GEMV_FEATURES == 2 * KILN_LINEAR_GEMV_WARPS, "SIMT GEMV: 2 features per warp");

template <typename T> struct IsHalf16 {
  static constexpr bool value = sizeof(T) == 2;
};

// Tensor-core GEMV for f16 / bf16 (see the header). Needs in % 8 == 0, x and w 16-byte aligned.
template <typename T, typename O>
__device__ void linear_gemv_mma(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                                O* __restrict__ out, unsigned int rows, unsigned int in, unsigned int outf,
                                bool has_bias) {
  constexpr int U = KILN_LINEAR_GEMV_UNROLL;
  constexpr int WARPS = KILN_LINEAR_GEMV_WARPS;
  __shared__ float partial[WARPS][4][32];
  const unsigned int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned int g = lane >> 2, t = lane & 3;
  const unsigned int n0 = blockIdx.x * KILN_LINEAR_GEMV_FEATURES;
  const bool has_a = n0 + g < outf, has_b = n0 + g + 8 < outf, has_x = g < rows;
  // Rows past the end are never read (their loads are skipped); the pointers stay in bounds.
  const T* wa = w + (size_t)(has_a ? n0 + g : 0) * in + 8 * t;
  const T* wb = w + (size_t)(has_b ? n0 + g + 8 : 0) * in + 8 * t;
  const T* xr = x + (size_t)(has_x ? g : 0) * in + 8 * t;
  const unsigned int chunks = (in + 31) / 32;
  float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const uint4 zero4 = make_uint4(0u, 0u, 0u, 0u);
  // Warp w takes chunks [U * (w + WARPS * i), + U): U * 64 contiguous bytes of each weight row.
  for (unsigned int c0 = warp * U; c0 < chunks; c0 += WARPS * U) {
    uint4 a[U], b[U], xv[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const size_t k = (size_t)(c0 + u) * 32;
      const bool ok = c0 + u < chunks && k + 8 * t < in;
      a[u] = ok && has_a ? load16_stream(wa + k) : zero4;
      b[u] = ok && has_b ? load16_stream(wb + k) : zero4;
      xv[u] = ok && has_x ? __ldg(reinterpret_cast<const uint4*>(xr + k)) : zero4;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      // Elements k+8t .. k+8t+3 feed the first MMA, k+8t+4 .. +7 the second.
      mma_m16n8k16<T>(c, a[u].x, b[u].x, a[u].y, b[u].y, xv[u].x, xv[u].y);
      mma_m16n8k16<T>(c, a[u].z, b[u].z, a[u].w, b[u].w, xv[u].z, xv[u].w);
    }
  }
  // c[i] is feature n0 + g + 8 * (i / 2), row 2t + i % 2.
#pragma unroll
  for (int i = 0; i < 4; ++i) partial[warp][i][lane] = c[i];
  __syncthreads();
  if (threadIdx.x < 128) {
    const unsigned int i = threadIdx.x >> 5, l = threadIdx.x & 31;
    float s = 0.0f;
#pragma unroll
    for (int w2 = 0; w2 < WARPS; ++w2) s += partial[w2][i][l];
    const unsigned int n = n0 + (l >> 2) + 8 * (i >> 1), r = 2 * (l & 3) + (i & 1);
    if (r < rows && n < outf) out[(size_t)r * outf + n] = from_f32<O>(has_bias ? s + to_f32(bias[n]) : s);
  }
}

// SIMT GEMV: warp w computes features n0 + 2w and n0 + 2w + 1 for NR rows of x.
template <typename T, typename O, int NR>
__device__ void linear_gemv_simt(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                                 O* __restrict__ out, unsigned int in, unsigned int outf, bool has_bias) {
  const unsigned int lane = threadIdx.x & 31;
  const unsigned int n = blockIdx.x * KILN_LINEAR_GEMV_FEATURES + 2 * (threadIdx.x >> 5);
  if (n >= outf) return;
  const bool two = n + 1 < outf;
  const T* w0 = w + (size_t)n * in;
  const T* w1 = w + (size_t)(two ? n + 1 : n) * in;
  float acc0[NR], acc1[NR];
#pragma unroll
  for (int r = 0; r < NR; ++r) acc0[r] = acc1[r] = 0.0f;

  constexpr int V = Vec16<T>::N;
  const bool vec = (in % V == 0) && aligned16(w) && aligned16(x);
  if (vec) {
#pragma unroll 2
    for (unsigned int k = lane * V; k < in; k += 32 * V) {
      float f0[V], f1[V];
      unpack_to(load16_stream(w0 + k), f0);
      unpack_to(load16_stream(w1 + k), f1);
#pragma unroll
      for (int r = 0; r < NR; ++r) {
        float xf[V];
        load16<T>(x + (size_t)r * in + k, xf);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          acc0[r] = __fmaf_rn(xf[j], f0[j], acc0[r]);
          acc1[r] = __fmaf_rn(xf[j], f1[j], acc1[r]);
        }
      }
    }
  } else {
    for (unsigned int k = lane; k < in; k += 32) {
      const float f0 = to_f32(w0[k]), f1 = to_f32(w1[k]);
#pragma unroll
      for (int r = 0; r < NR; ++r) {
        const float xf = to_f32(x[(size_t)r * in + k]);
        acc0[r] = __fmaf_rn(xf, f0, acc0[r]);
        acc1[r] = __fmaf_rn(xf, f1, acc1[r]);
      }
    }
  }
  const float b0 = has_bias ? to_f32(bias[n]) : 0.0f;
  const float b1 = has_bias && two ? to_f32(bias[n + 1]) : 0.0f;
#pragma unroll
  for (int r = 0; r < NR; ++r) {
    const float s0 = warp_sum(acc0[r]), s1 = warp_sum(acc1[r]);
    if (lane == 0) {
      out[(size_t)r * outf + n] = from_f32<O>(has_bias ? s0 + b0 : s0);
      if (two) out[(size_t)r * outf + n + 1] = from_f32<O>(has_bias ? s1 + b1 : s1);
    }
  }
}

template <typename T, typename O>
__device__ void linear_tiled(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                             O* __restrict__ out, unsigned int rows, unsigned int in, unsigned int outf,
                             bool has_bias) {
  constexpr int TM = KILN_LINEAR_TILE, TN = KILN_LINEAR_TILE, TK = KILN_LINEAR_TILE_K;
  // +1 column of padding: the transposing stores hit distinct banks.
  __shared__ float xs[TK][TM + 1];
  __shared__ float ws[TK][TN + 1];
  const unsigned int tid = threadIdx.x;
  const unsigned int tx = tid % 16, ty = tid / 16;
  const unsigned int row0 = blockIdx.y * TM, col0 = blockIdx.x * TN;
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;

  for (unsigned int k0 = 0; k0 < in; k0 += TK) {
    // 64 x 32 elements of each operand, 8 per thread, consecutive threads along k.
    for (unsigned int e = tid; e < TM * TK; e += blockDim.x) {
      const unsigned int m = e / TK, kk = e % TK;
      const unsigned int k = k0 + kk;
      const unsigned int r = row0 + m, c = col0 + m;
      xs[kk][m] = (r < rows && k < in) ? to_f32(x[(size_t)r * in + k]) : 0.0f;
      ws[kk][m] = (c < outf && k < in) ? to_f32(w[(size_t)c * in + k]) : 0.0f;
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < TK; ++kk) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = xs[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = ws[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = __fmaf_rn(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const unsigned int r = row0 + ty + 16 * i;
    if (r >= rows) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const unsigned int c = col0 + tx + 16 * j;
      if (c >= outf) continue;
      const float v = has_bias ? acc[i][j] + to_f32(bias[c]) : acc[i][j];
      out[(size_t)r * outf + c] = from_f32<O>(v);
    }
  }
}

template <typename T, typename O>
__device__ void linear(const T* x, const T* w, const T* bias, O* out, unsigned int rows, unsigned int in,
                       unsigned int outf, unsigned int has_bias_u) {
  const bool has_bias = has_bias_u != 0 && bias != nullptr;
  if (rows == 0) return;
  if (rows > KILN_LINEAR_GEMV_MAX_ROWS) {
    linear_tiled<T, O>(x, w, bias, out, rows, in, outf, has_bias);
    return;
  }
  if constexpr (IsHalf16<T>::value) {
    if (in % 8 == 0 && aligned16(w) && aligned16(x)) {
      linear_gemv_mma<T, O>(x, w, bias, out, rows, in, outf, has_bias);
      return;
    }
  }
  switch (rows) {
    case 1: linear_gemv_simt<T, O, 1>(x, w, bias, out, in, outf, has_bias); return;
    case 2: linear_gemv_simt<T, O, 2>(x, w, bias, out, in, outf, has_bias); return;
    case 3: linear_gemv_simt<T, O, 3>(x, w, bias, out, in, outf, has_bias); return;
    case 4: linear_gemv_simt<T, O, 4>(x, w, bias, out, in, outf, has_bias); return;
    case 5: linear_gemv_simt<T, O, 5>(x, w, bias, out, in, outf, has_bias); return;
    case 6: linear_gemv_simt<T, O, 6>(x, w, bias, out, in, outf, has_bias); return;
    case 7: linear_gemv_simt<T, O, 7>(x, w, bias, out, in, outf, has_bias); return;
    default: linear_gemv_simt<T, O, 8>(x, w, bias, out, in, outf, has_bias); return;
  }
}

}  // namespace kiln

#define KILN_LINEAR_OUT(dt, T, outdt, O)                                                            \
  extern "C" __global__ void __launch_bounds__(256)                                                 \
      kiln_linear_##dt##_##outdt(const T* x, const T* weight, const T* bias, O* out, unsigned int rows, \
                                 unsigned int in_features, unsigned int out_features,               \
                                 unsigned int has_bias) {                                           \
    kiln::linear<T, O>(x, weight, bias, out, rows, in_features, out_features, has_bias);            \
  }
KILN_LINEAR_OUT(f32, float, f32, float)
KILN_LINEAR_OUT(f16, __half, f16, __half)
KILN_LINEAR_OUT(f16, __half, f32, float)
KILN_LINEAR_OUT(bf16, __nv_bfloat16, bf16, __nv_bfloat16)
KILN_LINEAR_OUT(bf16, __nv_bfloat16, f32, float)
