// linear.cu: kiln_linear_{dt}_{outdt}(x, weight, bias, out, rows, in_features, out_features, has_bias)
//   dt in {f32, f16, bf16} is the storage type of x, weight and bias; outdt in {dt, f32} is the
//   type of out (f32 for logits). `bias` is a null pointer when has_bias == 0.
//
// Check on a GPU: python3 scripts/kernel_check.py --only linear   (NVRTC build, no GPU:
// cargo test --test kernels_compile)
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
// - rows <= KILN_LINEAR_GEMV_MAX_ROWS (decode): GEMV. One warp per output feature; the warp
//   streams the weight row once with 16-byte loads (when in_features is a multiple of the
//   vector width and the pointers are 16-byte aligned; scalar loads otherwise) and applies it
//   to every row of x. Grid (ceil(out_features / 8), 1): 8 warps, 8 features per block.
// - otherwise (prefill): a plain shared-memory tiled kernel, 64x64 outputs per block, each
//   thread 4x4. Grid (ceil(out_features / 64), ceil(rows / 64)). Correctness first; a faster
//   (tensor-core) path replaces it later.
#include "common.cuh"

namespace kiln {

#define KILN_LINEAR_GEMV_MAX_ROWS 8
#define KILN_LINEAR_GEMV_WARPS 8
#define KILN_LINEAR_TILE 64
#define KILN_LINEAR_TILE_K 32
static_assert(KILN_LINEAR_GEMV_MAX_ROWS == 8, "linear() below dispatches rows 1..8 to the GEMV");

template <typename T, typename O, int NR>
__device__ void linear_gemv(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                            O* __restrict__ out, unsigned int in, unsigned int outf, bool has_bias) {
  const unsigned int lane = threadIdx.x & 31;
  const unsigned int n = blockIdx.x * KILN_LINEAR_GEMV_WARPS + (threadIdx.x >> 5);
  if (n >= outf) return;
  const T* wr = w + (size_t)n * in;
  float acc[NR];
#pragma unroll
  for (int r = 0; r < NR; ++r) acc[r] = 0.0f;

  constexpr int V = kiln::Vec16<T>::N;
  const bool vec = (in % V == 0) && kiln::aligned16(w) && kiln::aligned16(x);
  if (vec) {
#pragma unroll 4
    for (unsigned int k = lane * V; k < in; k += 32 * V) {
      float wf[V];
      kiln::load16<T>(wr + k, wf);
#pragma unroll
      for (int r = 0; r < NR; ++r) {
        float xf[V];
        kiln::load16<T>(x + (size_t)r * in + k, xf);
#pragma unroll
        for (int j = 0; j < V; ++j) acc[r] = __fmaf_rn(xf[j], wf[j], acc[r]);
      }
    }
  } else {
    for (unsigned int k = lane; k < in; k += 32) {
      const float wf = kiln::to_f32(wr[k]);
#pragma unroll
      for (int r = 0; r < NR; ++r) acc[r] = __fmaf_rn(kiln::to_f32(x[(size_t)r * in + k]), wf, acc[r]);
    }
  }
  const float b = has_bias ? kiln::to_f32(bias[n]) : 0.0f;
#pragma unroll
  for (int r = 0; r < NR; ++r) {
    const float s = kiln::warp_sum(acc[r]);
    if (lane == 0) out[(size_t)r * outf + n] = kiln::from_f32<O>(has_bias ? s + b : s);
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
      xs[kk][m] = (r < rows && k < in) ? kiln::to_f32(x[(size_t)r * in + k]) : 0.0f;
      ws[kk][m] = (c < outf && k < in) ? kiln::to_f32(w[(size_t)c * in + k]) : 0.0f;
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
      const float v = has_bias ? acc[i][j] + kiln::to_f32(bias[c]) : acc[i][j];
      out[(size_t)r * outf + c] = kiln::from_f32<O>(v);
    }
  }
}

template <typename T, typename O>
__device__ void linear(const T* x, const T* w, const T* bias, O* out, unsigned int rows, unsigned int in,
                       unsigned int outf, unsigned int has_bias_u) {
  const bool has_bias = has_bias_u != 0 && bias != nullptr;
  switch (rows) {
    case 0: return;
    case 1: linear_gemv<T, O, 1>(x, w, bias, out, in, outf, has_bias); return;
    case 2: linear_gemv<T, O, 2>(x, w, bias, out, in, outf, has_bias); return;
    case 3: linear_gemv<T, O, 3>(x, w, bias, out, in, outf, has_bias); return;
    case 4: linear_gemv<T, O, 4>(x, w, bias, out, in, outf, has_bias); return;
    case 5: linear_gemv<T, O, 5>(x, w, bias, out, in, outf, has_bias); return;
    case 6: linear_gemv<T, O, 6>(x, w, bias, out, in, outf, has_bias); return;
    case 7: linear_gemv<T, O, 7>(x, w, bias, out, in, outf, has_bias); return;
    case 8: linear_gemv<T, O, 8>(x, w, bias, out, in, outf, has_bias); return;
    default: linear_tiled<T, O>(x, w, bias, out, rows, in, outf, has_bias); return;
  }
}

}  // namespace kiln

#define KILN_LINEAR_OUT(dt, T, outdt, O)                                                            \
  extern "C" __global__ void __launch_bounds__(256)                                                 \
      kiln_linear_##dt##_##outdt(const T* x, const T* weight, const T* bias, O* out, unsigned int rows, \
                                 unsigned int in_features, unsigned int out_features,               \
                                 unsigned int has_bias) {                                           \
    kiln::linear<T, O>(x, weight, bias, out, rows, in_features, out_features, has_bias);                  \
  }
KILN_LINEAR_OUT(f32, float, f32, float)
KILN_LINEAR_OUT(f16, __half, f16, __half)
KILN_LINEAR_OUT(f16, __half, f32, float)
KILN_LINEAR_OUT(bf16, __nv_bfloat16, bf16, __nv_bfloat16)
KILN_LINEAR_OUT(bf16, __nv_bfloat16, f32, float)
