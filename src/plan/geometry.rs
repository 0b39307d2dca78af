//! Launch geometry of each kernel: grid, block and dynamic shared memory, decided at plan
//! time from the kernel's parameters. Must agree with the CUDA sources in `kernels/`: each
//! constant here names the `#define` (or the `__launch_bounds__`) of the kernel it mirrors, and
//! each kernel file's header comment states the geometry it expects.
//!
//! Large dimensions (rows, elements, output features) go on `grid.x` (up to 2^31 - 1 blocks);
//! `grid.y` (at most 65535) carries only heads or row tiles. Static shared memory stays under
//! the 48 KB that needs no opt-in; only the prefill attention uses dynamic shared memory (up to
//! 80 KiB, within the H100/H200's 227 KiB per block; the runtime opts the function in at load).
//! A library launch (`Kernel::Gemm`) has no geometry: all zeros.

use super::{BufArg, Kernel};

pub struct Geometry {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_bytes: u32,
    /// Blocks per SM the kernel variant is compiled for (`Launch::occupancy`); 0: the default.
    pub occupancy: u32,
}

/// The dense GEMV variant (`_o3` symbols, `__launch_bounds__(256, 3)`: at most 80 registers):
/// three 256-thread blocks per SM instead of two.
pub const GEMV_DENSE_BLOCKS_PER_SM: u32 = 3;
/// Blocks per SM of the default GEMV (`__launch_bounds__(512)`: up to 128 registers, two
/// 256-thread blocks per SM).
pub const GEMV_BLOCKS_PER_SM: u32 = 2;

/// A 256-thread GEMV grid of at least this many waves of the default variant takes the dense
/// one whatever the fill ([`gemv_occupancy`]).
pub const GEMV_DENSE_MIN_WAVES: u32 = 3;

/// Fraction of the launched block slots a grid of `blocks` fills: blocks / (waves x slots).
fn wave_fill(blocks: u32, slots: u32) -> f64 {
    blocks as f64 / (blocks.div_ceil(slots) * slots) as f64
}

/// The decode GEMV grid over `features` outputs (linear, fused, gated, QKV, `qkv_rope`): blocks
/// of [`LINEAR_GEMV_FEATURES`], 512 threads when they cannot fill the GPU and their 16-row tile
/// is larger than [`GEMV_WIDE_MIN_TILE_BYTES`], else 256, and the variant those take
/// ([`gemv_occupancy`]). Returns (blocks, threads, occupancy); a walking launch then has fewer
/// blocks ([`gemv_walk_blocks`]).
pub fn gemv_grid(features: u32, in_features: u32) -> (u32, u32, u32) {
    let blocks = features.div_ceil(LINEAR_GEMV_FEATURES);
    let tile = LINEAR_GEMV_FEATURES as u64 * in_features as u64 * 2;
    // A/B timing knob at plan time: `KILN_GEMV_NARROW=<KiB>` instead of the 64 KiB threshold
    // (`0`: every narrow grid wide, the rule before session 31).
    let min_tile = super::knob("KILN_GEMV_NARROW").parse::<u64>().map_or(GEMV_WIDE_MIN_TILE_BYTES, |kib| kib * 1024);
    let wide = blocks < LINEAR_GEMV_WIDE_BELOW_BLOCKS && tile > min_tile;
    let threads = if wide { LINEAR_GEMV_WIDE_THREADS } else { LINEAR_GEMV_THREADS };
    (blocks, threads, gemv_occupancy(blocks, threads))
}

/// A narrow GEMV grid (fewer blocks than SMs) takes 512-thread blocks only when its 16-row
/// tile (16 x in_features x 2 bytes) is larger than this. A 256-thread block already keeps up to
/// 32 KiB of a tile in flight (8 warps x 4 KiB ring), so a small tile gains little from 16 warps,
/// while a 512-thread block at ~105 registers leaves no room on its SM for a block of the next
/// launch, whose PDL weight prefetch then waits for it to end (session 30's block trace: most
/// blocks of each decode launch were not resident before their release). Measured on the H200
/// (2026-12-03, bench/results/2026-12-03-h200-decode-ab-s31.md, two rounds, batch 1, context
/// 128): 64 KiB (256 threads for the Qwen2.5-0.5B's QKV and o, tiles of 28 KiB, and the
/// Llama-3.2-1B's o, 64 KiB; 512 for the down projections, 152 and 256 KiB) took the 0.5B from
/// 1691.2 to 1803.6-1808.5 tok/s (+6.8%) and the 1B from 1244.8 to 1251.5-1252.4; the 8B has no
/// narrow grid. 256 threads for every narrow grid (session 30) slowed the 1B's down by 3 us per
/// layer (-4.3%).
pub const GEMV_WIDE_MIN_TILE_BYTES: u64 = 64 * 1024;

