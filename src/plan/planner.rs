//! The planner: lowers every (phase, bucket) program, lays out the persistent regions, gives
//! each temp an arena offset by liveness, and turns each op into a launch record.
//!
//! Arena allocation is deliberately simple (as tinygrad's): walk the ops in order; before op
//! `i`, allocate each value it writes into the lowest-addressed free gap that fits it
//! (best fit by gap size, then lowest offset); after op `i`, free every temp whose last reader
//! is `i`. An op's outputs never share bytes with its inputs. The arena is the largest peak
//! over all programs; every program reuses it from offset 0.

use super::{
    align_up, fingerprint, Access, BufArg, Kernel, Launch, Layout, Plan, PlannedTensor, ProgramPlan, RegionKind, TempAlloc, N_REGIONS,
};
use crate::ir::{DType, Op, Phase, Program, Qkv, ValueClass, ValueId};
use crate::lower::tiles::Mode as TilesMode;
use crate::lower::{lower, LowerOptions};
use crate::model::config::ModelConfig;
use anyhow::{bail, ensure, Result};
use petgraph::graph::DiGraph;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanOptions {
    /// Decode batch sizes (sequences stepped together), ascending.
    pub decode_buckets: Vec<usize>,
    /// Prefill token counts, ascending.
    pub prefill_buckets: Vec<usize>,
    /// Tokens of context each sequence may hold (KV rows per sequence).
    pub max_context: usize,
    /// Storage dtype of weights, activations and KV cache.
    pub dtype: DType,
    /// Refuse plans needing more device bytes than this.
    pub memory_budget: Option<u64>,
    /// Tokens per row one device-loop launch may produce (0: no device loops). Each decode
    /// bucket gets a `loop.b{B}` program with a ring of `burst` tokens per row.
    pub burst: usize,
    /// Run the fusion pass (`lower::fuse`): norm prologues, gated MLP, residual epilogues,
    /// packed Q/K/V, RoPE with the KV write (in decode, in the Q/K/V epilogue), a one-row device
    /// loop's `sample_advance` and its argmax key in the logits GEMV.
    pub fuse: bool,
}

impl PlanOptions {
    /// Sequences whose state is resident at once: the largest decode bucket (at least 1).
    pub fn max_seqs(&self) -> usize {
        self.decode_buckets.iter().copied().max().unwrap_or(1)
    }
    pub fn kv_rows(&self) -> usize {
        self.max_seqs() * self.max_context
    }
}

fn check_options(cfg: &ModelConfig, o: &PlanOptions) -> Result<()> {
    ensure!(!o.decode_buckets.is_empty() || !o.prefill_buckets.is_empty(), "no buckets: give at least one decode or prefill bucket");
    for (what, b) in [("decode", &o.decode_buckets), ("prefill", &o.prefill_buckets)] {
        ensure!(b.iter().all(|&x| x > 0), "{what} buckets must be positive, got {b:?}");
        ensure!(b.windows(2).all(|w| w[0] < w[1]), "{what} buckets must be strictly ascending, got {b:?}");
    }
    ensure!(o.max_context > 0, "max context must be positive");
    ensure!(o.burst <= 65536, "a burst of {} tokens per launch is more than the 65536 kiln plans for", o.burst);
    ensure!(
        o.max_context <= cfg.max_position_embeddings,
        "max context {} exceeds the model's trained context {} (max_position_embeddings); plan with --max-context {} or less",
        o.max_context,
        cfg.max_position_embeddings,
        cfg.max_position_embeddings
    );
    if let Some(&big) = o.prefill_buckets.last() {
        if big > o.max_context {
            let or_context = if o.max_context < cfg.max_position_embeddings {
                format!(" or a larger --max-context (the model allows {})", cfg.max_position_embeddings)
            } else {
                String::new()
            };
            bail!(
                "prefill bucket {big} is larger than the max context {} (no prompt can fill it); use prefill buckets of at most {}{or_context}",
                o.max_context,
                o.max_context
            );
        }
    }
    ensure!(o.dtype.is_float(), "plan dtype must be f32, f16 or bf16, not {}", o.dtype);
    // Limits of the CUDA kernels (kernels/attention.cu keeps a head in registers; the sampler
    // packs indices into 23 bits). Refused here so no executor meets them.
    ensure!(cfg.head_dim <= 256, "head_dim {} is larger than the 256 kiln's attention kernels support", cfg.head_dim);
    ensure!(cfg.vocab_size < (1 << 23), "vocabulary of {} tokens is larger than the 2^23 kiln's sampler supports", cfg.vocab_size);
    ensure!(o.kv_rows() <= i32::MAX as usize, "{} KV rows do not fit the i32 positions the kernels read", o.kv_rows());
    Ok(())
}

/// Builds a checked plan for `cfg`. Deterministic: same inputs and environment, byte-identical
/// plan. GEMV weights are tile-packed twins (`lower::tiles`) as `KILN_GEMV_TILES` says: by
/// default where every 16-bit GEMV weight can be and the plan fits the memory budget.
pub fn build_plan(cfg: &ModelConfig, opts: &PlanOptions) -> Result<Plan> {
    build_plan_tiles(cfg, opts, crate::lower::tiles::mode()?)
}

/// [`build_plan`] with the given tile-packing mode (`lower::tiles`), whatever the environment.
pub fn build_plan_tiles(cfg: &ModelConfig, opts: &PlanOptions, tiles: TilesMode) -> Result<Plan> {
    build(cfg, opts, tiles, loop_unroll()?)
}

/// [`build_plan`] with device-loop bodies of `copies` copies ([`ProgramPlan::loop_copies`]),
/// whatever the environment says.
pub fn build_plan_unrolled(cfg: &ModelConfig, opts: &PlanOptions, copies: usize) -> Result<Plan> {
    ensure!((1..=16).contains(&copies), "a device loop's body is planned in 1 to 16 copies, not {copies}");
    build(cfg, opts, crate::lower::tiles::mode()?, copies)
}

