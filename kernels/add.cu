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
__device__ void add(const T* a, const T* b, T* __restrict__ out, unsigned int n) {
  constexpr unsigned int V = KILN_ELEMENTWISE_VEC;
  const size_t i0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
  if (i0 >= n) return;
  if (i0 + V <= n && aligned16(a + i0) && aligned16(b + i0) && aligned16(out + i0)) {
    float x[V], y[V], o[V];
    load_vec<T>(a + i0, x);
    load_vec<T>(b + i0, y);
#pragma unroll
    for (unsigned int j = 0; j < V; ++j) o[j] = __fadd_rn(x[j], y[j]);
    store_vec<T>(out + i0, o);
    return;
  }
  for (size_t i = i0; i < n && i < i0 + V; ++i)
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