/// Which GEMV variant a 256-thread grid of `blocks` takes: the dense one (3 per SM) when its
/// waves are fuller by more than 5%, or when the default's grid runs [`GEMV_DENSE_MIN_WAVES`]
/// waves or more; else the default (0). Measured on the H200 (2026-11-30,
/// bench/NOTES-decode.md): capping every GEMV at 80 registers took the 0.5B shape from 942 to
/// 1021 tok/s (its gate/up GEMV is 304 blocks: 1.15 waves of 264 slots, 0.77 of 396) and the 1B
/// shape from 967 to 906 (gate/up 512 blocks: 1.94 waves of 264, 1.29 of 396); this rule keeps
/// each launch on the variant whose waves are full. Over many waves the fill matters less than
/// the dense variant's 1.5x bytes in flight per SM: the Llama-3.1-8B gate/up (896 blocks, 3.4
/// waves) took 229.6 -> 232.8 tok/s on it (session 11).
pub fn gemv_occupancy(blocks: u32, threads: u32) -> u32 {
    if threads != LINEAR_GEMV_THREADS {
        return 0;
    }
    let sms = LINEAR_GEMV_WIDE_BELOW_BLOCKS;
    let (default, dense) = (wave_fill(blocks, sms * GEMV_BLOCKS_PER_SM), wave_fill(blocks, sms * GEMV_DENSE_BLOCKS_PER_SM));
    // A/B timing knob at plan time: `KILN_GEMV_DENSE=always` / `never` instead of the wave rule,
    // or a block count N: the dense variant also for every grid of at least N blocks (the dense
    // variants without spills hold 1.5x the bytes in flight per SM, which the wave rule does not
    // weigh and which may matter more than wave fill for grids of many waves; bench/NOTES-decode.md).
    let min_blocks = match super::knob("KILN_GEMV_DENSE") {
        "always" => return GEMV_DENSE_BLOCKS_PER_SM,
        "never" => return 0,
        n => n.parse::<u32>().unwrap_or(u32::MAX),
    };
    let many_waves = blocks >= GEMV_DENSE_MIN_WAVES * sms * GEMV_BLOCKS_PER_SM;
    if dense > default + 0.05 || many_waves || blocks >= min_blocks {
        GEMV_DENSE_BLOCKS_PER_SM
    } else {
        0
    }
}

/// A/B timing knob at plan time, `KILN_GEMV_WIDE`: `gated` runs every `gated_linear` GEMV in
/// 512-thread blocks of the default variant (16 warps over the same 16 features: twice the
/// bytes in flight per block, one block per SM), a block count N every linear-family GEMV grid
/// of at least N blocks; unset, the rule of [`gemv_grid`]. Aimed at the wave tail of the
/// Llama-3.1-8B gate/up (896 blocks: 2.26 waves of the dense variant's 396 slots, whose last
/// 104 blocks run one per SM). Measured slower on every shape (2026-12-01,
/// bench/results/2026-12-01-h200-decode-ab-s13.md, call B: 8B 234.8 -> 225.5 tok/s gated, 215.7
/// all): the dense variant's bytes in flight per SM matter more than its last wave.
fn gemv_wide_knob(kernel: &Kernel, blocks: u32) -> bool {
    match super::knob("KILN_GEMV_WIDE") {
        "" => false,
        "gated" => matches!(kernel, Kernel::GatedLinear { .. }),
        n => n.parse::<u32>().is_ok_and(|min| blocks >= min),
    }
}

/// Walking GEMV blocks (`kernels/linear.cu` `gemv_mma_walk`): a 256-thread 16-bit GEMV grid of more
/// blocks than one wave of its variant's slots (132 SMs x 2, or x 3 dense) launches one wave of
/// blocks, each walking the tiles blockIdx.x, + gridDim.x, ... with one weight ring: the same bits
/// per output. Which launches walk is the kernels' `KILN_GEMV_WALK` bits ([`gemv_walk_define`]):
/// 1 the default `gated_linear` variant, 2 `linear`, 4 other `fused_linear`s, 8 the dense
/// `gated_linear_o3`. Default 1: on the H200 (2026-12-01, bench/results/2026-12-01-h200-decode-ab-s19.md,
/// same-call A/B) walking the Llama-3.2-1B gate/up (512 tiles, 1.94 waves of 264) took batch 1 from
/// 1192 to 1210 tok/s (+1.5%); walking the dense Llama-3.1-8B gate/up (896 tiles, 2.26 waves of 396)
/// lost 1.6% and the logits 0.4-2%. Plan-time knob `KILN_GEMV_WALK`: `0` no walking (and the
/// kernels as before it), `all` every bit, `gated` bits 1 and 8, `linear` bits 1 and 2.
pub fn gemv_walk_define() -> u32 {
    match super::knob("KILN_GEMV_WALK") {
        "" => 1,
        "0" => 0,
        "gated" => 1 | 8,
        "linear" => 1 | 2,
        _ => 15,
    }
}

/// The `KILN_GEMV_WALK` bit of a launch's kernel and variant; 0 for kernels that never walk.
pub fn gemv_walk_bit(kernel: &Kernel, occupancy: u32) -> u32 {
    match kernel {
        Kernel::GatedLinear { .. } if occupancy == GEMV_DENSE_BLOCKS_PER_SM => 8,
        Kernel::GatedLinear { .. } => 1,
        Kernel::Linear { .. } => 2,
        Kernel::FusedLinear { .. } => 4,
        _ => 0,
    }
}

/// The 16-feature tiles of a linear-family GEMV launch (its grid without walking); None for
/// other kernels and for the tiled path (more than [`LINEAR_GEMV_MAX_ROWS`] rows).
pub fn gemv_tiles(kernel: &Kernel) -> Option<u32> {
    match *kernel {
        Kernel::Linear { rows, out_features, .. }
        | Kernel::FusedLinear { rows, out_features, .. }
        | Kernel::GatedLinear { rows, out_features, .. }
            if rows <= LINEAR_GEMV_MAX_ROWS =>
        {
            Some(out_features.div_ceil(LINEAR_GEMV_FEATURES))
        }
        _ => None,
    }
}

/// Whether a `linear`, `fused_linear` or `gated_linear` launch over `bufs` takes the tensor-core
/// GEMV path (at most [`LINEAR_GEMV_MAX_ROWS`] rows is [`gemv_tiles`]' test): 16-bit storage and
/// in % 8 == 0 (the planner's offsets are aligned). False for other kernels.
pub fn gemv_tensor_cores(kernel: &Kernel, bufs: &[BufArg]) -> bool {
    let in_features = match *kernel {
        Kernel::Linear { in_features, .. } | Kernel::FusedLinear { in_features, .. } | Kernel::GatedLinear { in_features, .. } => {
            in_features
        }
        _ => return false,
    };
    bufs.first().is_some_and(|b| matches!(b.dtype, crate::ir::DType::F16 | crate::ir::DType::BF16)) && in_features % 8 == 0
}