fn build(cfg: &ModelConfig, opts: &PlanOptions, tiles: TilesMode, copies: usize) -> Result<Plan> {
    cfg.validate()?;
    check_options(cfg, opts)?;
    let lower_opts = LowerOptions { dtype: opts.dtype, kv_rows: opts.kv_rows(), burst: opts.burst };
    let mut programs = Vec::new();
    for &b in &opts.decode_buckets {
        programs.push(lower(cfg, Phase::Decode, b, lower_opts)?);
    }
    for &b in &opts.prefill_buckets {
        programs.push(lower(cfg, Phase::Prefill, b, lower_opts)?);
    }
    if opts.burst > 0 {
        for &b in &opts.decode_buckets {
            programs.push(lower(cfg, Phase::DecodeLoop, b, lower_opts)?);
        }
    }

    if opts.fuse {
        programs = programs.iter().map(crate::lower::fuse::fuse).collect::<Result<_>>()?;
    }
    // Timing only (`lower::fuse::ablate_attention`): decode without attention, wrong tokens.
    match super::knob("KILN_PLAN_ABLATE") {
        "" => {}
        "attention" => {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                eprintln!("kiln: KILN_PLAN_ABLATE=attention: decode plans have no attention (timing only; the tokens are wrong)")
            });
            programs = programs.iter().map(crate::lower::fuse::ablate_attention).collect::<Result<_>>()?;
        }
        other => anyhow::bail!("KILN_PLAN_ABLATE={other}: unknown; the one timing ablation is `attention` (unset it for real output)"),
    }
    let tile = match tiles {
        TilesMode::Off => false,
        TilesMode::On => true,
        TilesMode::Auto => programs.iter().all(|p| crate::lower::tiles::unpackable(p).is_none()),
    };
    if tile {
        let tiled = programs.iter().map(crate::lower::tiles::tile_weights).collect::<Result<Vec<_>>>()?;
        let plan = assemble(cfg, opts, &tiled, copies)?;
        // By default a plan whose second copy of the GEMV weights would not fit the budget is planned row-major.
        let over = opts.memory_budget.is_some_and(|b| plan.total_bytes() > b);
        if !(over && tiles == TilesMode::Auto) {
            return finish(plan, opts);
        }
    }
    finish(assemble(cfg, opts, &programs, copies)?, opts)
}

/// The plan of lowered (and fused, and maybe tiled) `programs`, unchecked.
fn assemble(cfg: &ModelConfig, opts: &PlanOptions, programs: &[Program], copies: usize) -> Result<Plan> {
    let (tensors, mut region_bytes) = layout_persistent(cfg, opts, programs)?;
    let by_name: BTreeMap<&str, &PlannedTensor> = tensors.iter().map(|t| (t.name.as_str(), t)).collect();
    let mut planned = Vec::new();
    for p in programs {
        planned.push(plan_program(p, &by_name, opts.max_context, copies)?);
    }
    region_bytes[RegionKind::Arena.index()] = planned.iter().map(|p| p.arena_bytes).max().unwrap_or(0);

    let plan = Plan {
        kiln_version: env!("CARGO_PKG_VERSION").to_string(),
        config: cfg.clone(),
        fingerprint: fingerprint(cfg, opts.dtype),
        options: opts.clone(),
        region_bytes,
        tensors,
        programs: planned,
    };
    Ok(plan)
}

/// `plan` checked against the memory budget and the plan checker.
fn finish(plan: Plan, opts: &PlanOptions) -> Result<Plan> {
    if let Some(budget) = opts.memory_budget {
        if plan.total_bytes() > budget {
            bail!(
                "the plan needs {} ({} bytes) of device memory ({}) but the memory budget is {}; lower --max-context, use fewer or smaller buckets, or a smaller dtype{}",
                fmt_bytes(plan.total_bytes()),
                plan.total_bytes(),
                super::dump::region_summary(&plan),
                fmt_bytes(budget),
                super::dump::tiles_hint(&plan)
            );
        }
    }
    super::check::check_plan(&plan)?;
    Ok(plan)
}

pub fn fmt_bytes(b: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = b as f64;
    let mut u = 0;
    while x >= 1024.0 && u < U.len() - 1 {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{x:.2} {}", U[u])
    }
}

/// Weights in the config's tensor-table order, except that tensors one launch reads as one
/// buffer (a packed QKV's weights, its biases) go back to back; state, step fields and outputs
/// in order of first appearance over the programs, each sized for its largest use. A weight of
/// the table that no op reads is not planned: a row-major original whose every reader reads its
/// tile-packed twin instead (an untied output projection, read only by decode's GEMVs).
fn layout_persistent(cfg: &ModelConfig, opts: &PlanOptions, programs: &[Program]) -> Result<(Vec<PlannedTensor>, [u64; N_REGIONS])> {
    let read: std::collections::BTreeSet<&str> =
        programs.iter().flat_map(|p| p.ops.iter().flat_map(move |n| n.op.reads()).map(move |v| p.value(v).name.as_str())).collect();
    let table = cfg.tensors();
    let mut order: Vec<(String, ValueClass, DType, Vec<usize>)> = table
        .iter()
        .filter(|t| read.contains(t.name.as_str()))
        .map(|t| (t.name.clone(), ValueClass::Weight, opts.dtype, t.shape.clone()))
        .collect();
    for p in programs {
        for v in &p.values {
            match v.class {
                ValueClass::Temp => {}
                ValueClass::Weight => {
                    // A tile-packed twin (`lower::tiles`) goes after the table, where it first appears.
                    let base = v.name.strip_suffix(crate::lower::tiles::SUFFIX);
                    let Some(e) = table.iter().find(|e| e.name == base.unwrap_or(&v.name)) else {
                        bail!("lowering uses weight `{}`, which is not in the model's tensor table", v.name);
                    };
                    ensure!(e.shape == v.shape.0, "weight `{}` lowered as {} but the tensor table says {:?}", v.name, v.shape, e.shape);
                    if base.is_some() && !order.iter().any(|e| e.0 == v.name) {
                        order.push((v.name.clone(), ValueClass::Weight, opts.dtype, v.shape.0.clone()));
                    }
                }
                class => match order.iter_mut().find(|e| e.0 == v.name) {
                    Some(e) => {
                        ensure!(e.1 == class && e.2 == v.dtype, "`{}` is used with two classes or dtypes", v.name);
                        ensure!(e.3[1..] == v.shape.0[1..], "`{}` is used with two row shapes", v.name);
                        e.3[0] = e.3[0].max(v.shape.0[0]);
                    }
                    None => order.push((v.name.clone(), class, v.dtype, v.shape.0.clone())),
                },
            }
        }
    }
    // Tensors a launch reads as one buffer (a packed QKV's weights, and its biases) go back to
    // back, in operand order, where the first of them would go; `lower::fuse` packs only
    // tensors of whole ALIGN blocks, so no alignment gap falls between them.
    let mut packs: Vec<Vec<&str>> = Vec::new();
    for p in programs {
        for node in &p.ops {
            if let Op::QkvLinear { weights, biases, outs: Qkv::Packed(_), .. }
            | Op::QkvRope { weights, biases, .. }
            | Op::QkvAttention { weights, biases, .. } = &node.op
            {
                let names = |ids: &[ValueId]| ids.iter().map(|&v| p.value(v).name.as_str()).collect::<Vec<_>>();
                packs.push(names(weights));
                packs.extend(biases.as_ref().map(|b| names(b)));
            }
        }
    }
    let mut region_bytes = [0u64; N_REGIONS];
    let mut tensors: Vec<PlannedTensor> = Vec::new();
    for region in [RegionKind::Weights, RegionKind::State, RegionKind::Step, RegionKind::Output, RegionKind::Ring] {
        for (name, ..) in order.iter().filter(|e| RegionKind::of_class(e.1) == region) {
            if tensors.iter().any(|t| &t.name == name) {
                continue;
            }
            let group = packs.iter().find(|g| g.contains(&name.as_str())).cloned().unwrap_or_else(|| vec![name.as_str()]);
            for member in group {
                let Some((name, class, dtype, shape)) = order.iter().find(|e| e.0 == member) else {
                    bail!("`{member}` is read packed with `{name}` but is not in the plan's tensor order");
                };
                let bytes = (shape.iter().product::<usize>() * dtype.size()) as u64;
                let offset = region_bytes[region.index()];
                region_bytes[region.index()] = align_up(offset + bytes);
                tensors.push(PlannedTensor {
                    name: name.clone(),
                    class: *class,
                    dtype: *dtype,
                    shape: shape.clone(),
                    region,
                    offset,
                    bytes,
                    layout: if name.ends_with(crate::lower::tiles::SUFFIX) { Layout::GemvTiles } else { Layout::RowMajor },
                });
            }
        }
    }
    Ok((tensors, region_bytes))
}

