//! The ahead-of-time planner and the plan it produces.
//!
//! A [`Plan`] fixes, before any device exists: the size of every region, the offset of every
//! buffer in it, and for every program (phase x bucket) the launch records — kernel, geometry,
//! and operands as (region, offset, length) — plus the data dependencies between launches.
//! Executors (`runtime`) only follow it: they never allocate after load and never compute an
//! address.
//!
//! Owns: regions, offsets, lifetimes, launch records, dependencies, the memory report.
//! Never: touches a device, reads weights, or depends on hash order (plans are deterministic).

pub mod check;
pub mod dump;
pub mod file;
pub mod geometry;
pub mod planner;

pub use planner::{build_plan, build_plan_tiles, build_plan_unrolled, PlanOptions};

/// A plan-time A/B timing knob: the environment variable `name`, read once per process, "" when
/// unset (`bench/README.md` lists them). The defaults are what the results use.
pub fn knob(name: &'static str) -> &'static str {
    static KNOBS: std::sync::OnceLock<std::sync::Mutex<std::collections::BTreeMap<&'static str, &'static str>>> =
        std::sync::OnceLock::new();
    let mut knobs = KNOBS.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    knobs.entry(name).or_insert_with(|| std::env::var(name).unwrap_or_default().leak())
}

use crate::ir::{DType, Phase, RopeSpec, ValueClass};
use crate::model::config::ModelConfig;
use serde::{Deserialize, Serialize};

/// Alignment of every buffer offset and every region size, in bytes.
pub const ALIGN: u64 = 256;

pub fn align_up(x: u64) -> u64 {
    x.div_ceil(ALIGN) * ALIGN
}

/// The fixed regions. Each is one device allocation; the order here is the order in dumps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum RegionKind {
    /// Model tensors, one offset each, uploaded once at load.
    Weights,
    /// Persistent per-sequence state: KV cache (and, later, recurrent state).
    State,
    /// The step block: per-step inputs written by the host before each launch.
    Step,
    /// Results the host reads: logits, sampled tokens.
    Output,
    /// Activations of whichever program runs, shared by all programs, sized by liveness.
    Arena,
    /// Tokens streamed by device loops; host-mapped pinned memory on a GPU, so the host reads
    /// them without synchronizing.
    Ring,
}

/// Workspace of a `Kernel::Gemm` launch: what cuBLASLt may use (NVIDIA recommends 32 MiB on
/// Hopper). Planned in the arena like any temp; live only during the launch.
pub const GEMM_WORKSPACE_BYTES: u64 = 32 << 20;

/// Number of regions (the length of `Plan::region_bytes`).
pub const N_REGIONS: usize = 6;

impl RegionKind {
    pub const ALL: [RegionKind; N_REGIONS] =
        [RegionKind::Weights, RegionKind::State, RegionKind::Step, RegionKind::Output, RegionKind::Arena, RegionKind::Ring];
    pub fn name(self) -> &'static str {
        match self {
            RegionKind::Weights => "weights",
            RegionKind::State => "state",
            RegionKind::Step => "step",
            RegionKind::Output => "output",
            RegionKind::Arena => "arena",
            RegionKind::Ring => "ring",
        }
    }
    pub fn index(self) -> usize {
        self as usize
    }
    /// Region of a persistent value class (`Temp` lives in the arena).
    pub fn of_class(class: ValueClass) -> RegionKind {
        match class {
            ValueClass::Weight => RegionKind::Weights,
            ValueClass::State => RegionKind::State,
            ValueClass::Step => RegionKind::Step,
            ValueClass::Output => RegionKind::Output,
            ValueClass::Temp => RegionKind::Arena,
            ValueClass::Ring => RegionKind::Ring,
        }
    }
}

/// A buffer that outlives programs (weight, state, step field, output), at a fixed offset.
/// Step fields and outputs are sized for the largest program; a program uses a prefix.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlannedTensor {
    pub name: String,
    pub class: ValueClass,
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub region: RegionKind,
    pub offset: u64,
    pub bytes: u64,
    /// How the elements are stored: row-major, or a permutation of another weight's.
    pub layout: Layout,
}

