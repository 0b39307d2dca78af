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
// grid:
// - rows <= KILN_LINEAR_GEMV_MAX_ROWS (decode): GEMV, bound by reading the weight once. One block
//   per KILN_LINEAR_GEMV_FEATURES (16) output features; grid (ceil(out_features / 16), 1), block
//   256 threads (8 warps), or 512 (16 warps) when that grid has fewer blocks than the GPU has
//   SMs (132: a 2048-wide output gives 128 blocks), so that each block keeps twice the bytes in
//   flight. Everything below holds for either warp count.
//   * f16 / bf16 with in_features % 8 == 0 and 16-byte aligned x and weight: tensor cores. The
//     block's 16 weight rows are the M = 16 side of `mma.m16n8k16` and the (up to 8) rows of x
//     the N = 8 side; k is split over the block's warps in runs of KILN_LINEAR_GEMV_UNROLL 32-wide
//     chunks. Lane (g, t) = (lane / 4, lane % 4) loads 16 bytes of weight rows g and g + 8 and
//     of x row g at k + 8t: the same permutation of k on both operands, so every load is
//     16 bytes and nothing is reshuffled. Runs are software-pipelined (the next run's loads
//     are issued before this run's MMAs), so each warp keeps 2 x UNROLL x 2 weight loads in flight;
//     the weight goes around the L1 (streamed once), x stays in it. The 8 warps' partial
//     16x8 tiles are summed through shared memory in warp order: deterministic, no atomics.
//   * otherwise (f32, unaligned, in_features % 8 != 0): SIMT, 2 (or 1) features per warp, lanes
//     strided over k (16-byte loads when aligned, scalar otherwise), warp-shuffle sums.
// - otherwise (prefill): a plain shared-memory tiled kernel, 64x64 outputs per block, each
//   thread 4x4. Grid (ceil(out_features / 64), ceil(rows / 64)), block 256. Correctness first; a faster
//   (tensor-core) path replaces it later.
// Every reduction order depends only on the shapes: results are identical between runs.
#include "common.cuh"