/// Free gaps of the arena as `offset -> length`, coalesced.
struct Arena {
    free: BTreeMap<u64, u64>,
    top: u64,
}

impl Arena {
    fn alloc(&mut self, bytes: u64) -> u64 {
        let best = self.free.iter().filter(|(_, &len)| len >= bytes).min_by_key(|(&off, &len)| (len, off)).map(|(&o, &l)| (o, l));
        if let Some((off, len)) = best {
            self.free.remove(&off);
            if len > bytes {
                self.free.insert(off + bytes, len - bytes);
            }
            return off;
        }
        // Extend at the top, absorbing a free gap that ends there.
        let mut off = self.top;
        if let Some((&o, &l)) = self.free.iter().next_back() {
            if o + l == self.top {
                self.free.remove(&o);
                off = o;
            }
        }
        self.top = off + bytes;
        off
    }
    fn release(&mut self, off: u64, bytes: u64) {
        let (mut off, mut len) = (off, bytes);
        if let Some((&po, &pl)) = self.free.range(..off).next_back() {
            if po + pl == off {
                self.free.remove(&po);
                off = po;
                len += pl;
            }
        }
        if let Some(&nl) = self.free.get(&(off + len)) {
            self.free.remove(&(off + len));
            len += nl;
        }
        if off + len == self.top {
            self.top = off;
        } else {
            self.free.insert(off, len);
        }
    }
}

/// An operand of a launch before addresses exist: a program value, or the scratch workspace
/// that one launch writes and the next one reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Operand {
    Value(ValueId),
    Workspace(usize),
}

struct LaunchSpec {
    name: String,
    kernel: Kernel,
    operands: Vec<(Operand, Access)>,
    /// Runs of operands (start, count) that are persistent tensors laid out back to back and
    /// passed to the kernel as one buffer (a packed QKV's weights, its biases).
    packs: Vec<(usize, usize)>,
}

struct WorkspaceSpec {
    name: String,
    bytes: u64,
}

/// Blocks the decode attention split aims at: one wave of its one block per SM (the split kernel
/// is compiled for one block per SM, `KILN_ATTN_SPLIT_MIN_BLOCKS`, 160-205 registers) on a 132-SM
/// GPU. Measured on the H200 (2026-12-01, bench/NOTES-decode.md session 13, call D, kiln bench
/// batch 1): 132 against the former 264 (two waves) took context 4096 from 210.7 / 922.3 /
/// 1146.8 to 220.7 / 999.7 / 1215.9 tok/s (Llama-3.1-8B / Llama-3.2-1B / Qwen2.5-0.5B shapes) and
/// left context 128 unchanged (234.7 / 1083.3 / 1356.2 -> 234.7 / 1084.0 / 1356.7).
pub const ATTENTION_SPLIT_TARGET_BLOCKS: u32 = 132;

/// Decode attention is split over the KV length so that a long context fills the GPU: about one
/// full wave of [`ATTENTION_SPLIT_TARGET_BLOCKS`] blocks at full context, counting the blocks the
/// kernel launches (one per row, kv head and chunk of at most 4 query heads,
/// [`super::geometry::attention_head_chunks`]), splits of at least 64 positions (a multiple of
/// 64). Fixed per bucket, so a growing sequence never re-plans.
///
/// `KILN_ATTN_TARGET_BLOCKS=<n>` at plan time replaces the target (an A/B timing knob).
pub fn attention_splits(rows: u32, heads: u32, kv_heads: u32, max_context: u32) -> (u32, u32) {
    let target_blocks =
        super::knob("KILN_ATTN_TARGET_BLOCKS").parse().ok().filter(|&n: &u32| n > 0).unwrap_or(ATTENTION_SPLIT_TARGET_BLOCKS);
    let blocks = rows * kv_heads * super::geometry::attention_head_chunks(heads, kv_heads);
    let max_splits = max_context.div_ceil(64).max(1);
    let splits = (target_blocks / blocks.max(1)).clamp(1, max_splits);
    let split_len = max_context.div_ceil(splits).div_ceil(64) * 64;
    (max_context.div_ceil(split_len), split_len)
}

/// Clusters of [`Kernel::AttentionCluster`] (8 blocks each, all resident at once) that one wave of
/// an H200 holds, for chunks of 1, 2 and 4 heads. The kernels' launch bounds give 3, 2 and 1 blocks
/// of 256 threads per SM (`kiln_attention_cluster_g{1,2,4}`: 72, 113 and 168 registers in bf16), and
/// a cluster must fit in one GPC: 14 clusters per resident block per SM, as the 0.5B shape's 14
/// clusters of one block per SM ran in one wave and the 1B shape's 16 did not (session 16,
/// bench/NOTES-decode.md). The H200's driver (`cuOccupancyMaxActiveClusters`, listed by `kiln
/// bench`) holds 45 clusters of the one-head kernel and 15 of the sampler's one block per SM.
pub const ATTENTION_CLUSTER_WAVE: [(u32, u32); 3] = [(1, 42), (2, 28), (4, 14)];

/// Whether decode attention may be planned as one cluster launch: on unless the plan-time knob
/// `KILN_ATTN_CLUSTER=0` (also read by `lower::fuse` rewrite 11, whose fused kernel is one too).
pub fn attention_cluster_enabled() -> bool {
    super::knob("KILN_ATTN_CLUSTER") != "0"
}

