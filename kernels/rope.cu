// rope.cu: kiln_rope_{f32,f16,bf16}(x, positions, out, rows, heads, head_dim, rotary_dim,
//          interleaved, theta, scaling_kind, factor, low_freq_factor, high_freq_factor,
//          original_max_position)
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
// Agreement with the CPU: the f32 steps use the *_rn intrinsics so the compiler never fuses
// them into an FMA (Rust never does); theta^e and sin/cos are evaluated in f64 and rounded to
// f32, which gives the correctly rounded f32 result that a good libm (the CPU side) returns
// in nearly all cases.
//
// Geometry: grid (rows, heads), block 128; one block per (row, head), threads over pairs.
//
// kiln_rope_kv_write_{dt} (Op::RopeKvWrite, made by the fusion pass): the Rope of q and of k and
// the KvWrite of the rotated k in one launch; see rope_kv_write below.
#include "common.cuh"

namespace kiln {

__device__ __forceinline__ float rope_inv_freq(unsigned int i, unsigned int rotary_dim, float theta,
                                               unsigned int scaling_kind, float factor, float low, float high,
                                               unsigned int orig) {
  const float d = (float)rotary_dim;
  const float e = __fdiv_rn((float)(2 * i), d);
  const float pw = (float)pow((double)theta, (double)e);
  const float base = __fdiv_rn(1.0f, pw);
  if (scaling_kind != 1) return base;
  const float old = (float)orig;
  const float low_freq_wavelen = __fdiv_rn(old, low);
  const float high_freq_wavelen = __fdiv_rn(old, high);
  const float two_pi = 6.28318548202514648f;  // 2.0f * std::f32::consts::PI, exact
  const float wavelen = __fdiv_rn(two_pi, base);
  if (wavelen < high_freq_wavelen) return base;
  if (wavelen > low_freq_wavelen) return __fdiv_rn(base, factor);
  const float smooth = __fdiv_rn(__fsub_rn(__fdiv_rn(old, wavelen), low), __fsub_rn(high, low));
  return __fadd_rn(__fdiv_rn(__fmul_rn(__fsub_rn(1.0f, smooth), base), factor), __fmul_rn(smooth, base));
}

// One head: oh = rope(xh) at position p (a copy when p < 0); the block's threads over pairs.
template <typename T>
__device__ void rope_head(const T* xh, T* oh, int p, unsigned int head_dim, unsigned int rotary_dim,
                          unsigned int interleaved, float theta, unsigned int scaling_kind, float factor,
                          float low, float high, unsigned int orig) {
  if (rotary_dim > head_dim) rotary_dim = head_dim;
  if (p < 0) {
    for (unsigned int c = threadIdx.x; c < head_dim; c += blockDim.x) oh[c] = xh[c];
    return;
  }
  const float pos = scaling_kind == 2 ? __fdiv_rn((float)p, factor) : (float)p;
  const unsigned int half = rotary_dim / 2;
  for (unsigned int i = threadIdx.x; i < half; i += blockDim.x) {
    const float inv_freq = rope_inv_freq(i, rotary_dim, theta, scaling_kind, factor, low, high, orig);
    const float angle = __fmul_rn(pos, inv_freq);
    double sd, cd;
    sincos((double)angle, &sd, &cd);
    const float s = (float)sd, c = (float)cd;
    const unsigned int ia = interleaved ? 2 * i : i;
    const unsigned int ib = interleaved ? 2 * i + 1 : i + half;
    const float a = kiln::to_f32(xh[ia]), b = kiln::to_f32(xh[ib]);
    oh[ia] = kiln::from_f32<T>(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)));
    oh[ib] = kiln::from_f32<T>(__fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c)));
  }
  for (unsigned int c = rotary_dim + threadIdx.x; c < head_dim; c += blockDim.x) oh[c] = xh[c];
}

template <typename T>
__device__ void rope(const T* x, const int* positions, T* __restrict__ out,
                     unsigned int rows, unsigned int heads, unsigned int head_dim, unsigned int rotary_dim,
                     unsigned int interleaved, float theta, unsigned int scaling_kind, float factor,
                     float low, float high, unsigned int orig) {
  const unsigned int r = blockIdx.x, h = blockIdx.y;
  if (r >= rows || h >= heads) return;
  const size_t base = ((size_t)r * heads + h) * head_dim;
  rope_head<T>(x + base, out + base, positions[r], head_dim, rotary_dim, interleaved, theta, scaling_kind, factor, low,
               high, orig);
}

