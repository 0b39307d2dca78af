// rms_norm.cu: kiln_rms_norm_{f32,f16,bf16}(x, weight, out, rows, dim, eps)
//              kiln_add_rms_norm_{f32,f16,bf16}(a, b, weight, sum, out, rows, dim, eps)
//
// Check on a GPU: python3 scripts/kernel_check.py --only rms_norm   (NVRTC build, no GPU:
// cargo test --test kernels_compile)
//
// Semantics (Op::RmsNorm), per row, in f32:
//   inv = 1 / sqrt(sum(x*x) / dim + eps)
//   t   = round_to_storage(x * inv)       (Hugging Face: `hidden.to(input_dtype)`)
//   out = round_to_storage(t * weight)
//
// Op::AddRmsNorm (made by the fusion pass): sum = round_to_storage(a + b) as kiln_add, then the
// above with x = sum.
//
// CPU reference:
//   for r in 0..rows:
//     ss = sum_c f32(x[r,c])^2
//     inv = 1.0 / sqrt(ss / dim + eps)
//     for c: out[r,c] = T(f32(T(f32(x[r,c]) * inv)) * f32(w[c]))
//
// The sum of squares is a block reduction, so it differs from a sequential CPU sum by f32
// rounding only. Geometry: grid (rows), block 256; one block per row. When the row is whole
// 16-byte vectors (dim % (16 / sizeof(T)) == 0, aligned) of at most 4 per thread, each thread
// loads its vectors once, keeps them in registers for the second pass and stores 16 bytes at a
// time (the scalar loop read the row twice with 2-byte loads: ~11 us per 128 x 4096 launch on
// the H200); otherwise the scalar loop.
#include "common.cuh"

namespace kiln {

// Vectors of 16 bytes per thread the register path keeps (dim <= 4 x 256 x 8 = 8192 for 16-bit
// dtypes, 4096 for f32).
#define KILN_RMS_NORM_VECS 4

// One row per block. ADD (kiln_add_rms_norm, Op::AddRmsNorm): the row is first the sum of x
// and b rounded to T (as kiln_add stores it), written to `sum`, and the norm reads that rounded
// sum; without ADD, `b` and `sum` are unused. Each thread reads back only elements it wrote
// itself, so `sum` or `out` may alias the inputs.
template <typename T, bool ADD>
__device__ void rms_norm_row(const T* x, const T* b, const T* weight, T* sum, T* out, unsigned int rows, unsigned int dim,
                             float eps) {
  __shared__ float scratch[32];
  const unsigned int r = blockIdx.x;
  if (r >= rows) return;
  const T* xr = x + (size_t)r * dim;
  const T* br = ADD ? b + (size_t)r * dim : nullptr;
  T* sr = ADD ? sum + (size_t)r * dim : nullptr;
  T* outr = out + (size_t)r * dim;
  constexpr unsigned int N = Vec16<T>::N;
  const unsigned int nv = dim / N;
  const bool vec = dim % N == 0 && nv <= KILN_RMS_NORM_VECS * blockDim.x && aligned16(xr) && aligned16(outr) &&
                   aligned16(weight) && (!ADD || (aligned16(br) && aligned16(sr)));
  if (vec) {
    float v[KILN_RMS_NORM_VECS][N];
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < KILN_RMS_NORM_VECS; ++j) {
      const unsigned int i = threadIdx.x + j * blockDim.x;
      if (i < nv) {
        load16<T>(xr + (size_t)i * N, v[j]);
        if constexpr (ADD) {
          float w[N];
          load16<T>(br + (size_t)i * N, w);
#pragma unroll
          for (unsigned int e = 0; e < N; ++e) v[j][e] = kiln::round_to<T>(__fadd_rn(v[j][e], w[e]));
          store16<T>(sr + (size_t)i * N, v[j]);
        }
#pragma unroll
        for (unsigned int e = 0; e < N; ++e) ss = __fmaf_rn(v[j][e], v[j][e], ss);
      }
    }
    ss = kiln::block_sum(ss, scratch);
    const float inv = 1.0f / sqrtf(ss / (float)dim + eps);
#pragma unroll
    for (int j = 0; j < KILN_RMS_NORM_VECS; ++j) {
      const unsigned int i = threadIdx.x + j * blockDim.x;
      if (i < nv) {
        float w[N], o[N];
        load16<T>(weight + (size_t)i * N, w);
#pragma unroll
        for (unsigned int e = 0; e < N; ++e) o[e] = __fmul_rn(kiln::round_to<T>(__fmul_rn(v[j][e], inv)), w[e]);
        store16<T>(outr + (size_t)i * N, o);
      }
    }
    return;
  }
  float ss = 0.0f;
  for (unsigned int c = threadIdx.x; c < dim; c += blockDim.x) {
    float v = kiln::to_f32(xr[c]);
    if constexpr (ADD) {
      const T s = kiln::from_f32<T>(__fadd_rn(v, kiln::to_f32(br[c])));
      sr[c] = s;
      v = kiln::to_f32(s);
    }
    ss = __fmaf_rn(v, v, ss);
  }
  ss = kiln::block_sum(ss, scratch);
  const float inv = 1.0f / sqrtf(ss / (float)dim + eps);
  for (unsigned int c = threadIdx.x; c < dim; c += blockDim.x) {
    const float v = kiln::to_f32(ADD ? sr[c] : xr[c]);
    const float t = kiln::round_to<T>(__fmul_rn(v, inv));
    outr[c] = kiln::from_f32<T>(__fmul_rn(t, kiln::to_f32(weight[c])));
  }
}

}  // namespace kiln