/// Decode attention in one launch ([`Kernel::AttentionCluster`], sm_90+; `KILN_ATTN_CLUSTER=0` at
/// plan time plans split + merge instead): eight splits of `ceil(max_context / 8)` positions (a
/// multiple of 16) per (row, kv head, chunk of query heads), the chunk the fewest heads (1, 2 or 4)
/// whose clusters fit in one wave ([`ATTENTION_CLUSTER_WAVE`]). None when no chunk fits (larger
/// batch buckets): a second wave of clusters costs more than the merge launch it saves.
pub fn attention_cluster(
    rows: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    scale: f32,
    kv_rows: u32,
    max_context: u32,
) -> Option<Kernel> {
    use super::geometry::{attention_cluster_grid, ATTENTION_SPLIT_MAX_HEAD_DIM};
    if !attention_cluster_enabled()
        || kv_heads == 0
        || !heads.is_multiple_of(kv_heads)
        || head_dim == 0
        || head_dim > ATTENTION_SPLIT_MAX_HEAD_DIM
    {
        return None;
    }
    let fits = |&(c, wave): &(u32, u32)| attention_cluster_grid(rows, heads, kv_heads, c)[0] <= wave;
    // `KILN_ATTN_CLUSTER_CHUNK=<1|2|4>` at plan time: that chunk wherever its clusters fit in one
    // wave (an A/B timing knob; the default rule elsewhere).
    let forced = super::knob("KILN_ATTN_CLUSTER_CHUNK").parse::<u32>().ok();
    let chunk_heads = match ATTENTION_CLUSTER_WAVE.into_iter().find(|w| Some(w.0) == forced).filter(fits) {
        Some((c, _)) => c,
        None => ATTENTION_CLUSTER_WAVE.into_iter().find(fits)?.0,
    };
    let (split_len, min_split_len) = cluster_split_len(max_context);
    Some(Kernel::AttentionCluster { rows, heads, kv_heads, head_dim, scale, kv_rows, split_len, min_split_len, chunk_heads, early: false })
}

/// The planned and shortest live split lengths of a decode attention over one cluster's
/// [`super::ATTENTION_CLUSTER_SPLITS`] splits (`AttentionCluster`, `QkvAttention`): eight of the max
/// context's length, rounded up to the quantum, and [`ATTENTION_MIN_SPLIT_LEN`] at most that.
fn cluster_split_len(max_context: u32) -> (u32, u32) {
    let splits = super::ATTENTION_CLUSTER_SPLITS;
    let split_len = max_context.div_ceil(splits).div_ceil(super::SPLIT_LEN_QUANTUM) * super::SPLIT_LEN_QUANTUM;
    (split_len, ATTENTION_MIN_SPLIT_LEN.min(split_len))
}

/// The shortest live split of decode attention ([`super::live_split_len`]): at context 128 the
/// planned 34 splits of 128 positions (max context 4352) would leave one or two splits active,
/// each block walking 128 positions; with splits of 32 there are 4-5, each one step of the
/// split kernel's 8 warps x 4 positions.
pub const ATTENTION_MIN_SPLIT_LEN: u32 = 32;

/// The launches of one op: usually one; decode attention becomes split + merge.
fn launches_of(p: &Program, name: &str, op: &Op, max_context: usize, workspaces: &mut Vec<WorkspaceSpec>) -> Vec<LaunchSpec> {
    let mut operands: Vec<(Operand, Access)> = op.reads().into_iter().map(|v| (Operand::Value(v), Access::Read)).collect();
    operands.extend(op.writes().into_iter().map(|v| (Operand::Value(v), Access::Write)));
    let mut kernel = kernel_of(p, op);
    // A packed QKV reads its three weights (and biases), consecutive operands, as one buffer.
    let packs = match *op {
        Op::QkvLinear { weights, biases, outs: Qkv::Packed(_), .. }
        | Op::QkvRope { weights, biases, .. }
        | Op::QkvAttention { weights, biases, .. } => {
            let at = |v: ValueId| operands.iter().position(|&(o, _)| o == Operand::Value(v)).expect("an operand of its op");
            [Some(weights), biases].into_iter().flatten().map(|run| (at(run[0]), run.len())).collect()
        }
        _ => Vec::new(),
    };
    // The fused QKV + attention's splits: the cluster attention's.
    if let Kernel::QkvAttention { split_len, min_split_len, .. } = &mut kernel {
        (*split_len, *min_split_len) = cluster_split_len(max_context as u32);
    }
    // Prefill attention on tensor cores where the kernel covers the shape.
    if let (Phase::Prefill, &Kernel::Attention { rows, heads, kv_heads, head_dim, scale, kv_rows }, Op::Attention { q, .. }) =
        (p.phase, &kernel, op)
    {
        if matches!(p.value(*q).dtype, DType::F16 | DType::BF16) && matches!(head_dim, 64 | 128) {
            kernel = Kernel::AttentionPrefill { rows, heads, kv_heads, head_dim, scale, kv_rows };
        }
    }
    // Prefill linears over more rows than the GEMV takes: a library tensor-core GEMM with a
    // planned workspace. The same kernel for every prefill bucket, so the library's algorithm
    // (chosen at load per weight shape) and with it every row's reduction order do not depend
    // on the bucket: padding stays invisible.
    if let Some(gemm) = library_gemm(p.phase, &kernel) {
        let ws = workspaces.len();
        workspaces.push(WorkspaceSpec { name: format!("{name}.workspace"), bytes: gemm.workspace_bytes() });
        operands.push((Operand::Workspace(ws), Access::Write));
        return vec![LaunchSpec { name: name.to_string(), kernel: gemm, operands, packs }];
    }
    // Device loops run the decode program as their body: the same split, so the same bits.
    if let (Phase::Decode | Phase::DecodeLoop, Kernel::Attention { rows, heads, kv_heads, head_dim, scale, kv_rows }) = (p.phase, &kernel) {
        if let Some(kernel) = attention_cluster(*rows, *heads, *kv_heads, *head_dim, *scale, *kv_rows, max_context as u32) {
            let Op::Attention { q, k_cache, v_cache, positions, cache_base, out, .. } = *op else {
                unreachable!("attention kernel from attention op")
            };
            let r = |v| (Operand::Value(v), Access::Read);
            return vec![LaunchSpec {
                name: name.to_string(),
                kernel,
                operands: vec![r(q), r(k_cache), r(v_cache), r(positions), r(cache_base), (Operand::Value(out), Access::Write)],
                packs: Vec::new(),
            }];
        }
        let (splits, split_len) = attention_splits(*rows, *heads, *kv_heads, max_context as u32);
        let min_split_len = ATTENTION_MIN_SPLIT_LEN.min(split_len);
        if splits > 1 {
            let Op::Attention { q, k_cache, v_cache, positions, cache_base, out, .. } = *op else {
                unreachable!("attention kernel from attention op")
            };
            let split = Kernel::AttentionSplit {
                rows: *rows,
                heads: *heads,
                kv_heads: *kv_heads,
                head_dim: *head_dim,
                scale: *scale,
                kv_rows: *kv_rows,
                splits,
                split_len,
                min_split_len,
                early: false,
            };
            let ws = workspaces.len();
            workspaces.push(WorkspaceSpec { name: format!("{name}.workspace"), bytes: split.workspace_bytes() });
            let r = |v| (Operand::Value(v), Access::Read);
            return vec![
                LaunchSpec {
                    name: format!("{name}.split"),
                    kernel: split,
                    operands: vec![r(q), r(k_cache), r(v_cache), r(positions), r(cache_base), (Operand::Workspace(ws), Access::Write)],
                    packs: Vec::new(),
                },
                LaunchSpec {
                    name: format!("{name}.merge"),
                    kernel: Kernel::AttentionMerge {
                        rows: *rows,
                        heads: *heads,
                        head_dim: *head_dim,
                        splits,
                        split_len,
                        min_split_len,
                        early: false,
                    },
                    operands: vec![(Operand::Workspace(ws), Access::Read), r(positions), (Operand::Value(out), Access::Write)],
                    packs: Vec::new(),
                },
            ];
        }
    }
    vec![LaunchSpec { name: name.to_string(), kernel, operands, packs }]
}