fn gemv_walk_blocks(kernel: &Kernel, bufs: &[BufArg], blocks: u32, threads: u32, occupancy: u32) -> u32 {
    // The tensor-core path is the only one that walks.
    if gemv_walk_define() & gemv_walk_bit(kernel, occupancy) == 0 || !gemv_tensor_cores(kernel, bufs) || threads != LINEAR_GEMV_THREADS {
        return blocks;
    }
    let per_sm = if occupancy == GEMV_DENSE_BLOCKS_PER_SM { GEMV_DENSE_BLOCKS_PER_SM } else { GEMV_BLOCKS_PER_SM };
    blocks.min(LINEAR_GEMV_WIDE_BELOW_BLOCKS * per_sm)
}

/// `linear_fused.cu`: bytes of shared memory for a block's normed rows (`KILN_FUSED_NORM_STAGE`);
/// rows x in_features 16-bit values up to this are staged.
pub const FUSED_NORM_STAGE_BYTES: u32 = 16384;

/// Whether a fused GEMV's normed rows are staged in shared memory: rows x in_features x 2 bytes
/// <= [`FUSED_NORM_STAGE_BYTES`].
pub fn norm_rows_staged(rows: u32, in_features: u32) -> bool {
    rows as u64 * in_features as u64 * 2 <= FUSED_NORM_STAGE_BYTES as u64
}

/// Whether the dense variant of this linear-family kernel has its tensor-core path for the
/// launch: always for `linear` and `qkv_linear`; for `gated_linear` only with a norm whose rows
/// are staged ([`norm_rows_staged`]), the one path its `_o3` keeps; for `fused_linear` with a
/// norm, staged (`_o3`) or not (`_o3u`, [`dense_variant_suffix`]), one path each (more paths in
/// one kernel made the compiler spill in the main loop; other inputs take the SIMT path there).
/// The plan checker holds launches to it.
pub fn dense_variant_covers(kernel: &Kernel) -> bool {
    match *kernel {
        Kernel::GatedLinear { rows, in_features, norm, .. } => norm && norm_rows_staged(rows, in_features),
        // No dense variant carries an output norm (`kiln_fused_linear_outnorm_*`).
        Kernel::FusedLinear { norm, out_norm, .. } => norm && !out_norm,
        _ => true,
    }
}

/// The symbol suffix of a launch's dense variant: `_o3`, or `_o3u` for a `fused_linear` whose
/// norm's rows are not staged.
pub fn dense_variant_suffix(kernel: &Kernel) -> &'static str {
    match *kernel {
        Kernel::FusedLinear { rows, in_features, norm: true, .. } if !norm_rows_staged(rows, in_features) => "_o3u",
        _ => "_o3",
    }
}

/// `linear.cu`: rows up to this many take the GEMV path (`KILN_LINEAR_GEMV_MAX_ROWS`).
pub const LINEAR_GEMV_MAX_ROWS: u32 = 8;
/// Output features per block of the one-warp-per-feature GEMVs (8 warps, as
/// `KILN_LINEAR_GEMV_WARPS` in `linear.cu`); `linear` itself uses [`LINEAR_GEMV_FEATURES`].
pub const LINEAR_GEMV_FEATURES_PER_BLOCK: u32 = 8;
/// `linear.cu`: output features per GEMV block (`KILN_LINEAR_GEMV_FEATURES`): the M = 16 side
/// of the tensor-core tile, whose k the block's 8 warps split (2 features per warp on the SIMT
/// path). 16 rather than more so that narrow layers still give enough blocks: a 2048-wide
/// output is 128 blocks.
pub const LINEAR_GEMV_FEATURES: u32 = 16;
/// `linear.cu`: threads of a GEMV block (`KILN_LINEAR_GEMV_WARPS` x 32).
pub const LINEAR_GEMV_THREADS: u32 = 256;
/// `linear.cu`: threads of a GEMV block when the grid has fewer blocks than
/// [`LINEAR_GEMV_WIDE_BELOW_BLOCKS`] and its tile is over [`GEMV_WIDE_MIN_TILE_BYTES`]
/// (`KILN_LINEAR_GEMV_MAX_WARPS` x 32): a narrow layer cannot fill the GPU with blocks, so each
/// block keeps twice the bytes in flight.
pub const LINEAR_GEMV_WIDE_THREADS: u32 = 512;
/// Multiprocessors of the GPUs kiln plans for (H100 / H200 SXM: 132).
pub const LINEAR_GEMV_WIDE_BELOW_BLOCKS: u32 = 132;
/// `rope.cu`: heads per block of `rope` and `rope_kv_write` over many rows (prefill): each
/// thread evaluates its pair's angle once for all of them.
pub const ROPE_HEADS: u32 = 8;
/// Heads per block over at most [`ROPE_FEW_ROWS`] rows (decode): one pass of a 128-thread block
/// at head_dim 128, so a layer's RoPE (and KV write) is spread over 4x the blocks and each
/// block's chain of dependent loads and stores is one pass long, not four.
pub const ROPE_HEADS_FEW_ROWS: u32 = 2;
/// The largest row count that takes [`ROPE_HEADS_FEW_ROWS`] (the decode batch buckets).
pub const ROPE_FEW_ROWS: u32 = 8;

