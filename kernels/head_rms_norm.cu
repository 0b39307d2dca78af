// head_rms_norm.cu: kiln_head_rms_norm_{f32,f16,bf16}(x, weight, out, rows, heads, head_dim, eps)
//
// Check on a GPU: python3 scripts/kernel_check.py --only head_rms_norm   (NVRTC build, no GPU:
// cargo test --test kernels_compile)
//
// Semantics (Op::HeadRmsNorm, Qwen3's Q/K norm): x is [rows, heads * head_dim]; each head of
// each row is RMS-normalized on its own, exactly as rms_norm.cu with dim = head_dim, and scaled
// by the shared weight [head_dim]:
//   inv = 1 / sqrt(sum(x_h*x_h) / head_dim + eps); t = round(x_h * inv); out_h = round(t * w)
//
// CPU reference:
//   for r, h: xh = x[r, h*hd .. (h+1)*hd]; rms_norm(xh, weight, eps) -> out[r, h*hd ..]
//
// Geometry: grid (rows, heads), block 128; one block per (row, head).
#include "common.cuh"

namespace kiln {

template <typename T>
__device__ void head_rms_norm(const T* x, const T* weight, T* __restrict__ out,
                              unsigned int rows, unsigned int heads, unsigned int head_dim, float eps) {
  __shared__ float scratch[32];
  const unsigned int r = blockIdx.x, h = blockIdx.y;
  if (r >= rows || h >= heads) return;
  const size_t base = ((size_t)r * heads + h) * head_dim;
  const T* xh = x + base;
  T* outh = out + base;
  float ss = 0.0f;
  for (unsigned int c = threadIdx.x; c < head_dim; c += blockDim.x) {
    const float v = kiln::to_f32(xh[c]);
    ss = __fmaf_rn(v, v, ss);
  }
  ss = kiln::block_sum(ss, scratch);
  const float inv = 1.0f / sqrtf(ss / (float)head_dim + eps);
  for (unsigned int c = threadIdx.x; c < head_dim; c += blockDim.x) {
    const float t = kiln::round_to<T>(__fmul_rn(kiln::to_f32(xh[c]), inv));
    outh[c] = kiln::from_f32<T>(__fmul_rn(t, kiln::to_f32(weight[c])));
  }
}

}  // namespace kiln

#define KILN_HEAD_RMS_NORM(dt, T)                                                                  \
  extern "C" __global__ void __launch_bounds__(128)                                                \
      kiln_head_rms_norm_##dt(const T* x, const T* weight, T* out, unsigned int rows,             \
                              unsigned int heads, unsigned int head_dim, float eps) {             \
    KILN_TRACE_BLOCK_END();                                                                       \
    kiln::wait_prior_grids();                                                                     \
    kiln::head_rms_norm<T>(x, weight, out, rows, heads, head_dim, eps);                                  \
  }
KILN_FOR_EACH_DTYPE(KILN_HEAD_RMS_NORM)
