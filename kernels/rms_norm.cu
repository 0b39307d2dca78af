// rms_norm.cu: kiln_rms_norm_{f32,f16,bf16}(x, weight, out, rows, dim, eps)
//
// Check on a GPU: python3 scripts/kernel_check.py --only rms_norm   (NVRTC build, no GPU:
// cargo test --test kernels_compile)
//
// Semantics (Op::RmsNorm), per row, in f32:
//   inv = 1 / sqrt(sum(x*x) / dim + eps)
//   t   = round_to_storage(x * inv)       (Hugging Face: `hidden.to(input_dtype)`)
//   out = round_to_storage(t * weight)
//
// CPU reference:
//   for r in 0..rows:
//     ss = sum_c f32(x[r,c])^2
//     inv = 1.0 / sqrt(ss / dim + eps)
//     for c: out[r,c] = T(f32(T(f32(x[r,c]) * inv)) * f32(w[c]))
//
// The sum of squares is a block reduction, so it differs from a sequential CPU sum by f32
// rounding only. Geometry: grid (rows), block 256; one block per row.
#include "common.cuh"

namespace kiln {

template <typename T>
__device__ void rms_norm(const T* x, const T* weight, T* __restrict__ out,
                         unsigned int rows, unsigned int dim, float eps) {
  __shared__ float scratch[32];
  const unsigned int r = blockIdx.x;
  if (r >= rows) return;
  const T* xr = x + (size_t)r * dim;
  T* outr = out + (size_t)r * dim;
  float ss = 0.0f;
  for (unsigned int c = threadIdx.x; c < dim; c += blockDim.x) {
    const float v = kiln::to_f32(xr[c]);
    ss = __fmaf_rn(v, v, ss);
  }
  ss = kiln::block_sum(ss, scratch);
  const float inv = 1.0f / sqrtf(ss / (float)dim + eps);
  for (unsigned int c = threadIdx.x; c < dim; c += blockDim.x) {
    const float t = kiln::round_to<T>(__fmul_rn(kiln::to_f32(xr[c]), inv));
    outr[c] = kiln::from_f32<T>(__fmul_rn(t, kiln::to_f32(weight[c])));
  }
}

}  // namespace kiln

#define KILN_RMS_NORM(dt, T)                                                                        \
  extern "C" __global__ void __launch_bounds__(256)                                                 \
      kiln_rms_norm_##dt(const T* x, const T* weight, T* out, unsigned int rows, unsigned int dim, \
                         float eps) {                                                               \
    kiln::wait_prior_grids();                                                                       \
    kiln::rms_norm<T>(x, weight, out, rows, dim, eps);                                                    \
  }
KILN_FOR_EACH_DTYPE(KILN_RMS_NORM)