fn plan_program(p: &Program, persistent: &BTreeMap<&str, &PlannedTensor>, max_context: usize, copies: usize) -> Result<ProgramPlan> {
    let mut workspaces = Vec::new();
    let specs: Vec<LaunchSpec> = p.ops.iter().flat_map(|node| launches_of(p, &node.name, &node.op, max_context, &mut workspaces)).collect();

    // Lifetimes in launch indices: first write, last read.
    let key = |o: Operand| match o {
        Operand::Value(v) => v.index(),
        Operand::Workspace(w) => p.values.len() + w,
    };
    let n_keys = p.values.len() + workspaces.len();
    let mut first = vec![usize::MAX; n_keys];
    let mut last = vec![0usize; n_keys];
    let mut read_ever = vec![false; n_keys];
    for (i, spec) in specs.iter().enumerate() {
        for &(o, access) in &spec.operands {
            match access {
                Access::Write => first[key(o)] = first[key(o)].min(i),
                Access::Read => {
                    last[key(o)] = last[key(o)].max(i);
                    read_ever[key(o)] = true;
                }
            }
        }
    }
    let in_arena = |o: Operand| match o {
        Operand::Value(v) => p.value(v).class == ValueClass::Temp,
        Operand::Workspace(_) => true,
    };
    let size_of = |o: Operand| match o {
        Operand::Value(v) => p.value(v).bytes(),
        Operand::Workspace(w) => workspaces[w].bytes,
    };
    let name_of = |o: Operand| match o {
        Operand::Value(v) => p.value(v).name.clone(),
        Operand::Workspace(w) => workspaces[w].name.clone(),
    };
    let mut arena = Arena { free: BTreeMap::new(), top: 0 };
    let mut peak = 0u64;
    let mut offset = vec![0u64; n_keys];
    let mut temps = Vec::new();
    let mut naive = 0u64;
    for (i, spec) in specs.iter().enumerate() {
        for &(o, access) in &spec.operands {
            if access == Access::Write && in_arena(o) && first[key(o)] == i {
                let bytes = align_up(size_of(o));
                offset[key(o)] = arena.alloc(bytes);
                peak = peak.max(arena.top);
                naive += bytes;
                temps.push(TempAlloc {
                    name: name_of(o),
                    offset: offset[key(o)],
                    bytes: size_of(o),
                    first: i as u32,
                    last: last[key(o)].max(i) as u32,
                });
            }
        }
        // Operands read for the last time here die after this launch; so do scratch
        // workspaces no later launch reads (written here, never read).
        let mut dying: Vec<Operand> = spec
            .operands
            .iter()
            .filter(|&&(o, access)| {
                in_arena(o)
                    && ((access == Access::Read && last[key(o)] == i)
                        || (access == Access::Write && first[key(o)] == i && !read_ever[key(o)]))
            })
            .map(|&(o, _)| o)
            .collect();
        dying.sort_by_key(|&o| key(o));
        dying.dedup();
        for o in dying {
            arena.release(offset[key(o)], align_up(size_of(o)));
        }
    }

    let buf = |o: Operand, access: Access| -> Result<BufArg> {
        Ok(match o {
            Operand::Workspace(w) => {
                BufArg { region: RegionKind::Arena, offset: offset[key(o)], bytes: workspaces[w].bytes, dtype: DType::F32, access }
            }
            Operand::Value(v) => {
                let val = p.value(v);
                if val.class == ValueClass::Temp {
                    BufArg { region: RegionKind::Arena, offset: offset[key(o)], bytes: val.bytes(), dtype: val.dtype, access }
                } else {
                    let t = persistent.get(val.name.as_str()).ok_or_else(|| anyhow::anyhow!("`{}` has no planned offset", val.name))?;
                    BufArg { region: t.region, offset: t.offset, bytes: val.bytes(), dtype: val.dtype, access }
                }
            }
        })
    };
    let mut launches = Vec::with_capacity(specs.len());
    for spec in specs {
        let mut bufs = spec.operands.iter().map(|&(o, a)| buf(o, a)).collect::<Result<Vec<_>>>()?;
        for &(start, count) in spec.packs.iter().rev() {
            let run: Vec<BufArg> = bufs.drain(start..start + count).collect();
            for w in run.windows(2) {
                ensure!(
                    w[1].region == w[0].region && w[1].offset == w[0].offset + w[0].bytes && w[1].dtype == w[0].dtype,
                    "planner bug: launch `{}` reads operands {start}..{} as one buffer, but they are not laid out back to back",
                    spec.name,
                    start + count
                );
            }
            let bytes = run.iter().map(|b| b.bytes).sum();
            bufs.insert(start, BufArg { bytes, ..run[0] });
        }
        let g = super::geometry::launch_geometry(&spec.kernel, &bufs);
        launches.push(Launch {
            name: spec.name,
            kernel: spec.kernel,
            bufs,
            grid: g.grid,
            block: g.block,
            shared_bytes: g.shared_bytes,
            occupancy: g.occupancy,
        });
    }
    let deps = dependencies(&launches);
    let mut planned = ProgramPlan {
        phase: p.phase,
        bucket: p.bucket,
        tokens: p.tokens,
        sample_rows: p.sample_rows,
        launches,
        deps,
        temps,
        arena_bytes: peak,
        naive_bytes: naive,
    };
    if p.phase == Phase::DecodeLoop {
        planned = unroll(planned, copies);
    }
    plan_release_early(&mut planned)?;
    plan_early_reads(&mut planned);
    plan_l2_prefetch(&mut planned);
    Ok(planned)
}