/// Heads per block of `rope` / `rope_kv_write` at `rows` rows; the kernels take
/// ceil(heads / gridDim.y) heads per block, so this choice lives in the plan alone.
pub fn rope_heads_per_block(rows: u32) -> u32 {
    if rows <= ROPE_FEW_ROWS {
        ROPE_HEADS_FEW_ROWS
    } else {
        ROPE_HEADS
    }
}
/// `swiglu.cu`, `add.cu`: elements per thread (`KILN_ELEMENTWISE_VEC`, one 16-byte load of a
/// 16-bit dtype).
pub const ELEMENTWISE_VEC: u32 = 8;
/// `linear.cu`: outputs per tiled block along rows and features (`KILN_LINEAR_TILE`).
pub const LINEAR_TILE: u32 = 64;
/// `sample.cu`: threads per block (`KILN_SAMPLE_THREADS`).
pub const SAMPLE_THREADS: u32 = 1024;
/// `sample.cu`: blocks per row (`KILN_SAMPLE_CLUSTER`), one thread-block cluster that shares the
/// argmax over the row on sm_90+ (before sm_90 the first block of each row works alone).
pub const SAMPLE_BLOCKS_PER_ROW: u32 = 8;
/// `attention.cu`: threads per (row, head) block, 8 warps (`KILN_ATTN_WARPS` x 32).
pub const ATTENTION_THREADS: u32 = 256;
/// Largest head_dim `attention.cu` supports (`KILN_ATTN_MAX_HEAD_DIM`).
pub const ATTENTION_MAX_HEAD_DIM: u32 = 256;
/// `attention_split.cu`: threads of a split block, 8 warps (`KILN_ATTN_SPLIT_THREADS`).
pub const ATTENTION_SPLIT_THREADS: u32 = 256;
/// `attention_split.cu`: q heads one split block applies its K/V rows to
/// (`KILN_ATTN_SPLIT_MAX_GROUP`); larger GQA groups take several head chunks.
pub const ATTENTION_SPLIT_MAX_GROUP: u32 = 4;
/// Largest head_dim `attention_split.cu` supports (`KILN_ATTN_SPLIT_MAX_HEAD_DIM`).
pub const ATTENTION_SPLIT_MAX_HEAD_DIM: u32 = 256;
/// `attention_split.cu`: threads of a merge block (`KILN_ATTN_MERGE_THREADS`).
pub const ATTENTION_MERGE_THREADS: u32 = 256;
/// Threads of the elementwise kernels (`swiglu.cu`, `add.cu`), one element each.
pub const ELEMENTWISE_THREADS: u32 = 256;

/// `attention_prefill.cu`: warps per block (`KILN_FA_WARPS`); each warp owns 16 query rows.
pub const ATTENTION_PREFILL_WARPS: u32 = 4;
/// `attention_prefill.cu`: query rows per block (`KILN_FA_BM` = 16 x warps).
pub const ATTENTION_PREFILL_ROWS: u32 = 16 * ATTENTION_PREFILL_WARPS;
/// `attention_prefill.cu`: cache rows per K/V block (`KILN_FA_BN`).
pub const ATTENTION_PREFILL_KEYS: u32 = 64;

/// `attention_prefill.cu` (flash-attention prefill; head_dim 64 or 128, f16 / bf16): grid
/// (heads, ceil(rows / 64)) (`KILN_FA_HEADS_ON_X`: the heaviest tile of every head is dispatched
/// first; rows up to 65535 x 64), block 128 threads, and dynamic shared memory for the Q tile and two
/// K and two V buffers: (BM + 4 BN) x head_dim x 2 bytes, 40 KiB at head_dim 64 and 80 KiB at 128
/// (above 48 KiB: the runtime raises the function's limit at load). Other head_dims need none:
/// the kernel only writes zeros for them. Returns (grid, block, dynamic shared bytes).
pub fn attention_prefill_geometry(rows: u32, heads: u32, head_dim: u32) -> ([u32; 3], [u32; 3], u32) {
    let shared = match head_dim {
        64 | 128 => (ATTENTION_PREFILL_ROWS + 4 * ATTENTION_PREFILL_KEYS) * head_dim * 2,
        _ => 0,
    };
    ([heads.max(1), rows.div_ceil(ATTENTION_PREFILL_ROWS).max(1), 1], [32 * ATTENTION_PREFILL_WARPS, 1, 1], shared)
}

/// Blocks of one `attention_cluster` launch: a cluster of `ATTENTION_CLUSTER_SPLITS` (along y)
/// per (row, kv head, chunk of `chunk_heads` query heads) (along x).
pub fn attention_cluster_grid(rows: u32, heads: u32, kv_heads: u32, chunk_heads: u32) -> [u32; 2] {
    [rows * kv_heads * (heads / kv_heads.max(1)).div_ceil(chunk_heads.max(1)), crate::plan::ATTENTION_CLUSTER_SPLITS]
}

/// Head chunks of one KV head's GQA group in `attention_split.cu`: ceil(group / 4).
pub fn attention_head_chunks(heads: u32, kv_heads: u32) -> u32 {
    (heads / kv_heads.max(1)).div_ceil(ATTENTION_SPLIT_MAX_GROUP).max(1)
}

/// `qkv_attention` (kernels/attention_qkv.cu): 256 threads per block, one block per SM (its
/// launch bounds), one cluster of `ATTENTION_CLUSTER_SPLITS` blocks per query head.
pub const QKV_ATTENTION_THREADS: u32 = 256;
/// The head dimension `qkv_attention` is compiled for (8 lanes of 8 elements per key; the 8
/// blocks of a cluster each take 8 q, 8 k and 8 v rows of the head).
pub const QKV_ATTENTION_HEAD_DIM: u32 = 64;
/// Most input features of `qkv_attention`: each lane holds 4 16-byte chunks of x and of every row
/// its warp computes (in registers before the wait).
pub const QKV_ATTENTION_MAX_IN: u32 = 1024;
/// Most query heads of `qkv_attention`: one cluster of 8 blocks per head, all resident in one wave
/// even at one block per SM (14 clusters of 8 single-block-per-SM blocks ran at once on the H200:
/// the 0.5B shape's cluster attention in session 16, `ATTENTION_CLUSTER_WAVE`; the kernel's
/// launch bounds allow two per SM, `KILN_QKV_ATTN_MIN_BLOCKS`, to leave room for the o projection).
pub const QKV_ATTENTION_MAX_HEADS: u32 = 14;