impl PlannedTensor {
    /// The model tensor this one is loaded from: itself, or for a permuted layout the row-major
    /// weight it permutes (`NAME@tiles` from `NAME`).
    pub fn source(&self) -> &str {
        match self.layout {
            Layout::RowMajor => &self.name,
            Layout::GemvTiles => self.name.strip_suffix(crate::lower::tiles::SUFFIX).unwrap_or(&self.name),
        }
    }
}

/// The element order of a planned tensor. Every kernel of a plan that reads a weight reads it in
/// the tensor's layout; the loader writes it so (`runtime::weights`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Layout {
    /// `[d0, d1, ...]` in C order.
    #[default]
    RowMajor,
    /// A 16-bit `[N, K]` GEMV weight tile-packed (`lower::tiles`): each 16-row tile's 32-column
    /// chunks in the order the tensor-core GEMV's lanes read them. Plans with such tensors run
    /// kernels compiled for it (`KILN_GEMV_TILES=1`, `runtime::cuda::nvrtc`).
    GemvTiles,
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Layout::RowMajor => "row-major",
            Layout::GemvTiles => "gemv-tiles",
        }
    }
}

/// An operand of a launch: bytes `[offset, offset + bytes)` of `region`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BufArg {
    pub region: RegionKind,
    pub offset: u64,
    pub bytes: u64,
    pub dtype: DType,
    pub access: Access,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Access {
    Read,
    Write,
}

