//! Launch geometry of each kernel: grid, block and dynamic shared memory, decided at plan
//! time from the kernel's parameters. Must agree with the CUDA sources in `kernels/`: each
//! constant here names the `#define` (or the `__launch_bounds__`) of the kernel it mirrors, and
//! each kernel file's header comment states the geometry it expects.
//!
//! Large dimensions (rows, elements, output features) go on `grid.x` (up to 2^31 - 1 blocks);
//! `grid.y` (at most 65535) carries only heads or row tiles. No kernel uses dynamic shared
//! memory; static shared memory stays under the 48 KB that needs no opt-in.

use super::{BufArg, Kernel};

pub struct Geometry {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_bytes: u32,
}

/// `linear.cu`: rows up to this many take the GEMV path (`KILN_LINEAR_GEMV_MAX_ROWS`).
pub const LINEAR_GEMV_MAX_ROWS: u32 = 8;
/// `linear.cu`: output features per GEMV block, one per warp (`KILN_LINEAR_GEMV_WARPS`).
pub const LINEAR_GEMV_FEATURES_PER_BLOCK: u32 = 8;
/// `linear.cu`: outputs per tiled block along rows and features (`KILN_LINEAR_TILE`).
pub const LINEAR_TILE: u32 = 64;
/// `sample.cu`: threads of the one block per row (`KILN_SAMPLE_THREADS`).
pub const SAMPLE_THREADS: u32 = 1024;
/// `attention.cu`: threads per (row, head) block, 8 warps (`KILN_ATTN_WARPS` x 32).
pub const ATTENTION_THREADS: u32 = 256;
/// Largest head_dim `attention.cu` supports (`KILN_ATTN_MAX_HEAD_DIM`).
pub const ATTENTION_MAX_HEAD_DIM: u32 = 256;
/// Threads of the elementwise kernels (`swiglu.cu`, `add.cu`), one element each.
pub const ELEMENTWISE_THREADS: u32 = 256;

pub fn launch_geometry(kernel: &Kernel, _bufs: &[BufArg]) -> Geometry {
    let g = |x: u32, y: u32, threads: u32| Geometry { grid: [x.max(1), y.max(1), 1], block: [threads, 1, 1], shared_bytes: 0 };
    match *kernel {
        // One block per row.
        Kernel::Gather { rows, .. } => g(rows, 1, 256),
        Kernel::RmsNorm { rows, .. } => g(rows, 1, 256),
        // One block per (row, head).
        Kernel::HeadRmsNorm { rows, heads, .. } => g(rows, heads, 128),
        Kernel::Linear { rows, out_features, .. } => {
            if rows <= LINEAR_GEMV_MAX_ROWS {
                g(out_features.div_ceil(LINEAR_GEMV_FEATURES_PER_BLOCK), 1, 256)
            } else {
                g(out_features.div_ceil(LINEAR_TILE), rows.div_ceil(LINEAR_TILE), 256)
            }
        }
        Kernel::Rope { rows, heads, .. } => g(rows, heads, 128),
        // One block per token.
        Kernel::KvWrite { rows, .. } => g(rows, 1, 256),
        Kernel::Attention { rows, heads, .. } => g(rows, heads, ATTENTION_THREADS),
        Kernel::AttentionSplit { rows, heads, splits, .. } => g(rows * heads, splits, ATTENTION_THREADS),
        Kernel::AttentionMerge { rows, heads, .. } => g(rows, heads, ATTENTION_THREADS),
        // One block; one thread per row.
        Kernel::Advance { rows, .. } => g(1, 1, rows.div_ceil(32) * 32),
        Kernel::SwiGlu { n } | Kernel::Add { n } => g(n.div_ceil(ELEMENTWISE_THREADS), 1, ELEMENTWISE_THREADS),
        Kernel::Sample { rows, .. } => g(rows, 1, SAMPLE_THREADS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{RopeScaling, RopeSpec, RopeStyle};

    fn kernels() -> Vec<Kernel> {
        let rope = RopeSpec { style: RopeStyle::HalfSplit, theta: 1e6, rotary_dim: 128, scaling: RopeScaling::None };
        let mut v = vec![
            Kernel::Gather { rows: 7, dim: 1024, table_rows: 151936 },
            Kernel::RmsNorm { rows: 7, dim: 1024, eps: 1e-6 },
            Kernel::HeadRmsNorm { rows: 7, heads: 16, head_dim: 128, eps: 1e-6 },
            Kernel::Rope { rows: 7, heads: 16, head_dim: 128, rope },
            Kernel::KvWrite { rows: 7, kv_dim: 1024, kv_rows: 4096 },
            Kernel::Attention { rows: 7, heads: 16, kv_heads: 8, head_dim: 128, scale: 0.088, kv_rows: 4096 },
            Kernel::SwiGlu { n: 7 * 3072 },
            Kernel::Add { n: 7 * 1024 },
            Kernel::Sample { rows: 7, vocab: 151936 },
        ];
        for rows in [1, 8, 9, 4096] {
            v.push(Kernel::Linear { rows, in_features: 1024, out_features: 151936, bias: false });
        }
        v
    }

    #[test]
    fn blocks_are_whole_warps_and_grids_fit_the_hardware_limits() {
        for k in kernels() {
            let g = launch_geometry(&k, &[]);
            let threads = g.block[0] * g.block[1] * g.block[2];
            assert!(threads.is_multiple_of(32) && threads <= 1024, "{k:?}: {threads} threads");
            assert!(g.grid[0] >= 1 && g.grid[1] >= 1 && g.grid[2] >= 1, "{k:?}: empty grid");
            assert!(g.grid[0] < 1 << 31 && g.grid[1] <= 65535 && g.grid[2] <= 65535, "{k:?}: grid {:?}", g.grid);
            assert!(g.shared_bytes <= 48 * 1024, "{k:?}: needs an opt-in for {} bytes", g.shared_bytes);
        }
    }

    #[test]
    fn linear_switches_from_gemv_to_tiles_after_eight_rows() {
        let geometry = |rows| launch_geometry(&Kernel::Linear { rows, in_features: 64, out_features: 100, bias: true }, &[]).grid;
        assert_eq!(geometry(1), [13, 1, 1]);
        assert_eq!(geometry(8), [13, 1, 1]);
        assert_eq!(geometry(9), [2, 1, 1]);
        assert_eq!(geometry(130), [2, 3, 1]);
    }

    #[test]
    fn every_covered_element_has_a_thread() {
        // Elementwise: grid * block covers n.
        for n in [1u32, 255, 256, 257, 1 << 20] {
            let g = launch_geometry(&Kernel::Add { n }, &[]);
            assert!(g.grid[0] * g.block[0] >= n);
        }
        // Attention: one block per (row, head).
        let g = launch_geometry(&Kernel::Attention { rows: 5, heads: 3, kv_heads: 1, head_dim: 64, scale: 1.0, kv_rows: 9 }, &[]);
        assert_eq!((g.grid, g.block), ([5, 3, 1], [ATTENTION_THREADS, 1, 1]));
    }
}