/// Which one-block-per-row launches of a decode program let their dependents launch before they
/// wait (`Kernel::Gather { release }`, `Kernel::RmsNorm { release }`): the plan-time knob
/// `KILN_RELEASE_EARLY`, a comma-separated list of `gather` (the token embedding) and `norm` (the
/// output norm), `0` for none; unset, `norm`. Measured on an H200 (session 66, the 0.5B at batch
/// 1, context 128, pads 0 / 32 / 64 / 1024, two rounds; bench/results/2026-12-06-decode-s66.md):
/// `norm` +0.17% (paired +0.17%, every pad), `gather,norm` +0.13% (paired +0.11%): the released
/// gather costs layer 0's early reads about what it saves.
///
/// Such a grid runs ~1 us and waits before it releases, so its dependent (layer 0's first launch,
/// the logits GEMV) is launched only when the grid before it is complete, and its launch and its
/// blocks' work before their wait show on the critical path: the 0.5B's block trace releases them
/// 2.3 / 2.75 us after the gather / output norm end, against ~0.45 us after a wide grid
/// (bench/NOTES-decode.md, session 58). Released first, they launch while the grid before runs.
///
/// A released launch is no barrier for early reads ([`super::early_reads_safe`]), so a launch is
/// released only where that costs nothing but its own dependents' early reads (in an unrolled
/// device loop: layer 0's attention of each copy after the first, which then reads its position
/// after its wait; the later layers keep theirs behind layer 0's `QkvAttention`, itself a barrier).
fn plan_release_early(p: &mut ProgramPlan) -> Result<()> {
    let knob = match super::knob("KILN_RELEASE_EARLY") {
        "" => "norm",
        k => k,
    };
    let (mut gather, mut norm) = (false, false);
    for w in knob.split(',').map(str::trim).filter(|w| !w.is_empty() && *w != "0") {
        match w {
            "gather" => gather = true,
            "norm" => norm = true,
            _ => bail!("KILN_RELEASE_EARLY={knob}: give `gather`, `norm` or both, comma-separated (0: none; unset: norm)"),
        }
    }
    if !(gather || norm) || !matches!(p.phase, Phase::Decode | Phase::DecodeLoop) {
        return Ok(());
    }
    let safe_set = |p: &ProgramPlan| (0..p.launches.len()).map(|i| super::early_reads_safe(&p.launches, &p.deps, i)).collect::<Vec<_>>();
    let set = |p: &mut ProgramPlan, twins: &[usize], to: bool| {
        for &i in twins {
            if let Kernel::Gather { release, .. } | Kernel::RmsNorm { release, .. } = &mut p.launches[i].kernel {
                *release = to;
            }
        }
    };
    // The copies of an unrolled device loop stay alike (the plan checker's rule 11): a launch and
    // its twins in the other copies are released together or not at all.
    let (n, body) = (p.launches.len(), p.body_len());
    let mut safe = safe_set(p);
    // The output norm: the body's last `rms_norm` (an unfused plan's layer norms are not measured).
    let output_norm = (0..body).rev().find(|&k| matches!(p.launches[k].kernel, Kernel::RmsNorm { .. }));
    for k in 0..body {
        let want = match p.launches[k].kernel {
            Kernel::Gather { .. } => gather,
            Kernel::RmsNorm { .. } => norm && Some(k) == output_norm,
            _ => false,
        };
        if !want {
            continue;
        }
        let twins: Vec<usize> = (k..n).step_by(body).collect();
        set(p, &twins, true);
        let now = safe_set(p);
        let direct = |j: usize| p.deps.iter().any(|&(a, b)| twins.contains(&(a as usize)) && b as usize == j);
        if (0..n).all(|j| now[j] || !safe[j] || direct(j)) {
            safe = now;
        } else {
            set(p, &twins, false);
        }
    }
    Ok(())
}

/// Bytes per block of a planned L2 prefetch ([`plan_l2_prefetch`]), unless the plan-time knob
/// `KILN_L2_PREFETCH=<bytes>` says otherwise (`0`: none). Measured on the H200 (batch 1, context
/// 128, two rounds each, same machine, against no prefetch; bench/results/2026-12-04-h200-decode-ab-s38.md
/// and -s39.md, where it was a compile-time probe, `KILN_O_L2PF`): 32 KiB per block took the
/// Llama-3.2-1B shape +0.5% and +0.7% on two machines, the Qwen2.5-0.5B +0.2% / +0.3%, the
/// Llama-3.1-8B +0.05% / +0.2%; 48-64 KiB gained less on the 1B and lost up to 0.9% on the others,
/// 128 KiB lost 0.2-3.2%, 256 KiB 4-7%. Bytes parked in the L2 for a later reader cost the weight
/// streams running meanwhile, so the span stays small.
pub const L2_PREFETCH_BYTES: u32 = 32 * 1024;

/// The planned L2 prefetch: a decode o projection (a tensor-core GEMV `FusedLinear` with a
/// residual and no norm, one block per tile, right after an attention launch) gets the first
/// weight of the next GEMV-family launch (the gate/up) as an operand, `l2_prefetch` bytes per
/// block: its blocks, resident and idle at their wait while the attention runs and leaves the
/// DRAM idle, ask the L2 for the first `grid x l2_prefetch` bytes of that weight (the tiles the
/// gate/up's first blocks read first) before they wait. A hint: no value depends on it, the CPU
/// reference ignores it, and the kernel issues it only on the path planned here
/// (`kernels/linear_fused.cu` `L2Span`).
fn plan_l2_prefetch(p: &mut ProgramPlan) {
    let per_block = super::knob("KILN_L2_PREFETCH").parse::<u32>().unwrap_or(L2_PREFETCH_BYTES) / 16 * 16;
    if per_block == 0 {
        return;
    }
    for i in 1..p.launches.len() {
        let after_attention = matches!(
            p.launches[i - 1].kernel,
            Kernel::Attention { .. } | Kernel::AttentionCluster { .. } | Kernel::AttentionMerge { .. } | Kernel::QkvAttention { .. }
        );
        let l = &p.launches[i];
        let Kernel::FusedLinear { norm: false, residual: true, l2_prefetch: 0, out_norm: false, .. } = l.kernel else {
            continue;
        };
        // The GEMV (`gemv_tiles`: at most 8 rows), one block per tile, on its tensor-core path.
        let one_per_tile = super::geometry::gemv_tiles(&l.kernel) == Some(l.grid[0]);
        if !after_attention || !one_per_tile || !super::geometry::gemv_tensor_cores(&l.kernel, &l.bufs) {
            continue;
        }
        let Some(next) = p.launches[i + 1..].iter().find_map(gemv_matrix) else { continue };
        let blocks = l.grid[0] as u64;
        let bytes = (per_block as u64).min(next.bytes / blocks / 16 * 16);
        if bytes == 0 {
            continue;
        }
        let span = BufArg { region: next.region, offset: next.offset, bytes: blocks * bytes, dtype: next.dtype, access: Access::Read };
        let l = &mut p.launches[i];
        let out = l.bufs.len() - 1;
        l.bufs.insert(out, span);
        if let Kernel::FusedLinear { l2_prefetch, .. } = &mut l.kernel {
            *l2_prefetch = bytes as u32;
        }
    }
}

/// The (first) weight matrix a GEMV-family launch reads, where its operands list it.
fn gemv_matrix(l: &Launch) -> Option<BufArg> {
    let at = match l.kernel {
        Kernel::Linear { .. } => 1,
        Kernel::FusedLinear { norm, .. }
        | Kernel::GatedLinear { norm, .. }
        | Kernel::QkvLinear { norm, .. }
        | Kernel::QkvRope { norm, .. } => 1 + norm as usize,
        _ => return None,
    };
    l.bufs.get(at).filter(|b| b.region == RegionKind::Weights).cloned()
}