/// What a launch runs, with its scalar parameters. Operands are in [`Launch::bufs`], in the
/// order of the IR op's `reads()` followed by its `writes()` (documented per variant).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Kernel {
    /// bufs: table, indices, out. `release`: the kernel lets its dependents launch before it waits
    /// for the grids before it (`kiln_gather_release_*`), so it is no barrier for early reads
    /// ([`Kernel::waits_before_release`]); planned by `planner::plan_release_early`.
    Gather { rows: u32, dim: u32, table_rows: u32, release: bool },
    /// bufs: x, weight, out. `release`: as `Gather`'s (`kiln_rms_norm_release_*`).
    RmsNorm { rows: u32, dim: u32, eps: f32, release: bool },
    /// bufs: x, weight, out.
    HeadRmsNorm { rows: u32, heads: u32, head_dim: u32, eps: f32 },
    /// bufs: x, `[sumsq]`, weight, `[bias]`, out, `[argmax key]`. Here and in `FusedLinear` and
    /// `Gemm`, the weight (and the bias) may be several planned tensors laid out back to back, read
    /// as one: a packed `Op::QkvLinear`'s three projections. `argmax`: an `Op::LinearArgmax` or a
    /// `NormedLinear` with a key (no bias), folding each row's argmax into the key. `stats`:
    /// `Some(eps)` for an `Op::NormedLinear` (x already times the norm weight; each row's sums
    /// scaled by `ir::stats_inv` of its `sumsq` row).
    Linear { rows: u32, in_features: u32, out_features: u32, bias: bool, argmax: bool, stats: Option<f32> },
    /// bufs: x, `[norm weight]`, weight, `[bias]`, `[residual]`, `[out-norm weight]`,
    /// `[prefetch]`, out, `[sumsq]` (see `Op::FusedLinear`; `out_norm`: its `OutNorm`, `out` then
    /// holding the output times the out-norm weight).
    /// `l2_prefetch` > 0: the launch's block b asks the L2, before it waits
    /// for the launches before it, for bytes `[b * l2_prefetch, (b + 1) * l2_prefetch)` of the
    /// `prefetch` operand, the first weight of a launch after it (`planner::plan_l2_prefetch`);
    /// a hint no value depends on (the CPU reference reads nothing there).
    FusedLinear {
        rows: u32,
        in_features: u32,
        out_features: u32,
        norm: bool,
        eps: f32,
        bias: bool,
        residual: bool,
        l2_prefetch: u32,
        out_norm: bool,
    },
    /// A prefill `Op::Linear` over more rows than the GEMV path takes, run as a tensor-core
    /// GEMM by a library (cuBLASLt on a GPU) with a planned workspace. Semantics of `Linear`:
    /// `out[r, n] = OutT(sum_k x[r, k] w[n, k] (+ bias[n]))`, f32 accumulate, rounded once.
    /// bufs: x, weight, `[bias]`, out, workspace (`GEMM_WORKSPACE_BYTES`, scratch the library
    /// may use during the launch only).
    Gemm { rows: u32, in_features: u32, out_features: u32, bias: bool },
    /// bufs: x, `[norm weight]`, gate, up, out (see `Op::GatedLinear`).
    GatedLinear { rows: u32, in_features: u32, out_features: u32, norm: bool, eps: f32 },
    /// bufs: x, positions, out.
    Rope { rows: u32, heads: u32, head_dim: u32, rope: RopeSpec },
    /// bufs: k, v, positions, cache_base, k_cache, v_cache.
    KvWrite { rows: u32, kv_dim: u32, kv_rows: u32 },
    /// bufs: q, k_cache, v_cache, positions, cache_base, out.
    Attention { rows: u32, heads: u32, kv_heads: u32, head_dim: u32, scale: f32, kv_rows: u32 },
    /// Prefill attention on tensor cores (`attention_prefill.cu`, flash-attention style): the
    /// semantics and operands of `Attention`; planned for f16 / bf16 prefill programs with
    /// head_dim 64 or 128.
    AttentionPrefill { rows: u32, heads: u32, kv_heads: u32, head_dim: u32, scale: f32, kv_rows: u32 },
    /// Decode attention, first half: each active KV split of each (row, head) writes its
    /// partial softmax state to the workspace. bufs: q, k_cache, v_cache, positions,
    /// cache_base, workspace. Workspace: f32 `[rows][heads][splits][head_dim + 2]` holding
    /// `acc` (sum of `exp(s - m) * v`), `m` (max score) and `l` (sum of `exp(s - m)`) over
    /// positions `[split * len, min((split + 1) * len, p + 1))`, where `len` is the live split
    /// length [`live_split_len`]`(p, splits, split_len, min_split_len)` (at most `split_len`, the
    /// longest, sized so that `splits * split_len` covers the plan's context; shorter while the
    /// sequence is short, so that a short context still spreads over several splits); a split
    /// is active iff `p >= 0 && split * len <= p`, and inactive splits write nothing.
    AttentionSplit {
        rows: u32,
        heads: u32,
        kv_heads: u32,
        head_dim: u32,
        scale: f32,
        kv_rows: u32,
        splits: u32,
        split_len: u32,
        min_split_len: u32,
        /// Planned early reads ([`early_reads_safe`]): the positions and cache bases are read
        /// before the kernel waits for the grids before it (the bits are the same either way).
        early: bool,
    },
    /// Decode attention, second half: combines the active splits of each (row, head) (the same
    /// live split length as the split launch). bufs: workspace, positions, out. `early`: the
    /// positions are read before the wait, as the split's.
    AttentionMerge { rows: u32, heads: u32, head_dim: u32, splits: u32, split_len: u32, min_split_len: u32, early: bool },
    /// bufs: gate, up, out.
    SwiGlu { n: u32 },
    /// bufs: a, b, out.
    Add { n: u32 },
    /// bufs: logits, temperature, top_k, top_p, seed, counter, out.
    Sample { rows: u32, vocab: u32 },
    /// bufs: tokens, stop_ids, token_ids, positions, counter, control, ring (see `Op::Advance`).
    /// On a GPU the kernel also takes the device loop's conditional handle, which the runtime
    /// appends (0 outside a graph loop).
    Advance { rows: u32, burst: u32, stop_ids: u32 },
    /// bufs: x, `[norm weight]`, wq, wk, wv, `[bq, bk, bv]`, out_q, out_k, out_v (see `Op::QkvLinear`);
    /// `out_features` of each of the three. Last, so that adding it kept the plan format.
    QkvLinear { rows: u32, in_features: u32, out_features: [u32; 3], norm: bool, eps: f32, bias: bool },
    /// bufs: q, k, v, positions, cache_base, q_out, k_cache, v_cache (see `Op::RopeKvWrite`);
    /// when `packed`, one packed qkv `[rows, (heads + 2 kv_heads) * head_dim]` in place of q, k, v.
    RopeKvWrite { rows: u32, heads: u32, kv_heads: u32, head_dim: u32, kv_rows: u32, rope: crate::ir::RopeSpec, packed: bool },
    /// bufs: a, b, weight, sum, out (see `Op::AddRmsNorm`).
    AddRmsNorm { rows: u32, dim: u32, eps: f32 },
    /// bufs: x, `[norm weight]`, weight, `[bias]`, positions, cache_base, q_out, k_cache, v_cache
    /// (see `Op::QkvRope`): the three weights (and biases) laid out back to back and read as one
    /// `[(heads + 2 kv_heads) * head_dim, in_features]` matrix, like a packed `QkvLinear`.
    /// `early`: positions and cache bases may be read (and the rotation angles computed) before the
    /// launch waits for the grids before it ([`early_reads_safe`]).
    QkvRope {
        rows: u32,
        in_features: u32,
        heads: u32,
        kv_heads: u32,
        head_dim: u32,
        kv_rows: u32,
        norm: bool,
        eps: f32,
        bias: bool,
        early: bool,
        rope: crate::ir::RopeSpec,
    },
    /// Decode attention in one launch (one query row per sequence; the same result as
    /// `AttentionSplit` + `AttentionMerge` up to rounding order): [`ATTENTION_CLUSTER_SPLITS`]
    /// splits over the live split length [`live_split_len`]`(p, ATTENTION_CLUSTER_SPLITS,
    /// split_len, min_split_len)`, each a block of one thread-block cluster per (row, kv head,
    /// chunk of `chunk_heads` query heads), merged through the cluster's distributed shared memory
    /// (max, then the weighted sums in split order). bufs: q, k_cache, v_cache, positions,
    /// cache_base, out. `early`: as `AttentionSplit`'s. sm_90+; planned where its clusters fit in
    /// one wave ([`planner::attention_cluster`]), unless `KILN_ATTN_CLUSTER=0` at plan time.
    AttentionCluster {
        rows: u32,
        heads: u32,
        kv_heads: u32,
        head_dim: u32,
        scale: f32,
        kv_rows: u32,
        split_len: u32,
        min_split_len: u32,
        chunk_heads: u32,
        early: bool,
    },
    /// `Sample` then `Advance` in one launch (see `Op::SampleAdvance`; one row). bufs: logits,
    /// temperature, top_k, top_p, seed, stop_ids, out, token_ids, positions, counter, control,
    /// ring. Sample's grid (a cluster of [`geometry::SAMPLE_BLOCKS_PER_ROW`] blocks); the block
    /// that draws the token runs the advance. On a GPU the kernel also takes the device loop's
    /// conditional handle, as `Advance`. `argmax`: a last operand, the key of the `LinearArgmax`
    /// that made the logits (a greedy row's token; zeroed).
    SampleAdvance { vocab: u32, burst: u32, stop_ids: u32, argmax: bool },
    /// `Op::QkvAttention` in one launch (decode, one row): one thread-block cluster of
    /// [`ATTENTION_CLUSTER_SPLITS`] blocks per query head computes the rows of the packed QKV
    /// matrix its head needs (its q rows, its KV group's k and v rows: `QkvRope`'s arithmetic, up to
    /// the order of each dot product's sum), rotates them, writes K/V row p (the clusters of each
    /// group's first head), passes q, k_p and v_p between its blocks through distributed shared
    /// memory, then runs `AttentionCluster`'s splits (chunks of one head) and merge. bufs: x,
    /// `[norm weight]`, weight, `[bias]`, positions, cache_base, k_cache, v_cache, out (the three
    /// weights and biases back to back, row-major, as `QkvRope`'s before tiling). `split_len`,
    /// `min_split_len` and `early` as `AttentionCluster`'s. Planned only where
    /// [`geometry::qkv_attention_fits`] holds (rewrite 11; plan-time knob `KILN_FUSE_QKV_ATTN=0` turns it off).
    QkvAttention {
        in_features: u32,
        heads: u32,
        kv_heads: u32,
        head_dim: u32,
        kv_rows: u32,
        norm: bool,
        eps: f32,
        bias: bool,
        rope: crate::ir::RopeSpec,
        scale: f32,
        split_len: u32,
        min_split_len: u32,
        early: bool,
    },
}

