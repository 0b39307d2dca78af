// rope.cuh: the rotary angle shared by rope.cu (Op::Rope, Op::RopeKvWrite) and linear_fused.cu
// (Op::QkvRope's epilogue), so that every kernel that rotates computes the same bits. See rope.cu
// for the semantics and the agreement with the CPU reference.
#pragma once
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

// The rotation of pair i at position p (p >= 0): sin and cos of pos(p) * inv_freq(i).
struct RopeAngle {
  float s, c;
};
// The same with inv_freq(i) given (RopeFreqs).
__device__ __forceinline__ RopeAngle rope_angle_at(int p, float inv_freq, unsigned int scaling_kind, float factor) {
  const float pos = scaling_kind == 2 ? __fdiv_rn((float)p, factor) : (float)p;
  const float angle = __fmul_rn(pos, inv_freq);
  double sd, cd;
  sincos((double)angle, &sd, &cd);
  return RopeAngle{(float)sd, (float)cd};
}
__device__ __forceinline__ RopeAngle rope_angle(int p, unsigned int i, unsigned int rotary_dim, float theta,
                                                unsigned int scaling_kind, float factor, float low, float high,
                                                unsigned int orig) {
  return rope_angle_at(p, rope_inv_freq(i, rotary_dim, theta, scaling_kind, factor, low, high, orig), scaling_kind,
                       factor);
}

// The inverse frequencies of a launch's rotary pairs, computed on the host (RopeSpec::inv_freq, the
// CPU reference's own values) and passed by value as a `__grid_constant__` kernel parameter
// (src/runtime/cuda/abi.rs `by_value_slots`) to every rotating kernel (qkv_rope, rope,
// rope_kv_write): v[i] for i < n; n = 0 (more pairs than KILN_ROPE_TABLE) leaves them to
// rope_inv_freq. The kernel reads one word from the constant bank instead of an f64 pow and up to
// eight IEEE divisions, a ~1 us dependent chain that every rotating block of Op::QkvRope ran
// before its first weight loads (session 40's block trace).
#define KILN_ROPE_TABLE 64
struct RopeFreqs {
  unsigned int n;
  float v[KILN_ROPE_TABLE];
};
// A launch's table of inverse frequencies: freqs.v when it holds every pair of the rotary width,
// else null (the kernel computes them).
__device__ __forceinline__ const float* rope_table(const RopeFreqs& freqs, unsigned int rotary_dim) {
  return 2 * freqs.n >= rotary_dim ? freqs.v : nullptr;
}
// The rotation of pair i at position p: from `table` (rope_table), or computed where it is null.
__device__ __forceinline__ RopeAngle rope_angle_or(const float* table, int p, unsigned int i, unsigned int rotary_dim,
                                                   float theta, unsigned int scaling_kind, float factor, float low,
                                                   float high, unsigned int orig) {
  return table != nullptr ? rope_angle_at(p, table[i], scaling_kind, factor)
                          : rope_angle(p, i, rotary_dim, theta, scaling_kind, factor, low, high, orig);
}

// The rotated pair (a, b) -> (a cos - b sin, a sin + b cos), f32 without FMA contraction, as
// rope_pair stores it (before rounding to storage).
__device__ __forceinline__ float2 rope_rotate(float x0, float x1, RopeAngle a) {
  return make_float2(__fsub_rn(__fmul_rn(x0, a.c), __fmul_rn(x1, a.s)), __fadd_rn(__fmul_rn(x0, a.s), __fmul_rn(x1, a.c)));
}

}  // namespace kiln
