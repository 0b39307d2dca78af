//! Tile-packed GEMV weights (an experiment, branch `wip/gemv-tiles`; plan time `KILN_GEMV_TILES=1`).
//!
//! Every weight a kiln GEMV-family kernel reads (linear, fused / gated / QKV linears, QKV-RoPE) is
//! replaced by a twin, `NAME@tiles`, stored tile-packed: each 16-row tile's 32-column chunks in the
//! order the tensor-core GEMV's lanes read them (`kernels/common.cuh` `weight_row` +
//! `weight_col`), so that a warp's load instruction reads 256 contiguous bytes instead of 64 bytes
//! of each of 8 rows (`bench/NOTES-decode.md`, session 20: 6-13% faster per GEMV in a probe).
//! The sums are unchanged: the same elements reach the same registers. The library GEMMs of
//! prefill (cuBLASLt, which cannot read the layout) and the embedding gather keep the row-major
//! originals, so a weight both read can be planned twice (the plan's memory says how much).
//! The loader permutes a twin from its original (`runtime::weights`), the CPU reference indexes
//! it (`runtime::cpu`), and the CUDA runtime compiles the kernels with `KILN_GEMV_TILES=1` when a
//! plan has twins.

use crate::ir::{DType, Op, Phase, Program, Qkv, ValueClass, ValueId};
use anyhow::{bail, Result};

/// The name suffix of a tile-packed twin.
pub const SUFFIX: &str = "@tiles";

/// Whether plans are built with tile-packed GEMV weights (`KILN_GEMV_TILES=1` at plan time).
pub fn enabled() -> bool {
    std::env::var("KILN_GEMV_TILES").is_ok_and(|v| v == "1")
}

/// Whether a weight of this type can be tile-packed: 16-bit `[N, K]` with N % 16 == 0, K % 32 == 0.
pub fn packable(dtype: DType, shape: &[usize]) -> bool {
    matches!(dtype, DType::F16 | DType::BF16) && shape.len() == 2 && shape[0].is_multiple_of(16) && shape[1].is_multiple_of(32)
}

/// Element offset of element (r, k) of a tile-packed `[N, K]` weight (`kernels/common.cuh`).
pub fn tile_index(r: usize, k: usize, cols: usize) -> usize {
    (r >> 4) * 16 * cols + ((r >> 3) & 1) * 256 + (r & 7) * 32 + (k >> 5) * 512 + ((k >> 3) & 3) * 8 + (k & 7)
}

/// `p` with every GEMV-family weight read replaced by its tile-packed twin; an error names a
/// weight that cannot be packed (the kernels of a process read all their GEMV weights one way).
pub fn tile_weights(p: &Program) -> Result<Program> {
    let mut out = p.clone();
    let gemv_rows = crate::plan::geometry::LINEAR_GEMV_MAX_ROWS as usize;
    for i in 0..out.ops.len() {
        let mut op = out.ops[i].op.clone();
        let rows = |x: &ValueId| out.value(*x).shape.0.first().copied().unwrap_or(0);
        // Prefill linears over more rows than the GEMV takes are library GEMMs (`planner`).
        let library = p.phase == Phase::Prefill
            && match &op {
                Op::Linear { x, .. } | Op::QkvLinear { x, norm: None, outs: Qkv::Packed(_), .. } => rows(x) > gemv_rows,
                _ => false,
            };
        if library {
            continue;
        }
        let weights: Vec<&mut ValueId> = match &mut op {
            Op::Linear { weight, .. } | Op::FusedLinear { weight, .. } => vec![weight],
            Op::GatedLinear { gate, up, .. } => vec![gate, up],
            Op::QkvLinear { weights, .. } | Op::QkvRope { weights, .. } => weights.iter_mut().collect(),
            _ => continue,
        };
        for w in weights {
            let v = out.value(*w).clone();
            if !packable(v.dtype, &v.shape.0) {
                bail!(
                    "KILN_GEMV_TILES=1: weight `{}` ({} {:?}) cannot be tile-packed (a 16-bit [N, K] with N % 16 == 0 and K % 32 == 0); \
                     plan without KILN_GEMV_TILES",
                    v.name,
                    v.dtype,
                    v.shape.0
                );
            }
            *w = out.add_value(format!("{}{SUFFIX}", v.name), v.dtype, &v.shape.0, ValueClass::Weight);
        }
        out.ops[i].op = op;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tile_index_is_a_permutation_that_keeps_a_lane_quads_eight_elements_together() {
        let (n, k) = (48, 96);
        let mut seen = vec![false; n * k];
        for r in 0..n {
            for c in 0..k {
                let i = tile_index(r, c, k);
                assert!(!seen[i], "({r}, {c}) collides");
                seen[i] = true;
                if c % 8 != 0 {
                    assert_eq!(i, tile_index(r, c - 1, k) + 1);
                }
            }
        }
        // Lane (g, t) of chunk 0: rows g (0..8) at k = 8t are 256 contiguous elements.
        let lanes: Vec<usize> = (0..32).map(|l| tile_index(l / 4, 8 * (l % 4), k)).collect();
        assert_eq!(lanes, (0..32).map(|l| 8 * l).collect::<Vec<_>>());
        assert_eq!(tile_index(8, 0, k), 256);
        assert_eq!(tile_index(0, 32, k), 512);
        assert_eq!(tile_index(16, 0, k), 16 * k);
    }
}
