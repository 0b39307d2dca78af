#!/usr/bin/env python3
"""A model of gemv_mma_loop_rows' chunk walk (kernels/linear.cu, KILN_LINEAR_GEMV_UNROLL 1): which 32-element
chunks, and which partial tail chunk, each warp of a 16-warp block sums, in order. Checks that
kiln_fused_linear_res_k2_* (kernels/linear_fused.cu: rank 1's warp w runs the loop with x and the weight rows
shifted by 256 elements and the count taken over in - 256) walks exactly the chunks of the 512-thread block's
warp 8 + w, for every in_features from 264 to 20000 in steps of 8 (no GPU needed):

    python3 scripts/k2_walk_model.py
"""
import sys

WARPS, SHIFT = 16, 256


def walk(in_features, warp, base=0):
    full = in_features // 32
    rounds = full // WARPS
    rem = full - rounds * WARPS - warp
    nj = rounds + (0 if rem <= 0 else min(rem, 1))
    chunks = [base + warp * 32 + j * WARPS * 32 for j in range(nj)]
    rel = nj * WARPS * 32
    tail = base + warp * 32 + rel if warp * 32 + rel < in_features else None  # gemv_mma_tail's test, lane quad 0
    return chunks, tail


def main():
    bad = 0
    for in_features in range(SHIFT + 8, 20000, 8):
        for v in range(WARPS // 2, WARPS):
            if walk(in_features, v) != walk(in_features - SHIFT, v - WARPS // 2, SHIFT):
                bad += 1
                print(f"in_features {in_features}: warp {v} differs")
    print(f"k2 walk model: {bad} mismatches")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