/// Splits (blocks of one cluster) of [`Kernel::AttentionCluster`] (`KILN_ATTN_CLUSTER_SPLITS`).
pub const ATTENTION_CLUSTER_SPLITS: u32 = 8;

/// Quantum of the live split length of decode attention (positions).
pub const SPLIT_LEN_QUANTUM: u32 = 16;

/// The split length decode attention uses at live position `p` (`p + 1` keys): the keys spread
/// evenly over the `splits` splits, rounded up to [`SPLIT_LEN_QUANTUM`], no shorter than
/// `min_split_len` and no longer than the planned `split_len`. Split and merge launches (GPU
/// kernels in `attention_split.cu` and the CPU reference) compute it the same way from the
/// position they read, so the grid and the workspace stay fixed by the plan while a short
/// context takes more, shorter splits. `min_split_len >= split_len` gives the fixed `split_len`.
pub fn live_split_len(p: i32, splits: u32, split_len: u32, min_split_len: u32) -> u32 {
    let keys = (p.max(0) as u32).saturating_add(1);
    let even = keys.div_ceil(splits.max(1)).div_ceil(SPLIT_LEN_QUANTUM) * SPLIT_LEN_QUANTUM;
    even.max(min_split_len).min(split_len).max(1)
}

impl Kernel {
    /// Bytes of scratch the launch needs in the arena, live only during the launch (and the
    /// launch that consumes it). Zero for most kernels.
    pub fn workspace_bytes(&self) -> u64 {
        match *self {
            Kernel::AttentionSplit { rows, heads, head_dim, splits, .. } => {
                rows as u64 * heads as u64 * splits as u64 * (head_dim as u64 + 2) * 4
            }
            Kernel::Gemm { .. } => GEMM_WORKSPACE_BYTES,
            _ => 0,
        }
    }