/// Whether `Op::QkvAttention` has a kernel for the shape (`lower::fuse` rewrite 11 makes it only
/// then): one row, bf16 everywhere, head_dim 64 rotated whole in halves (`RopeStyle::HalfSplit`),
/// at most [`QKV_ATTENTION_MAX_IN`] inputs (a multiple of 8) and [`QKV_ATTENTION_MAX_HEADS`] heads.
pub fn qkv_attention_fits(rows: usize, in_features: usize, heads: usize, head_dim: u32, rope: &crate::ir::RopeSpec, bf16: bool) -> bool {
    rows == 1
        && bf16
        && head_dim == QKV_ATTENTION_HEAD_DIM
        && rope.rotary_dim == head_dim
        && rope.style == crate::ir::RopeStyle::HalfSplit
        && in_features.is_multiple_of(8)
        && in_features <= QKV_ATTENTION_MAX_IN as usize
        && (1..=QKV_ATTENTION_MAX_HEADS as usize).contains(&heads)
}

/// Blocks per thread-block cluster of a launch whose kernel is compiled with `__cluster_dims__`
/// (sm_90+): the sampler's blocks of one row, the cluster attention's splits, a [`k2_launch`]'s
/// two blocks per tile. None for every other launch.
pub fn cluster_blocks(l: &crate::plan::Launch) -> Option<u32> {
    match l.kernel {
        Kernel::Sample { .. } | Kernel::SampleAdvance { .. } => Some(SAMPLE_BLOCKS_PER_ROW),
        Kernel::AttentionCluster { .. } | Kernel::QkvAttention { .. } => Some(crate::plan::ATTENTION_CLUSTER_SPLITS),
        _ if k2_launch(l) => Some(2),
        _ => None,
    }
}

/// Whether a `fused_linear` launch's kernel and operands are those of the one path
/// `kiln_fused_linear_res_*` compiles (linear_fused.cu): a decode o / down GEMV (1 to
/// [`LINEAR_GEMV_MAX_ROWS`] rows) on tensor cores, no norm, a residual, no out-norm, input and output
/// of one 16-bit dtype. The runtime's entry choice (`abi::launch_symbol`) and [`gemv_k2`] share it.
pub fn res_gemv(kernel: &Kernel, bufs: &[BufArg]) -> bool {
    let Kernel::FusedLinear { rows, norm: false, residual: true, out_norm: false, .. } = *kernel else {
        return false;
    };
    let same_dtype = bufs.first().zip(bufs.last()).is_some_and(|(x, o)| x.dtype == o.dtype);
    (1..=LINEAR_GEMV_MAX_ROWS).contains(&rows) && gemv_tensor_cores(kernel, bufs) && same_dtype
}

/// Blocks a [`gemv_k2`] grid may have: one per SM of an H100 / H200.
pub const GEMV_K2_MAX_BLOCKS: u32 = 132;

/// A [`res_gemv`] that can be split over a cluster of two blocks per tile: no L2 prefetch (its span
/// is per block) and more than 256 inputs (rank 1 starts at element 256).
fn k2_fits(kernel: &Kernel, bufs: &[BufArg]) -> bool {
    matches!(*kernel, Kernel::FusedLinear { l2_prefetch: 0, in_features, .. } if in_features > 256) && res_gemv(kernel, bufs)
}

/// Whether a one-row-GEMV `fused_linear` launch is planned split over a cluster of two 256-thread
/// blocks per tile (`kiln_fused_linear_res_k2_*`, linear_fused.cu; the runtime calls it for a
/// [`k2_launch`]): on by default (the plan-time knob `KILN_GEMV_K2=0` off; session 56's H100 A/B on the
/// 0.5B was a tie at a ring of 4, `bench/results/2026-12-05-decode-ab-s56.md`; session 57's at the
/// kernel's ring of 8 +2.35%, `bench/results/2026-12-06-decode-ab-s57.md`) and a [`res_gemv`] with no
/// L2 prefetch and more than 256 inputs planned at 512 threads whose doubled grid is at most
/// [`GEMV_K2_MAX_BLOCKS`]. The same bits as the 512-thread block; on the reference shapes only the
/// Qwen2.5-0.5B's down (56 -> 112 blocks) and the Qwen3-0.6B's.
pub fn gemv_k2(kernel: &Kernel, bufs: &[BufArg], blocks: u32, threads: u32) -> bool {
    super::knob("KILN_GEMV_K2") != "0" && threads == LINEAR_GEMV_WIDE_THREADS && 2 * blocks <= GEMV_K2_MAX_BLOCKS && k2_fits(kernel, bufs)
}

/// Whether a launch is planned as [`gemv_k2`] plans it: 256 threads, the default variant and a grid
/// of twice [`gemv_tiles`], which no other GEMV plan has (a walked grid has fewer blocks than tiles).
pub fn k2_launch(l: &crate::plan::Launch) -> bool {
    l.occupancy == 0
        && l.block[0] == LINEAR_GEMV_THREADS
        && gemv_tiles(&l.kernel).is_some_and(|tiles| l.grid[0] == 2 * tiles)
        && k2_fits(&l.kernel, &l.bufs)
}

