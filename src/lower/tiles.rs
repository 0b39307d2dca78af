//! Tile-packed GEMV weights (plan time `KILN_GEMV_TILES`: unset = where every one can be, `1` =
//! required, `0` = never).
//!
//! Every 16-bit weight a kiln GEMV-family kernel reads (linear, fused / gated / QKV linears,
//! QKV-RoPE) is replaced by a twin, `NAME@tiles`, planned with [`crate::plan::Layout::GemvTiles`]: each 16-row
//! tile's 32-column chunks in the order the tensor-core GEMV's lanes read them
//! (`kernels/common.cuh` `weight_row` + `weight_col`), so that a warp's load instruction reads
//! 256 contiguous bytes instead of 64 bytes of each of 8 rows. The sums are unchanged: the same
//! elements reach the same registers in the same order. Measured on the H200 (session 21,
//! `bench/NOTES-decode.md`): with the weight loads' L1 no-allocate hint and no L2 prefetch hint
//! (`KILN_STREAM_LOAD=2`, the tiled build's default) batch-1 decode runs 3.1% faster on the
//! Llama-3.1-8B shape, 1.5% on the 1B and 3% on the 0.5B than row-major.
//!
//! The library GEMMs of prefill (cuBLASLt, which cannot read the layout) and the embedding gather
//! keep the row-major originals, so such weights are planned twice: the plan's weights grow by
//! the GEMV weights' bytes (`KILN_GEMV_TILES=0` plans one copy; a plan that does not fit the GPU
//! says so). An original that only GEMVs read (an untied output projection) is not planned: the
//! planner plans the weights some op reads, and the twin loads from the model's tensor. f32 weights stay row-major (the kernels read them so in either build). A plan is tiled
//! as a whole or not at all: its kernels are compiled for one layout (`runtime::cuda::nvrtc`), so a
//! 16-bit GEMV weight that cannot be packed (N % 16 or K % 32 not 0) makes the default plan
//! row-major and `KILN_GEMV_TILES=1` an error naming it. The loader permutes a twin from its
//! original (`runtime::weights`) and the CPU reference indexes it (`runtime::cpu`).

use crate::ir::{DType, Op, Program, ValueClass, ValueId};
use anyhow::{bail, Result};

/// The name suffix of a tile-packed twin.
pub const SUFFIX: &str = "@tiles";

/// Whether plans get tile-packed GEMV weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Row-major weights only (`KILN_GEMV_TILES=0`).
    Off,
    /// Tile-packed when every 16-bit GEMV weight of the plan can be, else row-major (the default).
    Auto,
    /// Tile-packed, or an error naming a weight that cannot be (`KILN_GEMV_TILES=1`).
    On,
}

/// The mode `KILN_GEMV_TILES` asks for (unset: [`Mode::Auto`]).
pub fn mode() -> Result<Mode> {
    match std::env::var("KILN_GEMV_TILES").as_deref() {
        Err(_) | Ok("") => Ok(Mode::Auto),
        Ok("0") => Ok(Mode::Off),
        Ok("1") => Ok(Mode::On),
        Ok(v) => bail!("KILN_GEMV_TILES={v}: use 1 (tile-packed GEMV weights required), 0 (row-major only) or leave it unset"),
    }
}

/// Whether a weight of this type can be tile-packed: 16-bit `[N, K]` with N % 16 == 0, K % 32 == 0.
pub fn packable(dtype: DType, shape: &[usize]) -> bool {
    matches!(dtype, DType::F16 | DType::BF16) && shape.len() == 2 && shape[0].is_multiple_of(16) && shape[1].is_multiple_of(32)
}

/// Element offset of element (r, k) of a tile-packed `[N, K]` weight (`kernels/common.cuh`).
pub fn tile_index(r: usize, k: usize, cols: usize) -> usize {
    (r >> 4) * 16 * cols + ((r >> 3) & 1) * 256 + (r & 7) * 32 + (k >> 5) * 512 + ((k >> 3) & 3) * 8 + (k & 7)
}

/// The 16-bit weight operands of `op` that a kiln GEMV-family kernel reads (none for an op the
/// planner runs as a library GEMM).
fn gemv_weights<'a>(p: &Program, op: &'a mut Op) -> Vec<&'a mut ValueId> {
    if crate::plan::planner::runs_as_library_gemm(p, op) {
        return Vec::new();
    }
    let weights: Vec<&mut ValueId> = match op {
        Op::Linear { weight, .. } | Op::LinearArgmax { weight, .. } | Op::NormedLinear { weight, .. } | Op::FusedLinear { weight, .. } => {
            vec![weight]
        }
        Op::GatedLinear { gate, up, .. } => vec![gate, up],
        Op::QkvLinear { weights, .. } | Op::QkvRope { weights, .. } => weights.iter_mut().collect(),
        _ => Vec::new(),
    };
    weights.into_iter().filter(|w| matches!(p.value(**w).dtype, DType::F16 | DType::BF16)).collect()
}

/// A 16-bit GEMV weight of `p` that cannot be tile-packed, described (`name (dtype [shape])`).
pub fn unpackable(p: &Program) -> Option<String> {
    p.ops.iter().find_map(|node| {
        let mut op = node.op.clone();
        gemv_weights(p, &mut op)
            .into_iter()
            .map(|w| p.value(*w))
            .find(|v| !packable(v.dtype, &v.shape.0))
            .map(|v| format!("`{}` ({} {:?})", v.name, v.dtype, v.shape.0))
    })
}

/// `p` with every 16-bit GEMV-family weight read replaced by its tile-packed twin; an error names
/// a weight that cannot be packed (a plan's kernels read all their 16-bit GEMV weights one way).
pub fn tile_weights(p: &Program) -> Result<Program> {
    if let Some(w) = unpackable(p) {
        bail!(
            "KILN_GEMV_TILES=1: weight {w} cannot be tile-packed (a 16-bit [N, K] with N % 16 == 0 and K % 32 == 0); \
             plan with KILN_GEMV_TILES unset or 0 (row-major weights)"
        );
    }
    let mut out = p.clone();
    for i in 0..out.ops.len() {
        let mut op = out.ops[i].op.clone();
        for w in gemv_weights(p, &mut op) {
            let v = p.value(*w);
            // add_value returns the twin if an earlier op added it.
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