    /// Whether a library call runs it rather than one of kiln's kernels (no symbol, no grid).
    pub fn is_library(&self) -> bool {
        matches!(self, Kernel::Gemm { .. })
    }

    pub fn name(&self) -> &'static str {
        match self {
            Kernel::Gather { .. } => "gather",
            Kernel::RmsNorm { .. } => "rms_norm",
            Kernel::AddRmsNorm { .. } => "add_rms_norm",
            Kernel::HeadRmsNorm { .. } => "head_rms_norm",
            Kernel::Linear { .. } => "linear",
            Kernel::FusedLinear { .. } => "fused_linear",
            Kernel::QkvLinear { .. } => "qkv_linear",
            Kernel::QkvRope { .. } => "qkv_rope",
            Kernel::RopeKvWrite { .. } => "rope_kv_write",
            Kernel::Gemm { .. } => "gemm",
            Kernel::GatedLinear { .. } => "gated_linear",
            Kernel::Rope { .. } => "rope",
            Kernel::KvWrite { .. } => "kv_write",
            Kernel::Attention { .. } => "attention",
            Kernel::AttentionSplit { .. } => "attention_split",
            Kernel::AttentionPrefill { .. } => "attention_prefill",
            Kernel::AttentionMerge { .. } => "attention_merge",
            Kernel::AttentionCluster { .. } => "attention_cluster",
            Kernel::QkvAttention { .. } => "qkv_attention",
            Kernel::SwiGlu { .. } => "swiglu",
            Kernel::Add { .. } => "add",
            Kernel::Sample { .. } => "sample",
            Kernel::Advance { .. } => "advance",
            Kernel::SampleAdvance { .. } => "sample_advance",
        }
    }
}

