// rope.cu: kiln_rope_{f32,f16,bf16}(x, positions, out, rows, heads, head_dim, rotary_dim,
//          interleaved, theta, scaling_kind, factor, low_freq_factor, high_freq_factor,
//          original_max_position, freqs)
//
// Check on a GPU: python3 scripts/kernel_check.py --only rope   (NVRTC build, no GPU:
// cargo test --test kernels_compile)
//
// Semantics (Op::Rope): x is [rows, heads * head_dim]. For row r with p = positions[r]:
// - p < 0 (padding): out row = x row, unchanged;
// - otherwise for each head and each pair i < rotary_dim / 2, the pair is (2i, 2i+1) when
//   interleaved, else (i, i + rotary_dim/2) (HF rotate_half); with
//   angle = scaled_position(p) * inv_freq(i):
//     (a, b) -> (a cos - b sin, a sin + b cos)
//   and elements at or past rotary_dim are copied.
// inv_freq and scaled_position follow `RopeSpec::inv_freq` / `RopeSpec::scaled_position`
// (src/ir/op.rs) operation by operation in f32 (scaling_kind 0 none, 1 llama3, 2 linear):
//   base = 1 / theta^((2i) / rotary_dim)
//   llama3: wavelen = 2*pi / base; wavelen < orig/high -> base; wavelen > orig/low -> base/factor;
//           else smooth = (orig/wavelen - low) / (high - low);
//                inv_freq = (1 - smooth) * base / factor + smooth * base
//   linear: scaled_position = p / factor (inv_freq = base)
//
// CPU reference:
//   for r, h, i: (a, b) = pair(x[r, h]); th = pos(p) * inv_freq(i)
//                out = (a*cos(th) - b*sin(th), a*sin(th) + b*cos(th))
//
// Agreement with the CPU: inv_freq(i) comes from `freqs` (rope.cuh RopeFreqs, by value: the CPU
// reference's own `RopeSpec::inv_freq` values, src/runtime/cuda/abi.rs by_value_slots) for the
// pairs it holds (all of them up to KILN_ROPE_TABLE pairs), else from rope_inv_freq, which follows
// the CPU's steps; the f32 steps use the *_rn intrinsics so the compiler never fuses them into an
// FMA (Rust never does); theta^e and sin/cos are evaluated in f64 and rounded to f32, which gives
// the correctly rounded f32 result that a good libm (the CPU side) returns in nearly all cases.
//
// Geometry: grid (rows, ceil(heads / H)), block 128, H = src/plan/geometry.rs rope_heads_per_block
// (8, or 2 for decode's few rows); a block takes one row and ceil(heads / gridDim.y) heads.
// Thread t takes pair i = t % (rotary_dim / 2) of heads t / (rotary_dim / 2),
// + 128 / (rotary_dim / 2), ...: the angle's sin and cos (f64) depend on the row and the
// pair only, so each thread evaluates them once for all its heads (the per-(row, head) blocks of
// earlier versions evaluated them once per head and were bound by f64 math and block dispatch:
// 82 us per launch at 2048 rows x 32 heads on the H200). Results are the same bits: each element
// is the same function of (x, p, i).
//
// kiln_rope_kv_write_{dt} (Op::RopeKvWrite, made by the fusion pass): the Rope of q and of k and
// the KvWrite of the rotated k in one launch; see rope_kv_write below. Its grid counts heads over
// q heads then kv heads: (rows, ceil((heads + kv_heads) / H)). q_stride and
// kv_stride are the elements between consecutive rows of q and of k / v: heads * head_dim and
// kv_heads * head_dim for three tensors, the packed width for one packed qkv (q, k and v are
// then column ranges of one [rows, (heads + 2 kv_heads) * head_dim] tensor).
#include "rope.cuh"