/// Planned early reads: operands whose writers are complete whenever the launch starts
/// (`plan::early_reads_safe`). The decode attention's too unless `KILN_ATTN_EARLY=0` at plan time
/// (the A/B knob: on the H200, session 14 call A, early reads gave +5.2% / +1.5% / +0.5% at batch
/// 1, context 128, on the 0.5B / 1B / 8B shapes, bench/results/2026-12-01-h200-decode-ab-s14.md).
///
/// The copies of an unrolled device loop stay alike (the plan checker's rule 11): a launch reads
/// early only where its twin in every copy may.
fn plan_early_reads(p: &mut ProgramPlan) {
    let attn_early = super::knob("KILN_ATTN_EARLY") != "0";
    let each: Vec<bool> = (0..p.launches.len()).map(|i| super::early_reads_safe(&p.launches, &p.deps, i)).collect();
    let (n, body) = (p.launches.len(), p.body_len());
    for i in 0..n {
        let k = i % body;
        let safe = (k..n).step_by(body).all(|j| each[j]);
        match &mut p.launches[i].kernel {
            Kernel::QkvRope { early, .. } | Kernel::QkvAttention { early, .. } => *early = safe,
            Kernel::AttentionSplit { early, .. } | Kernel::AttentionMerge { early, .. } | Kernel::AttentionCluster { early, .. } => {
                *early = safe && attn_early
            }
            _ => {}
        }
    }
}

/// Copies of a device loop's body per pass of its WHILE node ([`ProgramPlan::loop_copies`]):
/// [`LOOP_UNROLL`], or `KILN_LOOP_UNROLL=<n>` at plan time (1: no unrolling; an A/B knob).
pub fn loop_unroll() -> Result<usize> {
    match super::knob("KILN_LOOP_UNROLL") {
        "" => Ok(LOOP_UNROLL),
        v => match v.parse::<usize>() {
            Ok(n) if (1..=16).contains(&n) => Ok(n),
            _ => bail!("KILN_LOOP_UNROLL={v}: give the copies of a device loop's body per pass, 1 to 16 (unset: {LOOP_UNROLL})"),
        },
    }
}

/// Default copies of a device loop's body per pass of the graph's WHILE node. The node
/// re-launches its body after the last kernel of each pass (~2-4 us on an H200, the block
/// trace's gap after `sample_advance`, bench/NOTES-decode.md sessions 15 and 34); copies joined
/// by programmatic edges cost a launch boundary instead.
pub const LOOP_UNROLL: usize = 2;

/// `p` (a device loop) with its launches repeated `copies` times: copy `c > 0`'s launches and
/// temps named `u{c}.` + the original, at the same operands (a copy runs after the one before
/// it, as the next pass of the loop would), the temps' live ranges moved along, and the
/// dependencies derived again over the whole list (so each copy's `gather` follows the previous
/// copy's `advance`).
fn unroll(mut p: ProgramPlan, copies: usize) -> ProgramPlan {
    if copies <= 1 {
        return p;
    }
    let (body, temps) = (p.launches.clone(), p.temps.clone());
    let n = body.len() as u32;
    for c in 1..copies as u32 {
        p.launches.extend(body.iter().map(|l| Launch { name: format!("u{c}.{}", l.name), ..l.clone() }));
        p.temps.extend(temps.iter().map(|t| TempAlloc {
            name: format!("u{c}.{}", t.name),
            first: t.first + c * n,
            last: t.last + c * n,
            ..t.clone()
        }));
    }
    p.naive_bytes *= copies as u64;
    p.deps = dependencies(&p.launches);
    p
}

/// The library GEMM (cuBLASLt) that runs `kernel` instead: a prefill linear over more rows than the GEMV takes.
fn library_gemm(phase: Phase, kernel: &Kernel) -> Option<Kernel> {
    match (phase, kernel) {
        (Phase::Prefill, &Kernel::Linear { rows, in_features, out_features, bias, argmax: false, stats: None })
            if rows > super::geometry::LINEAR_GEMV_MAX_ROWS =>
        {
            Some(Kernel::Gemm { rows, in_features, out_features, bias })
        }
        _ => None,
    }
}

/// Whether the planner runs `op` of `p` as a library GEMM, which reads its weights row-major
/// (`lower::tiles` keeps them so).
pub(crate) fn runs_as_library_gemm(p: &Program, op: &Op) -> bool {
    library_gemm(p.phase, &kernel_of(p, op)).is_some()
}