/// The operands of a launch that its kernel may read before it waits for the grids before it
/// (programmatic dependent launch), when [`early_reads_safe`] holds: the positions and cache
/// bases of a `QkvRope`, a `QkvAttention`, an `AttentionSplit` and an `AttentionCluster`, the positions of an
/// `AttentionMerge`. Indices into
/// `Launch::bufs`.
pub fn early_read_operands(l: &Launch) -> Vec<usize> {
    let n = l.bufs.len();
    match l.kernel {
        Kernel::QkvRope { .. } | Kernel::QkvAttention { .. } if n >= 5 => vec![n - 5, n - 4],
        Kernel::AttentionSplit { .. } | Kernel::AttentionCluster { .. } if n == 6 => vec![3, 4],
        Kernel::AttentionMerge { .. } if n == 3 => vec![1],
        _ => Vec::new(),
    }
}

impl Kernel {
    /// Whether the kernel waits for the grids before it (`griddepcontrol.wait`) before it lets
    /// its own dependents launch, in every block: `kiln::wait_prior_grids()` and no earlier
    /// `kiln::allow_dependents()` (kernels/gather.cu and rms_norm.cu but their `_release` entries,
    /// sample.cu, advance.cu; attention_qkv.cu, which waits first or, reading early, before its
    /// `allow_dependents()`). The GEMV kernels do not (they release their dependents first). Used
    /// by [`early_reads_safe`]: a launch of such a kernel is a barrier for early reads.
    pub fn waits_before_release(&self) -> bool {
        matches!(
            self,
            Kernel::Gather { release: false, .. }
                | Kernel::RmsNorm { release: false, .. }
                | Kernel::QkvAttention { .. }
                | Kernel::Sample { .. }
                | Kernel::Advance { .. }
                | Kernel::SampleAdvance { .. }
        )
    }

    /// Whether the kernel is a device loop's step (`advance`, or `sample_advance`, which ends in
    /// it): the launch that ends a loop body's copy and takes the WHILE node's handle.
    pub fn is_loop_step(&self) -> bool {
        matches!(self, Kernel::Advance { .. } | Kernel::SampleAdvance { .. })
    }

    /// Whether the launch is planned to read its [`early_read_operands`] before its wait.
    pub fn early(&self) -> bool {
        matches!(
            self,
            Kernel::QkvRope { early: true, .. }
                | Kernel::QkvAttention { early: true, .. }
                | Kernel::AttentionSplit { early: true, .. }
                | Kernel::AttentionMerge { early: true, .. }
                | Kernel::AttentionCluster { early: true, .. }
        )
    }
}

