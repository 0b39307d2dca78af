// swiglu.cu: kiln_swiglu_{f32,f16,bf16}(gate, up, out, n)
//
// Check on a GPU: python3 scripts/kernel_check.py --only swiglu   (NVRTC build, no GPU:
// cargo test --test kernels_compile)
//
// Semantics (Op::SwiGlu), elementwise in f32: out = silu(g) * u = g / (1 + exp(-g)) * u.
//
// CPU reference:
//   for i in 0..n: g = f32(gate[i]); out[i] = T(g / (1 + exp(-g)) * f32(up[i]))
//
// Geometry: grid (ceil(n / (256 * 8))), block 256; 8 consecutive elements per thread
// (KILN_ELEMENTWISE_VEC), with 16-byte loads and stores when the buffers are aligned.
#include "common.cuh"

namespace kiln {

__device__ __forceinline__ float swiglu1(float g, float u) {
  const float silu = __fdiv_rn(g, __fadd_rn(1.0f, expf(-g)));
  return __fmul_rn(silu, u);
}

template <typename T>
__device__ void swiglu(const T* gate, const T* up, T* out, unsigned int n) {
  kiln::elementwise2<T>(gate, up, out, n, [](float g, float u) { return swiglu1(g, u); });
}

}  // namespace kiln

#define KILN_SWIGLU(dt, T)                                                                   \
  extern "C" __global__ void __launch_bounds__(256)                                          \
      kiln_swiglu_##dt(const T* gate, const T* up, T* out, unsigned int n) {                 \
    KILN_TRACE_BLOCK_END();                                                                  \
    kiln::wait_prior_grids();                                                                \
    kiln::swiglu<T>(gate, up, out, n);                                                             \
  }
KILN_FOR_EACH_DTYPE(KILN_SWIGLU)