namespace kiln {

// Heads per block: as many as the grid's y extent leaves, ceil(heads / gridDim.y), so the plan
// alone chooses them (src/plan/geometry.rs rope_heads_per_block); any grid covers every head.
__device__ __forceinline__ unsigned int rope_block_heads(unsigned int total) {
  return (total + gridDim.y - 1) / gridDim.y;
}

// Pair i of one head: oh[ia], oh[ib] = the rotation of xh[ia], xh[ib].
template <typename T>
__device__ __forceinline__ void rope_pair(const T* xh, T* oh, unsigned int i, unsigned int half,
                                          unsigned int interleaved, RopeAngle a) {
  const unsigned int ia = interleaved ? 2 * i : i;
  const unsigned int ib = interleaved ? 2 * i + 1 : i + half;
  const float2 r = rope_rotate(kiln::to_f32(xh[ia]), kiln::to_f32(xh[ib]), a);
  oh[ia] = kiln::from_f32<T>(r.x);
  oh[ib] = kiln::from_f32<T>(r.y);
}

// Heads [h0, h1) of one row (the heads of one block): head h reads src(h) and writes dst(h)
// (pointers to its head_dim elements, or nullptr for a head this call skips); p < 0 copies.
// Thread t: pair t % half of heads h0 + t / half, + blockDim / half, ...; elements past
// rotary_dim are copied by all threads over (head, element).
template <typename T, typename Src, typename Dst>
__device__ __forceinline__ void rope_heads(unsigned int h0, unsigned int h1, int p, unsigned int head_dim,
                                           unsigned int rotary_dim, unsigned int interleaved, float theta,
                                           unsigned int scaling_kind, float factor, float low, float high,
                                           unsigned int orig, const RopeFreqs& freqs, Src src, Dst dst) {
  if (rotary_dim > head_dim) rotary_dim = head_dim;
  const float* table = rope_table(freqs, rotary_dim);
  const unsigned int half = rotary_dim / 2;
  const unsigned int nh = h1 - h0;
  if (p < 0 || half == 0) {
    for (unsigned int e = threadIdx.x; e < nh * head_dim; e += blockDim.x) {
      const unsigned int h = h0 + e / head_dim, c = e % head_dim;
      const T* xh = src(h);
      T* oh = dst(h);
      if (xh != nullptr && oh != nullptr) oh[c] = xh[c];
    }
    return;
  }
  const unsigned int per_pass = blockDim.x / half;  // heads per pass (0 when half > blockDim)
  if (per_pass == 0) {
    for (unsigned int h = h0; h < h1; ++h) {
      const T* xh = src(h);
      T* oh = dst(h);
      if (xh == nullptr || oh == nullptr) continue;
      for (unsigned int i = threadIdx.x; i < half; i += blockDim.x)
        rope_pair<T>(xh, oh, i, half, interleaved,
                     rope_angle_or(table, p, i, rotary_dim, theta, scaling_kind, factor, low, high, orig));
    }
  } else if (threadIdx.x < per_pass * half) {
    const unsigned int i = threadIdx.x % half;
    const RopeAngle a = rope_angle_or(table, p, i, rotary_dim, theta, scaling_kind, factor, low, high, orig);
    for (unsigned int h = h0 + threadIdx.x / half; h < h1; h += per_pass) {
      const T* xh = src(h);
      T* oh = dst(h);
      if (xh != nullptr && oh != nullptr) rope_pair<T>(xh, oh, i, half, interleaved, a);
    }
  }
  const unsigned int tail = head_dim - rotary_dim;
  for (unsigned int e = threadIdx.x; e < nh * tail; e += blockDim.x) {
    const unsigned int h = h0 + e / tail, c = rotary_dim + e % tail;
    const T* xh = src(h);
    T* oh = dst(h);
    if (xh != nullptr && oh != nullptr) oh[c] = xh[c];
  }
}

template <typename T>
__device__ void rope(const T* x, const int* positions, T* __restrict__ out,
                     unsigned int rows, unsigned int heads, unsigned int head_dim, unsigned int rotary_dim,
                     unsigned int interleaved, float theta, unsigned int scaling_kind, float factor,
                     float low, float high, unsigned int orig, const RopeFreqs& freqs) {
  const unsigned int per_block = rope_block_heads(heads);
  const unsigned int r = blockIdx.x, h0 = blockIdx.y * per_block;
  if (r >= rows || h0 >= heads) return;
  const unsigned int h1 = min(heads, h0 + per_block);
  const size_t row = (size_t)r * heads * head_dim;
  rope_heads<T>(h0, h1, positions[r], head_dim, rotary_dim, interleaved, theta, scaling_kind, factor, low, high, orig,
                freqs, [&](unsigned int h) -> const T* { return x + row + (size_t)h * head_dim; },
                [&](unsigned int h) -> T* { return out + row + (size_t)h * head_dim; });
}

// Op::RopeKvWrite: heads h < heads of row r rotate q head h into q_out (as rope); heads heads + j
// write the rotated k head j and v head j to cache row cache_base[r] + p, p = positions[r]
// (nothing when p < 0 or the row is outside the cache, as kv_write). The rotated k is rounded to
// storage once, as Rope stores it before KvWrite copies it.
template <typename T>
__device__ void rope_kv_write(const T* q, const T* k, const T* v, const int* positions, const int* cache_base,
                              T* __restrict__ q_out, T* __restrict__ k_cache, T* __restrict__ v_cache, unsigned int rows,
                              unsigned int heads, unsigned int kv_heads, unsigned int head_dim, unsigned int kv_rows,
                              unsigned int q_stride, unsigned int kv_stride, unsigned int rotary_dim, unsigned int interleaved, float theta, unsigned int scaling_kind,
                              float factor, float low, float high, unsigned int orig, const RopeFreqs& freqs) {
  const unsigned int total = heads + kv_heads;
  const unsigned int per_block = rope_block_heads(total);
  const unsigned int r = blockIdx.x, h0 = blockIdx.y * per_block;
  if (r >= rows || h0 >= total) return;
  const unsigned int h1 = min(total, h0 + per_block);
  const int p = positions[r];
  const unsigned int kv_dim = kv_heads * head_dim;
  const size_t qrow = (size_t)r * heads * head_dim, qsrc = (size_t)r * q_stride, src = (size_t)r * kv_stride;
  // The cache row, or -1: padding (p < 0) and rows outside the cache write no KV.
  long long row = -1;
  if (p >= 0) {
    row = (long long)cache_base[r] + p;
    if (row < 0 || row >= (long long)kv_rows) row = -1;
  }
  const size_t dst = row < 0 ? 0 : (size_t)row * kv_dim;
  rope_heads<T>(h0, h1, p, head_dim, rotary_dim, interleaved, theta, scaling_kind, factor, low, high, orig, freqs,
                [&](unsigned int h) -> const T* {
                  return h < heads ? q + qsrc + (size_t)h * head_dim : k + src + (size_t)(h - heads) * head_dim;
                },
                [&](unsigned int h) -> T* {
                  if (h < heads) return q_out + qrow + (size_t)h * head_dim;
                  return row < 0 ? nullptr : k_cache + dst + (size_t)(h - heads) * head_dim;
                });
  if (row < 0 || h1 <= heads) return;
  const unsigned int j0 = h0 > heads ? h0 - heads : 0, j1 = h1 - heads;
  for (unsigned int e = threadIdx.x; e < (j1 - j0) * head_dim; e += blockDim.x) {
    const size_t off = (size_t)j0 * head_dim + e;
    v_cache[dst + off] = v[src + off];
  }
}

}  // namespace kiln