// Op::RopeKvWrite: block (r, h) with h < heads rotates q head h into q_out (as rope); block
// (r, heads + j) writes the rotated k head j and v head j to cache row cache_base[r] + p, p =
// positions[r] (nothing when p < 0 or the row is outside the cache, as kv_write). The rotated k
// is rounded to storage once, as Rope stores it before KvWrite copies it.
template <typename T>
__device__ void rope_kv_write(const T* q, const T* k, const T* v, const int* positions, const int* cache_base,
                              T* __restrict__ q_out, T* __restrict__ k_cache, T* __restrict__ v_cache, unsigned int rows,
                              unsigned int heads, unsigned int kv_heads, unsigned int head_dim, unsigned int kv_rows,
                              unsigned int rotary_dim, unsigned int interleaved, float theta, unsigned int scaling_kind,
                              float factor, float low, float high, unsigned int orig) {
  const unsigned int r = blockIdx.x, h = blockIdx.y;
  if (r >= rows || h >= heads + kv_heads) return;
  const int p = positions[r];
  if (h < heads) {
    const size_t base = ((size_t)r * heads + h) * head_dim;
    rope_head<T>(q + base, q_out + base, p, head_dim, rotary_dim, interleaved, theta, scaling_kind, factor, low, high, orig);
    return;
  }
  if (p < 0) return;
  const long long row = (long long)cache_base[r] + p;
  if (row < 0 || row >= (long long)kv_rows) return;
  const unsigned int j = h - heads, kv_dim = kv_heads * head_dim;
  const size_t src = (size_t)r * kv_dim + (size_t)j * head_dim, dst = (size_t)row * kv_dim + (size_t)j * head_dim;
  rope_head<T>(k + src, k_cache + dst, p, head_dim, rotary_dim, interleaved, theta, scaling_kind, factor, low, high, orig);
  for (unsigned int c = threadIdx.x; c < head_dim; c += blockDim.x) v_cache[dst + c] = v[src + c];
}

}  // namespace kiln

#define KILN_ROPE(dt, T)                                                                             \
  extern "C" __global__ void __launch_bounds__(128) kiln_rope_##dt(                                  \
      const T* x, const int* positions, T* out, unsigned int rows, unsigned int heads,               \
      unsigned int head_dim, unsigned int rotary_dim, unsigned int interleaved, float theta,         \
      unsigned int scaling_kind, float factor, float low_freq_factor, float high_freq_factor,        \
      unsigned int original_max_position) {                                                          \
    kiln::wait_prior_grids();                                                                        \
    kiln::rope<T>(x, positions, out, rows, heads, head_dim, rotary_dim, interleaved, theta, scaling_kind, \
            factor, low_freq_factor, high_freq_factor, original_max_position);                       \
  }
KILN_FOR_EACH_DTYPE(KILN_ROPE)

// (q, k, v, positions, cache_base, q_out, k_cache, v_cache, rows, heads, kv_heads, head_dim, kv_rows,
//  rotary_dim, interleaved, theta, scaling_kind, factor, low_freq_factor, high_freq_factor,
//  original_max_position); grid (rows, heads + kv_heads), block 128.
#define KILN_ROPE_KV_WRITE(dt, T)                                                                       \
  extern "C" __global__ void __launch_bounds__(128) kiln_rope_kv_write_##dt(                            \
      const T* q, const T* k, const T* v, const int* positions, const int* cache_base, T* q_out,          \
      T* k_cache, T* v_cache, unsigned int rows, unsigned int heads, unsigned int kv_heads,                \
      unsigned int head_dim, unsigned int kv_rows, unsigned int rotary_dim, unsigned int interleaved,     \
      float theta, unsigned int scaling_kind, float factor, float low_freq_factor, float high_freq_factor, \
      unsigned int original_max_position) {                                                               \
    kiln::wait_prior_grids();                                                                             \
    kiln::rope_kv_write<T>(q, k, v, positions, cache_base, q_out, k_cache, v_cache, rows, heads, kv_heads, \
                           head_dim, kv_rows, rotary_dim, interleaved, theta, scaling_kind, factor,       \
                           low_freq_factor, high_freq_factor, original_max_position);                     \
  }
KILN_FOR_EACH_DTYPE(KILN_ROPE_KV_WRITE)