namespace kiln {

#define KILN_LINEAR_GEMV_MAX_ROWS 8
#define KILN_LINEAR_GEMV_WARPS 8
#define KILN_LINEAR_GEMV_MAX_WARPS 16
#define KILN_LINEAR_GEMV_FEATURES 16
// 32-wide k chunks each warp loads before its first MMA. Overridable only for the tuning sweep
// of scripts/kernel_check.py --bench (the geometry does not depend on it).
#ifndef KILN_LINEAR_GEMV_UNROLL
#define KILN_LINEAR_GEMV_UNROLL 2
#endif
#define KILN_LINEAR_TILE 64
#define KILN_LINEAR_TILE_K 32
static_assert(KILN_LINEAR_GEMV_MAX_ROWS == 8, "the MMA's N side holds at most 8 rows of x");
static_assert(KILN_LINEAR_GEMV_FEATURES == 2 * KILN_LINEAR_GEMV_WARPS, "SIMT GEMV: 2 features per warp");
static_assert(KILN_LINEAR_GEMV_FEATURES == KILN_LINEAR_GEMV_MAX_WARPS, "SIMT GEMV: 1 feature per warp");

template <typename T> struct IsHalf16 {
  static constexpr bool value = sizeof(T) == 2;
};

// 16 bytes of x (reused by every block: cached in L1), issued in program order with the
// streamed weight loads so that all of an iteration's loads are in flight before the first MMA.
__device__ __forceinline__ uint4 load16_cached_ordered(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ uint4 load16_stream_ordered(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Tensor-core GEMV for f16 / bf16 (see the header), WARPS = blockDim.x / 32 (8 or 16). Needs
// in % 8 == 0, x and w 16-byte aligned.
template <typename T, typename O, int WARPS>
__device__ void linear_gemv_mma(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                                O* __restrict__ out, unsigned int rows, unsigned int in, unsigned int outf,
                                bool has_bias) {
  constexpr int U = KILN_LINEAR_GEMV_UNROLL;
  __shared__ float partial[KILN_LINEAR_GEMV_MAX_WARPS][4][32];
  const unsigned int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned int g = lane >> 2, t = lane & 3;
  const unsigned int n0 = blockIdx.x * KILN_LINEAR_GEMV_FEATURES;
  // Weight rows past out_features and x rows past `rows` read row 0 instead: each output of the
  // MMA depends on one weight row and one x row only, and those outputs are never stored. So
  // the main loop needs no predicates.
  const unsigned int ra = n0 + g < outf ? n0 + g : 0, rb = n0 + g + 8 < outf ? n0 + g + 8 : 0;
  const unsigned int rx = g < rows ? g : 0;
  // Warp w takes chunks [U * (w + WARPS * i), + U): U * 64 contiguous bytes of each weight row.
  const unsigned int first = warp * U * 32 + 8 * t;
  const T* pa = w + (size_t)ra * in + first;
  const T* pb = w + (size_t)rb * in + first;
  const T* px = x + (size_t)rx * in + first;
  constexpr unsigned int STEP = WARPS * U * 32;
  const unsigned int chunks = (in + 31) / 32, full = in / 32;
  float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  unsigned int c0 = warp * U;
  // Software pipeline over whole runs of U chunks: the loads of the next run are issued before
  // the MMAs of this one, so 2U chunks are in flight while the warp waits (ptxas on its own
  // interleaves load, MMA, load and keeps about one run in flight; check the SASS after changes).
  uint4 a[U], b[U], xv[U];
  bool have = c0 + U <= full;
  if (have) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      a[u] = load16_stream_ordered(pa + 32 * u);
      b[u] = load16_stream_ordered(pb + 32 * u);
      xv[u] = load16_cached_ordered(px + 32 * u);
    }
  }
  while (have) {
    const bool have_next = c0 + WARPS * U + U <= full;
    pa += STEP;
    pb += STEP;
    px += STEP;
    uint4 na[U], nb[U], nx[U];
    if (have_next) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        na[u] = load16_stream_ordered(pa + 32 * u);
        nb[u] = load16_stream_ordered(pb + 32 * u);
        nx[u] = load16_cached_ordered(px + 32 * u);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      // Elements k+8t .. k+8t+3 feed the first MMA, k+8t+4 .. +7 the second.
      mma_m16n8k16<T>(c, a[u].x, b[u].x, a[u].y, b[u].y, xv[u].x, xv[u].y);
      mma_m16n8k16<T>(c, a[u].z, b[u].z, a[u].w, b[u].w, xv[u].z, xv[u].w);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      a[u] = na[u];
      b[u] = nb[u];
      xv[u] = nx[u];
    }
    c0 += WARPS * U;
    have = have_next;
  }
  // This warp's last, partial run: chunks [c0, min(c0 + U, chunks)), the last maybe shorter than
  // 32 (lanes past in_features contribute zeros). pa, pb, px point at chunk c0.
  for (unsigned int u = 0; c0 + u < chunks && u < (unsigned int)U; ++u) {
    const bool ok = (size_t)(c0 + u) * 32 + 8 * t < in;
    const uint4 zero4 = make_uint4(0u, 0u, 0u, 0u);
    const uint4 a1 = ok ? load16_stream(pa + 32 * u) : zero4;
    const uint4 b1 = ok ? load16_stream(pb + 32 * u) : zero4;
    const uint4 x1 = ok ? __ldg(reinterpret_cast<const uint4*>(px + 32 * u)) : zero4;
    mma_m16n8k16<T>(c, a1.x, b1.x, a1.y, b1.y, x1.x, x1.y);
    mma_m16n8k16<T>(c, a1.z, b1.z, a1.w, b1.w, x1.z, x1.w);
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

// SIMT GEMV: with 8 warps, warp w computes features n0 + 2w and n0 + 2w + 1 for NR rows of x;
// with 16, feature n0 + w.
template <typename T, typename O, int NR>
__device__ void linear_gemv_simt(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                                 O* __restrict__ out, unsigned int in, unsigned int outf, bool has_bias) {
  const unsigned int lane = threadIdx.x & 31;
  const unsigned int per_warp = KILN_LINEAR_GEMV_FEATURES / (blockDim.x >> 5);
  const unsigned int n = blockIdx.x * KILN_LINEAR_GEMV_FEATURES + per_warp * (threadIdx.x >> 5);
  if (n >= outf) return;
  const bool two = per_warp == 2 && n + 1 < outf;
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
      unpack16_as<T>(load16_stream(w0 + k), f0);
      unpack16_as<T>(load16_stream(w1 + k), f1);
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
      if (blockDim.x == 32 * KILN_LINEAR_GEMV_MAX_WARPS) {
        linear_gemv_mma<T, O, KILN_LINEAR_GEMV_MAX_WARPS>(x, w, bias, out, rows, in, outf, has_bias);
      } else {
        linear_gemv_mma<T, O, KILN_LINEAR_GEMV_WARPS>(x, w, bias, out, rows, in, outf, has_bias);
      }
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
  extern "C" __global__ void __launch_bounds__(32 * KILN_LINEAR_GEMV_MAX_WARPS)                    \
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