#define KILN_ROPE(dt, T)                                                                             \
  extern "C" __global__ void __launch_bounds__(128) kiln_rope_##dt(                                  \
      const T* x, const int* positions, T* out, unsigned int rows, unsigned int heads,               \
      unsigned int head_dim, unsigned int rotary_dim, unsigned int interleaved, float theta,         \
      unsigned int scaling_kind, float factor, float low_freq_factor, float high_freq_factor,        \
      unsigned int original_max_position, const __grid_constant__ kiln::RopeFreqs freqs) {           \
    KILN_TRACE_BLOCK_END();                                                                          \
    kiln::wait_prior_grids();                                                                        \
    kiln::rope<T>(x, positions, out, rows, heads, head_dim, rotary_dim, interleaved, theta, scaling_kind, \
            factor, low_freq_factor, high_freq_factor, original_max_position, freqs);                \
  }
KILN_FOR_EACH_DTYPE(KILN_ROPE)

// (q, k, v, positions, cache_base, q_out, k_cache, v_cache, rows, heads, kv_heads, head_dim, kv_rows,
//  q_stride, kv_stride, rotary_dim, interleaved, theta, scaling_kind, factor, low_freq_factor,
//  high_freq_factor, original_max_position, freqs); grid (rows, ceil((heads + kv_heads) / H)),
//  block 128.
#define KILN_ROPE_KV_WRITE(dt, T)                                                                       \
  extern "C" __global__ void __launch_bounds__(128) kiln_rope_kv_write_##dt(                            \
      const T* q, const T* k, const T* v, const int* positions, const int* cache_base, T* q_out,          \
      T* k_cache, T* v_cache, unsigned int rows, unsigned int heads, unsigned int kv_heads,                \
      unsigned int head_dim, unsigned int kv_rows, unsigned int q_stride, unsigned int kv_stride,         \
      unsigned int rotary_dim, unsigned int interleaved, float theta,                                     \
      unsigned int scaling_kind, float factor, float low_freq_factor, float high_freq_factor, \
      unsigned int original_max_position, const __grid_constant__ kiln::RopeFreqs freqs) {                \
    KILN_TRACE_BLOCK_END();                                                                               \
    kiln::wait_prior_grids();                                                                             \
    kiln::rope_kv_write<T>(q, k, v, positions, cache_base, q_out, k_cache, v_cache, rows, heads, kv_heads, \
                           head_dim, kv_rows, q_stride, kv_stride, rotary_dim, interleaved, theta, scaling_kind, factor,       \
                           low_freq_factor, high_freq_factor, original_max_position, freqs);              \
  }
KILN_FOR_EACH_DTYPE(KILN_ROPE_KV_WRITE)