pub fn launch_geometry(kernel: &Kernel, bufs: &[BufArg]) -> Geometry {
    let g =
        |x: u32, y: u32, threads: u32| Geometry { grid: [x.max(1), y.max(1), 1], block: [threads, 1, 1], shared_bytes: 0, occupancy: 0 };
    match *kernel {
        // A library call: the library picks its own grid at load (all zeros in the plan).
        Kernel::Gemm { .. } => Geometry { grid: [0; 3], block: [0; 3], shared_bytes: 0, occupancy: 0 },
        Kernel::AttentionPrefill { rows, heads, head_dim, .. } => {
            let (grid, block, shared_bytes) = attention_prefill_geometry(rows, heads, head_dim);
            Geometry { grid, block, shared_bytes, occupancy: 0 }
        }
        // One block per row.
        Kernel::Gather { rows, .. } => g(rows, 1, 256),
        Kernel::RmsNorm { rows, .. } | Kernel::AddRmsNorm { rows, .. } => g(rows, 1, 256),
        // One block per (row, head).
        Kernel::HeadRmsNorm { rows, heads, .. } => g(rows, heads, 128),
        // The GEMVs of `linear.cu` and `linear_fused.cu` (which shares its main loop) and, past
        // the rows threshold, their tiled paths.
        Kernel::Linear { rows, in_features, out_features, .. }
        | Kernel::FusedLinear { rows, in_features, out_features, .. }
        | Kernel::GatedLinear { rows, in_features, out_features, .. } => {
            if rows <= LINEAR_GEMV_MAX_ROWS {
                let (blocks, threads, occupancy) = gemv_grid(out_features, in_features);
                if gemv_k2(kernel, bufs, blocks, threads) {
                    return Geometry { occupancy: 0, ..g(2 * blocks, 1, LINEAR_GEMV_THREADS) };
                }
                if gemv_wide_knob(kernel, blocks) {
                    return Geometry { occupancy: 0, ..g(blocks, 1, LINEAR_GEMV_WIDE_THREADS) };
                }
                let occupancy = if dense_variant_covers(kernel) { occupancy } else { 0 };
                let blocks = gemv_walk_blocks(kernel, bufs, blocks, threads, occupancy);
                Geometry { occupancy, ..g(blocks, 1, threads) }
            } else {
                g(out_features.div_ceil(LINEAR_TILE), rows.div_ceil(LINEAR_TILE), 256)
            }
        }
        // One block per (row, rope_heads_per_block heads): sin and cos once per (row, pair) and thread.
        Kernel::Rope { rows, heads, .. } => g(rows, heads.div_ceil(rope_heads_per_block(rows)), 128),
        // The same over the q heads, then the kv heads.
        Kernel::RopeKvWrite { rows, heads, kv_heads, .. } => g(rows, (heads + kv_heads).div_ceil(rope_heads_per_block(rows)), 128),
        // One block per token.
        Kernel::KvWrite { rows, .. } => g(rows, 1, 256),
        Kernel::Attention { rows, heads, .. } => g(rows, heads, ATTENTION_THREADS),
        // One block per (row, kv head, head chunk) along x, splits along y: each block reads its
        // split of K and V once for all the q heads of its chunk of the GQA group.
        Kernel::AttentionSplit { rows, heads, kv_heads, splits, .. } => {
            g(rows * kv_heads * attention_head_chunks(heads, kv_heads), splits, ATTENTION_SPLIT_THREADS)
        }
        // One block per (row, head).
        Kernel::AttentionMerge { rows, heads, .. } => g(rows, heads, ATTENTION_MERGE_THREADS),
        Kernel::AttentionCluster { rows, heads, kv_heads, chunk_heads, .. } => {
            let [x, y] = attention_cluster_grid(rows, heads, kv_heads, chunk_heads);
            g(x, y, ATTENTION_SPLIT_THREADS)
        }
        // One cluster of ATTENTION_CLUSTER_SPLITS blocks (along y) per query head (along x).
        Kernel::QkvAttention { heads, .. } => g(heads, crate::plan::ATTENTION_CLUSTER_SPLITS, QKV_ATTENTION_THREADS),
        // `qkv_linear` (linear_fused.cu): the GEMV grid over all three outputs, whatever the rows
        // (more than 8 rows take its SIMT path, 8 rows at a time).
        // `qkv_rope` (linear_fused.cu): the GEMV grid over its outputs and its variant, as the
        // packed QKV GEMV it replaces.
        Kernel::QkvRope { in_features, heads, kv_heads, head_dim, .. } => {
            let (blocks, threads, occupancy) = gemv_grid((heads + 2 * kv_heads) * head_dim, in_features);
            Geometry { occupancy, ..g(blocks, 1, threads) }
        }
        Kernel::QkvLinear { in_features, out_features: [q, k, v], .. } => {
            let (blocks, threads, occupancy) = gemv_grid(q + k + v, in_features);
            Geometry { occupancy, ..g(blocks, 1, threads) }
        }
        // One block; one thread per row.
        Kernel::Advance { rows, .. } => g(1, 1, rows.div_ceil(32) * 32),
        // ELEMENTWISE_VEC elements per thread.
        Kernel::SwiGlu { n } | Kernel::Add { n } => g(n.div_ceil(ELEMENTWISE_THREADS * ELEMENTWISE_VEC), 1, ELEMENTWISE_THREADS),
        Kernel::Sample { rows, .. } => g(rows * SAMPLE_BLOCKS_PER_ROW, 1, SAMPLE_THREADS),
        // The sampler's one row.
        Kernel::SampleAdvance { .. } => g(SAMPLE_BLOCKS_PER_ROW, 1, SAMPLE_THREADS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{RopeScaling, RopeSpec, RopeStyle};

    fn kernels() -> Vec<Kernel> {
        let rope = RopeSpec { style: RopeStyle::HalfSplit, theta: 1e6, rotary_dim: 128, scaling: RopeScaling::None };
        let mut v = vec![
            Kernel::Gather { rows: 7, dim: 1024, table_rows: 151936, release: false },
            Kernel::RmsNorm { rows: 7, dim: 1024, eps: 1e-6, release: false },
            Kernel::HeadRmsNorm { rows: 7, heads: 16, head_dim: 128, eps: 1e-6 },
            Kernel::Rope { rows: 7, heads: 16, head_dim: 128, rope },
            Kernel::KvWrite { rows: 7, kv_dim: 1024, kv_rows: 4096 },
            Kernel::Attention { rows: 7, heads: 16, kv_heads: 8, head_dim: 128, scale: 0.088, kv_rows: 4096 },
            Kernel::AttentionSplit {
                rows: 8,
                heads: 64,
                kv_heads: 4,
                head_dim: 256,
                scale: 0.06,
                kv_rows: 1 << 20,
                splits: 2048,
                split_len: 64,
                min_split_len: 32,
                early: false,
            },
            Kernel::AttentionMerge { rows: 8, heads: 64, head_dim: 256, splits: 2048, split_len: 64, min_split_len: 32, early: false },
            Kernel::SwiGlu { n: 7 * 3072 },
            Kernel::Add { n: 7 * 1024 },
            Kernel::Sample { rows: 7, vocab: 151936 },
            Kernel::AttentionPrefill { rows: 2048, heads: 32, kv_heads: 8, head_dim: 128, scale: 0.088, kv_rows: 4096 },
        ];
        for rows in [1, 8, 9, 4096] {
            v.push(Kernel::Linear { rows, in_features: 1024, out_features: 151936, bias: false, argmax: false, stats: None });
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
            let limit = if matches!(k, Kernel::AttentionPrefill { .. }) { 227 * 1024 } else { 48 * 1024 };
            assert!(g.shared_bytes <= limit, "{k:?}: {} bytes of shared memory", g.shared_bytes);
        }
    }

    #[test]
    fn linear_switches_from_gemv_to_tiles_after_eight_rows() {
        let geometry = |rows| {
            launch_geometry(&Kernel::Linear { rows, in_features: 64, out_features: 100, bias: true, argmax: false, stats: None }, &[]).grid
        };
        assert_eq!(geometry(1), [7, 1, 1]);
        assert_eq!(geometry(8), [7, 1, 1]);
        assert_eq!(geometry(9), [2, 1, 1]);
        assert_eq!(geometry(130), [2, 3, 1]);
    }

    #[test]
    fn default_variant_gated_grids_over_one_wave_walk_their_tiles() {
        // The kernels' default KILN_GEMV_WALK bits (the knob unset in tests): only the default
        // `gated_linear` variant walks.
        assert_eq!(gemv_walk_define(), 1);
        let x =
            |dtype| [BufArg { region: super::super::RegionKind::Arena, offset: 0, bytes: 0, dtype, access: super::super::Access::Read }];
        let gated = |rows, in_features, out_features| Kernel::GatedLinear { rows, in_features, out_features, norm: true, eps: 1e-5 };
        let bf16 = x(crate::ir::DType::BF16);
        // Llama-3.2-1B gate/up: 512 tiles, the default variant (1.94 waves of 264): one wave of 264.
        let g = launch_geometry(&gated(1, 2048, 8192), &bf16);
        assert_eq!((g.grid[0], g.occupancy), (GEMV_BLOCKS_PER_SM * LINEAR_GEMV_WIDE_BELOW_BLOCKS, 0));
        assert_eq!(gemv_tiles(&gated(1, 2048, 8192)), Some(512));
        // Llama-3.1-8B gate/up: 896 tiles on the dense variant: one block per tile.
        let g = launch_geometry(&gated(1, 4096, 14336), &bf16);
        assert_eq!((g.grid[0], g.occupancy), (896, GEMV_DENSE_BLOCKS_PER_SM));
        // Qwen2.5-0.5B gate/up: one wave already; f32 has no tensor-core path; the logits do not walk.
        assert_eq!(launch_geometry(&gated(1, 896, 4864), &bf16).grid[0], 304);
        assert_eq!(launch_geometry(&gated(1, 2048, 8192), &x(crate::ir::DType::F32)).grid[0], 512);
        let logits = Kernel::Linear { rows: 1, in_features: 2048, out_features: 128256, bias: false, argmax: false, stats: None };
        assert_eq!(launch_geometry(&logits, &bf16).grid[0], 8016);
        // Every row count of the GEMV path walks the same way; the tiled path does not.
        assert_eq!(launch_geometry(&gated(8, 2048, 8192), &bf16).grid[0], 264);
        assert_eq!(gemv_tiles(&gated(9, 2048, 8192)), None);
    }

    #[test]
    fn gemvs_take_the_dense_variant_where_its_waves_are_fuller_or_many() {
        let occ = |rows, out_features| {
            launch_geometry(&Kernel::Linear { rows, in_features: 896, out_features, bias: false, argmax: false, stats: None }, &[])
                .occupancy
        };
        assert_eq!(occ(1, 4864), GEMV_DENSE_BLOCKS_PER_SM); // 304 blocks: 1.15 waves of 264, 0.77 of 396
        assert_eq!(occ(1, 6144), GEMV_DENSE_BLOCKS_PER_SM); // 384 blocks: 1.45 of 264, 0.97 of 396
        assert_eq!(occ(1, 8192), 0); // 512 blocks: 1.94 waves of 264
        assert_eq!(occ(1, 12656), 0); // 791 blocks: 3.0 waves of 264 (0.999) vs 2.0 of 396
        assert_eq!(occ(1, 12672), GEMV_DENSE_BLOCKS_PER_SM); // 792 blocks: 3 waves of 264 (GEMV_DENSE_MIN_WAVES)
        assert_eq!(occ(1, 14336), GEMV_DENSE_BLOCKS_PER_SM); // 896 blocks: 3.39 of 264 (0.85) vs 2.26 of 396 (0.75)
        assert_eq!(occ(8, 151936), GEMV_DENSE_BLOCKS_PER_SM); // 9496 blocks (logits)
        assert_eq!(occ(1, 2048), 0); // 128 blocks (256 threads: a 28 KiB tile): 0.48 of a wave of 264, 0.32 of 396
        assert_eq!(occ(9, 4864), 0); // tiled, not a GEMV
    }

    #[test]
    fn narrow_gemvs_get_sixteen_warps() {
        let block = |out_features| {
            launch_geometry(&Kernel::Linear { rows: 1, in_features: 8192, out_features, bias: false, argmax: false, stats: None }, &[])
                .block[0]
        };
        assert_eq!(block(2048), LINEAR_GEMV_WIDE_THREADS); // 128 blocks < 132 SMs, 256 KiB tiles
        assert_eq!(block(131 * 16), LINEAR_GEMV_WIDE_THREADS);
        assert_eq!(block(132 * 16), LINEAR_GEMV_THREADS);
        assert_eq!(block(128256), LINEAR_GEMV_THREADS);
    }

    #[test]
    fn narrow_gemvs_of_small_tiles_stay_at_eight_warps() {
        // The 16-row tile decides: 16 x 2048 x 2 = 64 KiB stays at 256 threads, 2056 wide takes 512.
        let block = |in_features| {
            launch_geometry(&Kernel::Linear { rows: 1, in_features, out_features: 2048, bias: false, argmax: false, stats: None }, &[])
                .block[0]
        };
        assert_eq!(block(896), LINEAR_GEMV_THREADS);
        assert_eq!(block(2048), LINEAR_GEMV_THREADS);
        assert_eq!(block(2056), LINEAR_GEMV_WIDE_THREADS);
        assert_eq!(block(4864), LINEAR_GEMV_WIDE_THREADS);
    }

    #[test]
    fn every_covered_element_has_a_thread() {
        // Elementwise: grid * block threads of ELEMENTWISE_VEC elements cover n.
        for n in [1u32, 255, 256, 257, 2047, 2048, 2049, 1 << 20] {
            for k in [Kernel::Add { n }, Kernel::SwiGlu { n }] {
                let g = launch_geometry(&k, &[]);
                assert!(g.grid[0] * g.block[0] * ELEMENTWISE_VEC >= n);
                assert!((g.grid[0] - 1) * g.block[0] * ELEMENTWISE_VEC < n, "{k:?}: a block with no element");
            }
        }
        // RoPE: rows x ceil(heads / H) blocks, H = 2 at decode's few rows, 8 above; the kernel's
        // ceil(heads / grid y) heads per block covers every head exactly once.
        let rope = RopeSpec { style: RopeStyle::HalfSplit, theta: 1e4, rotary_dim: 64, scaling: RopeScaling::None };
        for (rows, h) in [(1u32, ROPE_HEADS_FEW_ROWS), (8, ROPE_HEADS_FEW_ROWS), (9, ROPE_HEADS), (128, ROPE_HEADS)] {
            for heads in [1u32, 8, 9, 32, 40] {
                let g = launch_geometry(&Kernel::Rope { rows, heads, head_dim: 64, rope }, &[]);
                assert_eq!(g.grid, [rows, heads.div_ceil(h), 1]);
                let per_block = heads.div_ceil(g.grid[1]);
                assert!(per_block <= h && (g.grid[1] - 1) * per_block < heads && g.grid[1] * per_block >= heads);
            }
        }
        // Attention: one block per (row, head).
        let g = launch_geometry(&Kernel::Attention { rows: 5, heads: 3, kv_heads: 1, head_dim: 64, scale: 1.0, kv_rows: 9 }, &[]);
        assert_eq!((g.grid, g.block), ([5, 3, 1], [ATTENTION_THREADS, 1, 1]));
    }

    #[test]
    fn prefill_attention_has_a_block_per_head_and_64_row_tile() {
        // Llama-3.1-8B (hd 128) and Llama-3.2-1B (hd 64) at a 2048-row bucket; a 1-row plan.
        assert_eq!(attention_prefill_geometry(2048, 32, 128), ([32, 32, 1], [128, 1, 1], 80 * 1024));
        assert_eq!(attention_prefill_geometry(2048, 32, 64), ([32, 32, 1], [128, 1, 1], 40 * 1024));
        assert_eq!(attention_prefill_geometry(1, 8, 64).0, [8, 1, 1]);
        assert_eq!(attention_prefill_geometry(65, 8, 64).0, [8, 2, 1]);
        // Unsupported head dims only write zeros: no shared memory.
        assert_eq!(attention_prefill_geometry(16, 4, 80).2, 0);
    }

    #[test]
    fn split_attention_has_a_block_per_row_kv_head_head_chunk_and_split() {
        let split = |heads, kv_heads| {
            let k = Kernel::AttentionSplit {
                rows: 3,
                heads,
                kv_heads,
                head_dim: 64,
                scale: 1.0,
                kv_rows: 4096,
                splits: 8,
                split_len: 512,
                min_split_len: 32,
                early: false,
            };
            launch_geometry(&k, &[])
        };
        // Groups of up to 4 q heads share one block's K/V reads (Llama 32/8, Qwen3 16/8).
        assert_eq!(split(32, 8).grid, [3 * 8, 8, 1]);
        assert_eq!(split(16, 8).grid, [3 * 8, 8, 1]);
        // Larger groups take ceil(group / 4) chunks: 7 (Qwen2.5 14/2) -> 2, 9 -> 3, 16 -> 4.
        assert_eq!(split(14, 2).grid, [3 * 2 * 2, 8, 1]);
        assert_eq!(split(18, 2).grid, [3 * 2 * 3, 8, 1]);
        assert_eq!(split(16, 1).grid, [3 * 4, 8, 1]);
        assert_eq!(split(4, 4).block, [ATTENTION_SPLIT_THREADS, 1, 1]);
        let merge = launch_geometry(
            &Kernel::AttentionMerge { rows: 3, heads: 32, head_dim: 64, splits: 8, split_len: 512, min_split_len: 32, early: false },
            &[],
        );
        assert_eq!((merge.grid, merge.block), ([3, 32, 1], [ATTENTION_MERGE_THREADS, 1, 1]));
    }
}
