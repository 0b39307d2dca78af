// kv_write.cu: kiln_kv_write_{f32,f16,bf16}(k, v, positions, cache_base, k_cache, v_cache, rows,
//              kv_dim, kv_rows)
//
// Check on a GPU: python3 scripts/kernel_check.py --only kv_write   (NVRTC build, no GPU:
// cargo test --test kernels_compile)
//
// Semantics (Op::KvWrite): for each token t with positions[t] >= 0, k[t, :] and v[t, :] are
// copied to row cache_base[t] + positions[t] of k_cache and v_cache ([kv_rows, kv_dim]).
// Padding tokens (positions[t] < 0) write nothing; a target row outside [0, kv_rows) is
// skipped (the planner and the scheduler never produce one; this keeps a bad step block from
// writing outside the cache).
//
// CPU reference:
//   for t: p = positions[t]; if p < 0: continue; row = cache_base[t] + p
//          k_cache[row, :] = k[t, :]; v_cache[row, :] = v[t, :]
//
// Geometry: grid (rows), block 256; one block per token.
#include "common.cuh"

namespace kiln {

template <typename T>
__device__ void kv_write(const T* k, const T* v, const int* positions,
                         const int* cache_base, T* __restrict__ k_cache, T* __restrict__ v_cache,
                         unsigned int rows, unsigned int kv_dim, unsigned int kv_rows) {
  const unsigned int t = blockIdx.x;
  if (t >= rows) return;
  const int p = positions[t];
  if (p < 0) return;
  const long long row = (long long)cache_base[t] + p;
  if (row < 0 || row >= (long long)kv_rows) return;
  const T* ks = k + (size_t)t * kv_dim;
  const T* vs = v + (size_t)t * kv_dim;
  T* kd = k_cache + (size_t)row * kv_dim;
  T* vd = v_cache + (size_t)row * kv_dim;
  for (unsigned int c = threadIdx.x; c < kv_dim; c += blockDim.x) {
    kd[c] = ks[c];
    vd[c] = vs[c];
  }
}

}  // namespace kiln

#define KILN_KV_WRITE(dt, T)                                                                          \
  extern "C" __global__ void __launch_bounds__(256)                                                   \
      kiln_kv_write_##dt(const T* k, const T* v, const int* positions, const int* cache_base,       \
                         T* k_cache, T* v_cache, unsigned int rows, unsigned int kv_dim,              \
                         unsigned int kv_rows) {                                                      \
    KILN_TRACE_BLOCK_END();                                                                           \
    kiln::wait_prior_grids();                                                                         \
    kiln::kv_write<T>(k, v, positions, cache_base, k_cache, v_cache, rows, kv_dim, kv_rows);                \
  }
KILN_FOR_EACH_DTYPE(KILN_KV_WRITE)
