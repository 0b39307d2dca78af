// add.cu: kiln_add_{f32,f16,bf16}(a, b, out, n)
//
// Check on a GPU: python3 scripts/kernel_check.py --only add   (NVRTC build, no GPU:
// cargo test --test kernels_compile)
//
// Semantics (Op::Add), elementwise: out = a + b, added in f32 and rounded once to storage.
//
// CPU reference:
//   for i in 0..n: out[i] = T(f32(a[i]) + f32(b[i]))
//
// Geometry: grid (ceil(n / 256)), block 256; one element per thread.
#include "common.cuh"

namespace kiln {

template <typename T>
__device__ void add(const T* a, const T* b, T* __restrict__ out, unsigned int n) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = kiln::from_f32<T>(__fadd_rn(kiln::to_f32(a[i]), kiln::to_f32(b[i])));
}

}  // namespace kiln

#define KILN_ADD(dt, T)                                                                             \
  extern "C" __global__ void __launch_bounds__(256) kiln_add_##dt(const T* a, const T* b, T* out, \
                                                                    unsigned int n) {             \
    kiln::wait_prior_grids();                                                                     \
    kiln::add<T>(a, b, out, n);                                                                           \
  }
KILN_FOR_EACH_DTYPE(KILN_ADD)
