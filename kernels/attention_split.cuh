// attention_split.cuh: the pieces of the split decode attention that attention_split.cu (split,
// merge, cluster) and attention_qkv.cu (QKV-RoPE with the attention) share, so both compute the
// same bits: the live split length and the online softmax's weight.
#pragma once
#include "common.cuh"

namespace kiln {

// The live split length (src/plan/mod.rs `live_split_len`, the same integer arithmetic).
// KILN_ATTN_SPLIT_MIN_LEN_OVERRIDE (a -D for timing sweeps only) replaces the plan's min_split_len.
__device__ __forceinline__ unsigned int live_split_len(int p, unsigned int splits, unsigned int split_len,
                                                       unsigned int min_split_len) {
#ifdef KILN_ATTN_SPLIT_MIN_LEN_OVERRIDE
  min_split_len = KILN_ATTN_SPLIT_MIN_LEN_OVERRIDE;
#endif
  const unsigned int keys = (unsigned int)max(p, 0) + 1u;
  const unsigned int even = (keys + max(splits, 1u) - 1u) / max(splits, 1u);
  const unsigned int q = (even + 15u) / 16u * 16u;
  return max(min(max(q, min_split_len), split_len), 1u);
}

// exp(x - m) with exp(-inf) = 0 and nothing to weigh when m = -inf.
__device__ __forceinline__ float weight_of(float x, float m) { return x == -inf() ? 0.0f : __expf(x - m); }

}  // namespace kiln