#define KILN_RMS_NORM(dt, T)                                                                        \
  extern "C" __global__ void __launch_bounds__(256)                                                 \
      kiln_rms_norm_##dt(const T* x, const T* weight, T* out, unsigned int rows, unsigned int dim, \
                         float eps) {                                                               \
    KILN_TRACE_BLOCK_END();                                                                         \
    KILN_ABLATED(4096);                                                                             \
    kiln::wait_prior_grids();                                                                       \
    kiln::rms_norm_row<T, false>(x, nullptr, weight, nullptr, out, rows, dim, eps);                          \
  }                                                                                                 \
  extern "C" __global__ void __launch_bounds__(256)                                                 \
      kiln_rms_norm_release_##dt(const T* x, const T* weight, T* out, unsigned int rows,            \
                                 unsigned int dim, float eps) {                                     \
    KILN_TRACE_BLOCK_END();                                                                         \
    KILN_ABLATED(4096);                                                                             \
    kiln::allow_dependents();                                                                       \
    kiln::wait_prior_grids();                                                                       \
    kiln::rms_norm_row<T, false>(x, nullptr, weight, nullptr, out, rows, dim, eps);                 \
  }
// kiln_rms_norm_release_*: as kiln_gather_release_* (gather.cu), for the decode output norm, whose
// dependent is the logits GEMV (2.75 us between the norm's end and the logits' release in the 0.5B's
// block trace, bench/NOTES-decode.md session 58).
KILN_FOR_EACH_DTYPE(KILN_RMS_NORM)

// (a, b, weight, sum, out, rows, dim, eps): Op::AddRmsNorm, grid (rows), block 256.
#define KILN_ADD_RMS_NORM(dt, T)                                                                                    \
  extern "C" __global__ void __launch_bounds__(256) kiln_add_rms_norm_##dt(                                         \
      const T* a, const T* b, const T* weight, T* sum, T* out, unsigned int rows, unsigned int dim, float eps) {     \
    KILN_TRACE_BLOCK_END();                                                                                         \
    kiln::wait_prior_grids();                                                                                       \
    kiln::rms_norm_row<T, true>(a, b, weight, sum, out, rows, dim, eps);                                            \
  }
KILN_FOR_EACH_DTYPE(KILN_ADD_RMS_NORM)