fn kernel_of(p: &Program, op: &Op) -> Kernel {
    let dims = |v: ValueId| p.value(v).shape.dims().to_vec();
    let u = |x: usize| x as u32;
    match *op {
        Op::Gather { table, out, .. } => {
            let o = dims(out);
            Kernel::Gather { rows: u(o[0]), dim: u(o[1]), table_rows: u(dims(table)[0]), release: false }
        }
        Op::RmsNorm { x, eps, .. } => {
            let d = dims(x);
            Kernel::RmsNorm { rows: u(d[0]), dim: u(d[1]), eps, release: false }
        }
        Op::AddRmsNorm { a, eps, .. } => {
            let d = dims(a);
            Kernel::AddRmsNorm { rows: u(d[0]), dim: u(d[1]), eps }
        }
        Op::HeadRmsNorm { x, head_dim, eps, .. } => {
            let d = dims(x);
            Kernel::HeadRmsNorm { rows: u(d[0]), heads: u(d[1]) / head_dim, head_dim, eps }
        }
        Op::Linear { x, weight, bias, .. } => {
            let (dx, dw) = (dims(x), dims(weight));
            let (rows, in_features, out_features) = (u(dx[0]), u(dx[1]), u(dw[0]));
            Kernel::Linear { rows, in_features, out_features, bias: bias.is_some(), argmax: false, stats: None }
        }
        Op::LinearArgmax { x, weight, .. } => {
            let (dx, dw) = (dims(x), dims(weight));
            Kernel::Linear { rows: u(dx[0]), in_features: u(dx[1]), out_features: u(dw[0]), bias: false, argmax: true, stats: None }
        }
        Op::NormedLinear { x, weight, argmax, eps, .. } => {
            let (dx, dw) = (dims(x), dims(weight));
            let (rows, in_features, out_features) = (u(dx[0]), u(dx[1]), u(dw[0]));
            Kernel::Linear { rows, in_features, out_features, bias: false, argmax: argmax.is_some(), stats: Some(eps) }
        }
        Op::FusedLinear { x, norm, weight, bias, residual, out_norm, .. } => {
            let (dx, dw) = (dims(x), dims(weight));
            Kernel::FusedLinear {
                rows: u(dx[0]),
                in_features: u(dx[1]),
                out_features: u(dw[0]),
                norm: norm.is_some(),
                eps: norm.map(|n| n.1).unwrap_or(0.0),
                bias: bias.is_some(),
                residual: residual.is_some(),
                l2_prefetch: 0,
                out_norm: out_norm.is_some(),
            }
        }
        // Packed: one linear over the three weights, laid out back to back (`layout_persistent`).
        Op::QkvLinear { x, norm, weights, biases, outs: Qkv::Packed(_) } => {
            let dx = dims(x);
            let (rows, in_features) = (u(dx[0]), u(dx[1]));
            let out_features = weights.iter().map(|&w| u(dims(w)[0])).sum();
            match norm {
                None => Kernel::Linear { rows, in_features, out_features, bias: biases.is_some(), argmax: false, stats: None },
                Some((_, eps)) => Kernel::FusedLinear {
                    rows,
                    in_features,
                    out_features,
                    norm: true,
                    eps,
                    bias: biases.is_some(),
                    residual: false,
                    l2_prefetch: 0,
                    out_norm: false,
                },
            }
        }
        Op::QkvLinear { x, norm, weights, biases, outs: Qkv::Split(_) } => {
            let dx = dims(x);
            Kernel::QkvLinear {
                rows: u(dx[0]),
                in_features: u(dx[1]),
                out_features: weights.map(|w| u(dims(w)[0])),
                norm: norm.is_some(),
                eps: norm.map(|n| n.1).unwrap_or(0.0),
                bias: biases.is_some(),
            }
        }
        Op::QkvRope { x, norm, biases, q_out, k_cache, head_dim, rope, .. } => {
            let (dx, dq, dc) = (dims(x), dims(q_out), dims(k_cache));
            Kernel::QkvRope {
                rows: u(dx[0]),
                in_features: u(dx[1]),
                heads: u(dq[1]) / head_dim,
                kv_heads: u(dc[1]) / head_dim,
                head_dim,
                kv_rows: u(dc[0]),
                norm: norm.is_some(),
                eps: norm.map(|n| n.1).unwrap_or(0.0),
                bias: biases.is_some(),
                early: false,
                rope,
            }
        }
        // Split lengths from the max context: set by `launches_of`.
        Op::QkvAttention { x, norm, biases, k_cache, out, head_dim, rope, scale, .. } => {
            let (dx, dout, dc) = (dims(x), dims(out), dims(k_cache));
            Kernel::QkvAttention {
                in_features: u(dx[1]),
                heads: u(dout[1]) / head_dim,
                kv_heads: u(dc[1]) / head_dim,
                head_dim,
                kv_rows: u(dc[0]),
                norm: norm.is_some(),
                eps: norm.map(|n| n.1).unwrap_or(0.0),
                bias: biases.is_some(),
                rope,
                scale,
                split_len: 0,
                min_split_len: 0,
                early: false,
            }
        }
        Op::GatedLinear { x, norm, gate, .. } => {
            let (dx, dw) = (dims(x), dims(gate));
            Kernel::GatedLinear {
                rows: u(dx[0]),
                in_features: u(dx[1]),
                out_features: u(dw[0]),
                norm: norm.is_some(),
                eps: norm.map(|n| n.1).unwrap_or(0.0),
            }
        }
        Op::Rope { x, head_dim, rope, .. } => {
            let d = dims(x);
            Kernel::Rope { rows: u(d[0]), heads: u(d[1]) / head_dim, head_dim, rope }
        }
        Op::RopeKvWrite { qkv, q_out, k_cache, head_dim, rope, .. } => {
            let (dq, dc) = (dims(q_out), dims(k_cache));
            Kernel::RopeKvWrite {
                rows: u(dq[0]),
                heads: u(dq[1]) / head_dim,
                kv_heads: u(dc[1]) / head_dim,
                head_dim,
                kv_rows: u(dc[0]),
                rope,
                packed: matches!(qkv, Qkv::Packed(_)),
            }
        }
        Op::KvWrite { k, k_cache, .. } => {
            let (dk, dc) = (dims(k), dims(k_cache));
            Kernel::KvWrite { rows: u(dk[0]), kv_dim: u(dk[1]), kv_rows: u(dc[0]) }
        }
        Op::Attention { q, k_cache, n_heads, n_kv_heads, head_dim, scale, .. } => {
            Kernel::Attention { rows: u(dims(q)[0]), heads: n_heads, kv_heads: n_kv_heads, head_dim, scale, kv_rows: u(dims(k_cache)[0]) }
        }
        Op::SwiGlu { gate, .. } => Kernel::SwiGlu { n: u(p.value(gate).shape.numel()) },
        Op::Add { a, .. } => Kernel::Add { n: u(p.value(a).shape.numel()) },
        Op::Sample { logits, .. } => {
            let d = dims(logits);
            Kernel::Sample { rows: u(d[0]), vocab: u(d[1]) }
        }
        Op::Advance { tokens, stop_ids, ring, .. } => {
            let rows = p.value(tokens).shape.numel();
            Kernel::Advance { rows: u(rows), burst: u(p.value(ring).shape.numel() / rows), stop_ids: u(p.value(stop_ids).shape.numel()) }
        }
        // One row (the verifier's rule): the ring holds the burst.
        Op::SampleAdvance { logits, stop_ids, ring, argmax, .. } => Kernel::SampleAdvance {
            vocab: u(dims(logits)[1]),
            burst: u(p.value(ring).shape.numel()),
            stop_ids: u(p.value(stop_ids).shape.numel()),
            argmax: argmax.is_some(),
        },
    }
}

fn overlaps(a: &BufArg, b: &BufArg) -> bool {
    a.region == b.region && a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes
}

/// Edges between launches that touch overlapping bytes where at least one writes, reduced to
/// the transitive reduction (petgraph), sorted.
fn dependencies(launches: &[Launch]) -> Vec<(u32, u32)> {
    let n = launches.len();
    let mut g: DiGraph<(), ()> = DiGraph::with_capacity(n, 4 * n);
    let nodes: Vec<_> = (0..n).map(|_| g.add_node(())).collect();
    for j in 0..n {
        for i in 0..j {
            let conflict = launches[i]
                .bufs
                .iter()
                .any(|a| launches[j].bufs.iter().any(|b| (a.access == Access::Write || b.access == Access::Write) && overlaps(a, b)));
            if conflict {
                g.add_edge(nodes[i], nodes[j], ());
            }
        }
    }
    // Launch order is a topological order (edges only go forward).
    let topo: Vec<_> = nodes.clone();
    // Node i of the toposorted list is launch i, since launch order is the topological order.
    let (adj, _) = petgraph::algo::tred::dag_to_toposorted_adjacency_list::<_, u32>(&g, &topo);
    let (reduction, _closure) = petgraph::algo::tred::dag_transitive_reduction_closure::<_, u32>(&adj);
    let mut edges: Vec<(u32, u32)> = Vec::new();
    for e in petgraph::visit::IntoEdgeReferences::edge_references(&reduction) {
        use petgraph::visit::EdgeRef;
        edges.push((e.source(), e.target()));
    }
    edges.sort();
    edges
}