/// Whether launch `i` may read its [`early_read_operands`] before waiting: every earlier launch
/// that writes any of them is complete whenever `i` starts. That holds in two cases:
/// - no launch before `i` in the program writes them, so their values were written before the
///   program began (by the host, or by the previous step or device-loop iteration, which a graph
///   launch or the next iteration follows as a whole);
/// - a *barrier* stands between: a launch `b` whose kernel waits for the grids before it before
///   it lets its dependents launch ([`Kernel::waits_before_release`]), of which `i` is a
///   descendant in `deps` and every such writer an ancestor. Every launch after `b` on a path
///   from `b` starts after `b`'s wait returned, when `b`'s ancestors were complete (every kiln
///   kernel waits in every block before it completes). In stream order (eager execution) the
///   same holds, since `b` precedes `i` and follows its ancestors. This is what lets the copies
///   of an unrolled device-loop body ([`ProgramPlan::loop_copies`]) after the first read early:
///   each starts with a `gather` that depends on the previous copy's `advance`.
///
/// Nothing weaker is safe: the GEMV kernels let their dependents launch before they wait
/// themselves (to start the next weight stream early), so under programmatic dependent launch
/// a kernel may start while a grid several launches back still runs.
pub fn early_reads_safe(launches: &[Launch], deps: &[(u32, u32)], i: usize) -> bool {
    let ops = early_read_operands(&launches[i]);
    if ops.is_empty() {
        return false;
    }
    let writes = |l: &Launch| {
        ops.iter().any(|&k| {
            let b = &launches[i].bufs[k];
            l.bufs.iter().any(|o| {
                o.access == Access::Write && o.region == b.region && o.offset < b.offset + b.bytes && b.offset < o.offset + o.bytes
            })
        })
    };
    let writers: Vec<usize> = (0..i).filter(|&j| writes(&launches[j])).collect();
    if writers.is_empty() {
        return true;
    }
    (0..i).filter(|&b| launches[b].kernel.waits_before_release()).any(|b| {
        let (down, up) = (reachable(deps, launches.len(), b, true), reachable(deps, launches.len(), b, false));
        down[i] && writers.iter().all(|&j| j != b && up[j])
    })
}

/// The launches reachable from `from` along `deps` (forward: its descendants; backward: its
/// ancestors), `from` included. Edges with an end past `n` are ignored (the plan checker refuses
/// them on their own).
pub fn reachable(deps: &[(u32, u32)], n: usize, from: usize, forward: bool) -> Vec<bool> {
    let mut next = vec![Vec::new(); n];
    for &(a, b) in deps {
        let (src, dst) = if forward { (a as usize, b as usize) } else { (b as usize, a as usize) };
        if src < n && dst < n {
            next[src].push(dst);
        }
    }
    let mut seen = vec![false; n];
    let mut stack = vec![from];
    seen[from] = true;
    while let Some(x) = stack.pop() {
        for &y in &next[x] {
            if !seen[y] {
                seen[y] = true;
                stack.push(y);
            }
        }
    }
    seen
}

/// One launch record: everything an executor needs, nothing it must compute.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Launch {
    /// Name of the IR op it came from (`blk.3.attn_q`).
    pub name: String,
    pub kernel: Kernel,
    pub bufs: Vec<BufArg>,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_bytes: u32,
    /// Blocks per SM the kernel variant is compiled for: 0 the kernel's default; 3 the dense GEMV
    /// (`geometry::gemv_occupancy`, symbol suffix `_o3`, 256-thread blocks only).
    pub occupancy: u32,
}

/// Where one temp of a program lives in the arena, and when.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TempAlloc {
    pub name: String,
    pub offset: u64,
    pub bytes: u64,
    /// Index of the launch that writes it.
    pub first: u32,
    /// Index of the last launch that reads it.
    pub last: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProgramPlan {
    pub phase: Phase,
    pub bucket: usize,
    pub tokens: usize,
    pub sample_rows: usize,
    pub launches: Vec<Launch>,
    /// Data dependencies `(before, after)` between launches (read-after-write,
    /// write-after-read, write-after-write), transitively reduced. Graph edges.
    pub deps: Vec<(u32, u32)>,
    pub temps: Vec<TempAlloc>,
    /// Arena bytes this program needs (its peak under the chosen offsets).
    pub arena_bytes: u64,
    /// Arena bytes it would need with no reuse (sum of its aligned temps).
    pub naive_bytes: u64,
}

impl ProgramPlan {
    /// Copies of the body in a device loop's launches (`loop.b{B}`): the planner unrolls the
    /// body [`planner::loop_unroll`] times, so that one pass of the graph's WHILE node runs that
    /// many steps; each copy ends in its `advance` (or `sample_advance`), and a copy after the
    /// loop is done changes nothing the host reads (see `Op::Advance`). 1 for other programs.
    /// A launch whose budget is not a multiple of it runs the first copy alone per pass
    /// ([`ProgramPlan::loop_launches`]).
    pub fn loop_copies(&self) -> usize {
        if self.phase != Phase::DecodeLoop {
            return 1;
        }
        self.launches.iter().filter(|l| l.kernel.is_loop_step()).count().max(1)
    }

