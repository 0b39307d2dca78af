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
// Geometry: grid (ceil(n / (256 * 8))), block 256; 8 consecutive elements per thread
// (KILN_ELEMENTWISE_VEC), with 16-byte loads and stores when the buffers are aligned.
#include "common.cuh"

namespace kiln {

template <typename T>
__device__ void add(const T* a, const T* b, T* out, unsigned int n) {
  kiln::elementwise2<T>(a, b, out, n, [](float x, float y) { return __fadd_rn(x, y); });
}

}  // namespace kiln

#define KILN_ADD(dt, T)                                                                             \
  extern "C" __global__ void __launch_bounds__(256) kiln_add_##dt(const T* a, const T* b, T* out, \
                                                                    unsigned int n) {             \
    KILN_TRACE_BLOCK_END();                                                                       \
    kiln::wait_prior_grids();                                                                     \
    kiln::add<T>(a, b, out, n);                                                                           \
  }
KILN_FOR_EACH_DTYPE(KILN_ADD)
