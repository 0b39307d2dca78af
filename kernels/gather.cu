// gather.cu: kiln_gather_{f32,f16,bf16}(table, indices, out, rows, dim, table_rows)
//
// Check on a GPU: python3 scripts/kernel_check.py --only gather   (NVRTC build, no GPU:
// cargo test --test kernels_compile)
//
// Semantics (Op::Gather): out[r, :] = table[indices[r], :]; an index outside
// [0, table_rows) gives a zero row. Used for the token embedding and for picking the rows whose
// logits are wanted (prefill).
//
// CPU reference:
//   for r in 0..rows:
//     i = indices[r]
//     for c in 0..dim: out[r*dim + c] = (0 <= i < table_rows) ? table[i*dim + c] : 0
//
// Geometry (src/plan/geometry.rs): grid (rows), block 256; one block copies one row.
#include "common.cuh"

namespace kiln {

template <typename T>
__device__ void gather(const T* table, const int* indices, T* __restrict__ out,
                       unsigned int rows, unsigned int dim, unsigned int table_rows) {
  const unsigned int r = blockIdx.x;
  if (r >= rows) return;
  const int i = indices[r];
  T* dst = out + (size_t)r * dim;
  if (i < 0 || (unsigned int)i >= table_rows) {
    for (unsigned int c = threadIdx.x; c < dim; c += blockDim.x) dst[c] = kiln::zero<T>();
    return;
  }
  const T* src = table + (size_t)i * dim;
  // 16-byte vectors where the row allows (every 16-bit table of a model kiln plans; coherent loads,
  // load16_act: in prefill the table is an activation written by an earlier launch): a thread's
  // loads are all issued before its stores, so the row costs one memory round trip, not one per
  // element the thread copies (the element loop's loads could not pass its stores: `out` may alias
  // `table` for all the compiler knows). The Llama-3.2-1B's token embedding (2048 bf16): 4.38 ->
  // 2.27 us per decode step in the block trace (session 33, bench/results/2026-12-03-h200-decode-ab-s33.md).
  if ((dim * sizeof(T)) % 16 == 0 && aligned16(src) && aligned16(dst)) {
    const uint4* s4 = reinterpret_cast<const uint4*>(src);
    uint4* d4 = reinterpret_cast<uint4*>(dst);
    const unsigned int n = (unsigned int)(dim * sizeof(T) / 16);
    constexpr unsigned int V = 4;
    for (unsigned int c0 = threadIdx.x; c0 < n; c0 += V * blockDim.x) {
      uint4 v[V];
#pragma unroll
      for (unsigned int u = 0; u < V; ++u) {
        const unsigned int c = c0 + u * blockDim.x;
        v[u] = c < n ? load16_act(s4 + c) : make_uint4(0u, 0u, 0u, 0u);
      }
#pragma unroll
      for (unsigned int u = 0; u < V; ++u) {
        const unsigned int c = c0 + u * blockDim.x;
        if (c < n) d4[c] = v[u];
      }
    }
    return;
  }
  for (unsigned int c = threadIdx.x; c < dim; c += blockDim.x) dst[c] = src[c];
}

}  // namespace kiln

// kiln_gather_release_*: the same copy, but the block lets the grids that depend on it launch before
// it waits for the grids before it (`Kernel::Gather { release }`, src/plan/planner.rs
// plan_release_early): a one-block grid that releases only after its wait leaves its dependent's
// launch and its blocks' work before their own wait on the critical path (2.3 us between the
// gather's end and layer 0's release in the 0.5B's block trace, bench/NOTES-decode.md session 58).
// The planner then no longer counts the gather as a barrier for early reads (plan::early_reads_safe).
#define KILN_GATHER(dt, T)                                                                            \
  extern "C" __global__ void __launch_bounds__(256)                                                   \
      kiln_gather_##dt(const T* table, const int* indices, T* out, unsigned int rows, unsigned int dim, \
                       unsigned int table_rows) {                                                     \
    KILN_TRACE_BLOCK_END();                                                                           \
    KILN_ABLATED(2048);                                                                               \
    kiln::wait_prior_grids();                                                                         \
    kiln::gather<T>(table, indices, out, rows, dim, table_rows);                                            \
  }                                                                                                   \
  extern "C" __global__ void __launch_bounds__(256)                                                   \
      kiln_gather_release_##dt(const T* table, const int* indices, T* out, unsigned int rows,         \
                               unsigned int dim, unsigned int table_rows) {                           \
    KILN_TRACE_BLOCK_END();                                                                           \
    KILN_ABLATED(2048);                                                                               \
    kiln::allow_dependents();                                                                         \
    kiln::wait_prior_grids();                                                                         \
    kiln::gather<T>(table, indices, out, rows, dim, table_rows);                                      \
  }
KILN_FOR_EACH_DTYPE(KILN_GATHER)
