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
// Geometry: grid (ceil(n / 256)), block 256; one element per thread.
#include "common.cuh"

namespace kiln {

template <typename T>
__device__ void swiglu(const T* gate, const T* up, T* __restrict__ out, unsigned int n) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = kiln::to_f32(gate[i]);
  const float silu = __fdiv_rn(g, __fadd_rn(1.0f, expf(-g)));
  out[i] = kiln::from_f32<T>(__fmul_rn(silu, kiln::to_f32(up[i])));
}

}  // namespace kiln

#define KILN_SWIGLU(dt, T)                                                                   \
  extern "C" __global__ void __launch_bounds__(256)                                          \
      kiln_swiglu_##dt(const T* gate, const T* up, T* out, unsigned int n) {                 \
    kiln::wait_prior_grids();                                                                \
    kiln::swiglu<T>(gate, up, out, n);                                                             \
  }
KILN_FOR_EACH_DTYPE(KILN_SWIGLU)