    /// How many of the program's launches one pass runs for a device-loop `budget`: all of them
    /// when the budget is a multiple of [`ProgramPlan::loop_copies`] (a budget of 0 runs
    /// nothing anyway), else the first copy's (its launches come first, and its dependencies
    /// stay among them). Every executor uses this rule, so each runs the same launches.
    pub fn loop_launches(&self, budget: u32) -> usize {
        let copies = self.loop_copies();
        if copies > 1 && !(budget as usize).is_multiple_of(copies) {
            self.body_len()
        } else {
            self.launches.len()
        }
    }

    /// Launches of one copy of a device loop's body (all of them in other programs): launch `i`
    /// is a twin of `i % body_len()` in every copy.
    pub fn body_len(&self) -> usize {
        self.launches.len() / self.loop_copies()
    }

    pub fn label(&self) -> String {
        match self.phase {
            Phase::Decode => format!("decode.b{}", self.bucket),
            Phase::Prefill => format!("prefill.t{}", self.bucket),
            Phase::DecodeLoop => format!("loop.b{}", self.bucket),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub kiln_version: String,
    pub config: ModelConfig,
    /// Hex SHA-256 of the config and the tensor table (see [`fingerprint`]).
    pub fingerprint: String,
    pub options: PlanOptions,
    /// Bytes of each region, indexed by `RegionKind::index()`.
    pub region_bytes: [u64; N_REGIONS],
    pub tensors: Vec<PlannedTensor>,
    pub programs: Vec<ProgramPlan>,
}

impl Plan {
    pub fn total_bytes(&self) -> u64 {
        self.region_bytes.iter().sum()
    }
    pub fn tensor(&self, name: &str) -> Option<&PlannedTensor> {
        self.tensors.iter().find(|t| t.name == name)
    }
    /// Whether the plan's GEMV weights are tile-packed (`lower::tiles`): its kernels must be
    /// compiled for that layout.
    pub fn gemv_tiles(&self) -> bool {
        self.tensors.iter().any(|t| t.layout == Layout::GemvTiles)
    }
    /// Count and bytes of the tile-packed twins whose row-major original is planned too (the
    /// second copy of the GEMV weights: prefill's GEMMs or the gather read the original; 0, 0 row-major).
    pub fn gemv_tiles_bytes(&self) -> (usize, u64) {
        let twins = self.tensors.iter().filter(|t| t.layout == Layout::GemvTiles && self.tensor(t.source()).is_some());
        twins.fold((0, 0), |(n, b), t| (n + 1, b + t.bytes))
    }
    /// Index of the program for a phase and exact bucket.
    pub fn program(&self, phase: Phase, bucket: usize) -> Option<usize> {
        self.programs.iter().position(|p| p.phase == phase && p.bucket == bucket)
    }
    /// Smallest bucket of `phase` that holds `n` (tokens or sequences).
    pub fn bucket_for(&self, phase: Phase, n: usize) -> Option<usize> {
        self.programs.iter().enumerate().filter(|(_, p)| p.phase == phase && p.bucket >= n).min_by_key(|(_, p)| p.bucket).map(|(i, _)| i)
    }
}

/// SHA-256 over the canonical JSON of the config and the tensor table (names and shapes) with
/// the plan's storage dtype: two models with the same fingerprint accept the same plan.
pub fn fingerprint(config: &ModelConfig, dtype: DType) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(serde_json::to_vec(config).expect("config serializes"));
    for t in config.tensors() {
        h.update(t.name.as_bytes());
        for d in &t.shape {
            h.update((*d as u64).to_le_bytes());
        }
        h.update(dtype.name().as_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}
