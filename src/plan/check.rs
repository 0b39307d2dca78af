//! The plan checker. Independent of the planner on purpose (it shares no code with
//! `planner.rs`): it re-derives every fact it needs from the plan's own records, the way
//! regalloc2's checker re-derives allocation correctness. Every built plan and every loaded
//! plan file is checked.
//!
//! Invariants proven:
//! 1. Every region size, tensor offset and launch operand offset is a multiple of `ALIGN`;
//!    every tensor and operand lies inside its region.
//! 2. Persistent tensors of one region never share a byte.
//! 3. An operand outside the arena lies inside one planned tensor of its region, starting at
//!    its offset (a program may use a prefix of a step field or output), or is read-only and
//!    covers exactly a run of weights laid out back to back (a packed QKV); weights are never
//!    written by a launch, step fields and the ring only by `advance` (the device loop's step).
//! 4. Within one launch, a written operand shares no byte with any other operand.
//! 5. Liveness, by simulation over a shadow of the arena and output regions: each launch that
//!    reads an arena or output operand finds exactly those bytes last written as that same
//!    operand (same offset and length) by an earlier launch of the same program, and not
//!    clobbered since. A planner bug that overlaps two live buffers fails here.
//! 6. The dependency edges order every pair of launches that conflict (touch a common byte,
//!    one of them writing): the later one is reachable from the earlier one.
//! 7. The temps table agrees with the launches: every arena operand is exactly one temp, written
//!    at its first launch and read only while live; temps live at a common launch share no
//!    byte. (Invariant 5 alone cannot tell two same-sized buffers at one offset apart.)
//! 8. A launch asks for a kernel variant only where one exists: the dense GEMV (3 blocks per
//!    SM, compiled for at most 256 threads) only for the linear kernels (`qkv_rope` included)
//!    with 256-thread blocks,
//!    for `gated_linear` only with a staged norm and for `fused_linear` only with a norm, the
//!    tensor-core paths those variants have (`geometry::dense_variant_covers`).
//! 9. Planned early reads (the `early` of `QkvRope`, `AttentionSplit`, `AttentionMerge` and `AttentionCluster`:
//!    positions and cache bases read before the kernel waits for the grids before it) only
//!    where no earlier launch of the program writes those bytes (the values then predate the
//!    program), or where a barrier stands between: an earlier launch whose kernel waits before
//!    it releases its dependents (`Kernel::waits_before_release`), of which the reader descends
//!    and every writer is an ancestor along the dependency edges (the copies of an unrolled
//!    device loop, each starting with a `gather`). GEMV kernels let their dependents launch
//!    before they wait, so without one a grid several launches back may still be running.
//! 10. Weight layouts agree with the kernels that read them: a tile-packed tensor
//!     (`Layout::GemvTiles`) is a 16-bit `[N, K]` weight with N % 16 == 0 and K % 32 == 0, the
//!     twin of a weight of the model's table of its shape (and type, where that one is planned
//!     too: a weight only its twin's readers read is not planned); in a plan with any, every matrix weight a
//!     GEMV-family launch (linear, fused, gated, QKV linears, QKV-RoPE) reads is one, and in every
//!     plan the matrices other launches read (the library GEMMs, the gather) are row-major. The
//!     runtime compiles one layout per plan (`Plan::gemv_tiles`), so a mix would read wrong elements.
//! 11. A device loop's launches are `loop_copies` copies of one step, the first ending in its
//!     `advance` (or `sample_advance`), each later copy the first's launches named `u{c}.` + theirs
//!     with the same kernel, operands and geometry: the first copy alone is the whole step the
//!     executors run per pass for a budget that is not a multiple of the copies.
//! 12. Argmax keys pair up: in program order, each key a `Linear { argmax }` folds into is next
//!     read (and zeroed) by a `SampleAdvance { argmax }` of that linear's logits, no launch touching
//!     it in between, and every keyed sampler reads a key folded since it was last zeroed.
//! 13. A planned L2 prefetch (`FusedLinear { l2_prefetch }` > 0, a multiple of 16 bytes) has its
//!     span operand right before `out`: read-only, in the weights, exactly grid x `l2_prefetch`
//!     bytes, so that every block's span lies inside it (the kernel asks the L2 for
//!     `[b * l2_prefetch, (b + 1) * l2_prefetch)` from its start).
//! 14. An output norm carried by its producer (`ir::OutNorm`) runs where its kernels exist and
//!     compute it: the producing `FusedLinear { out_norm }` is a bf16 tensor-core GEMV (at most 8
//!     rows, in % 8 == 0, out % 8 == 0) in its default variant with no L2 prefetch, writing a
//!     bf16 `out` and f32 `sumsq` `[rows, out / 8]` after it; the reading `Linear { stats }` is a
//!     bias-less bf16 GEMV of the same kind whose second operand is such a `sumsq`.
//! 15. QKV-RoPE with the attention in one launch (`Kernel::QkvAttention`, `lower::fuse` rewrite 11)
//!     only where its kernel exists (`geometry::qkv_attention_fits`: bf16, head_dim 64, at most
//!     1024 inputs and 14 heads), with operands of the sizes its shape gives and one cluster of 8
//!     blocks per query head.

use super::geometry::{dense_variant_covers, GEMV_DENSE_BLOCKS_PER_SM, LINEAR_GEMV_THREADS};
use super::{Access, BufArg, Kernel, Layout, Plan, PlannedTensor, ProgramPlan, RegionKind, ALIGN};
use crate::ir::{DType, ValueClass};
use anyhow::{bail, ensure, Result};
use std::collections::BTreeMap;

pub fn check_plan(plan: &Plan) -> Result<()> {
    check_inner(plan).map_err(|e| {
        e.context("plan check failed: this plan is inconsistent and must not run (re-plan with this kiln, and report a bug if it persists)")
    })
}

fn check_inner(plan: &Plan) -> Result<()> {
    for r in RegionKind::ALL {
        ensure!(
            plan.region_bytes[r.index()].is_multiple_of(ALIGN),
            "region {} size {} is not {ALIGN}-aligned",
            r.name(),
            plan.region_bytes[r.index()]
        );
    }
    // 1 + 2: persistent tensors.
    let mut per_region: BTreeMap<RegionKind, Vec<(u64, u64, &str)>> = BTreeMap::new();
    for t in &plan.tensors {
        ensure!(t.offset.is_multiple_of(ALIGN), "tensor `{}` offset {} is not aligned", t.name, t.offset);
        ensure!(
            t.offset + t.bytes <= plan.region_bytes[t.region.index()],
            "tensor `{}` [{}, {}) overruns region {} ({} bytes)",
            t.name,
            t.offset,
            t.offset + t.bytes,
            t.region.name(),
            plan.region_bytes[t.region.index()]
        );
        ensure!(t.region != RegionKind::Arena, "persistent tensor `{}` placed in the arena", t.name);
        let numel: usize = t.shape.iter().product();
        ensure!(t.bytes == (numel * t.dtype.size()) as u64, "tensor `{}` size disagrees with its shape", t.name);
        per_region.entry(t.region).or_default().push((t.offset, t.offset + t.bytes, &t.name));
    }
    for (r, mut spans) in per_region {
        spans.sort();
        for w in spans.windows(2) {
            ensure!(w[0].1 <= w[1].0, "tensors `{}` and `{}` overlap in region {}", w[0].2, w[1].2, r.name());
        }
    }
    for p in &plan.programs {
        check_program(plan, p).map_err(|e| e.context(format!("in program {}", p.label())))?;
    }
    check_layouts(plan)
}

/// Invariant 10: weight layouts.
fn check_layouts(plan: &Plan) -> Result<()> {
    let half = |d: DType| matches!(d, DType::F16 | DType::BF16);
    let table = plan.config.tensors();
    for t in plan.tensors.iter().filter(|t| t.layout == Layout::GemvTiles) {
        ensure!(
            t.region == RegionKind::Weights && half(t.dtype) && t.shape.len() == 2 && t.shape[0] % 16 == 0 && t.shape[1] % 32 == 0,
            "tensor `{}` ({} {:?} in region {}) is laid out {} but is no 16-bit [N, K] weight with N % 16 == 0 and K % 32 == 0",
            t.name,
            t.dtype,
            t.shape,
            t.region.name(),
            t.layout.name()
        );
        // Loaded from a weight of the model's table of the same shape; where that weight is planned
        // too (something reads it row-major), of the same type.
        let in_table = t.source() != t.name && table.iter().any(|s| s.name == t.source() && s.shape == t.shape);
        let planned = plan.tensors.iter().find(|s| s.name == t.source());
        ensure!(
            in_table && planned.is_none_or(|s| s.layout == Layout::RowMajor && s.dtype == t.dtype && s.region == t.region),
            "tile-packed tensor `{}` has no row-major weight `{}` of its type to be loaded from",
            t.name,
            t.source()
        );
    }
    let tiled = plan.gemv_tiles();
    let weights: BTreeMap<u64, &PlannedTensor> =
        plan.tensors.iter().filter(|t| t.region == RegionKind::Weights).map(|t| (t.offset, t)).collect();
    for p in &plan.programs {
        for (i, l) in p.launches.iter().enumerate() {
            let gemv = linear_family(&l.kernel);
            for b in l.bufs.iter().filter(|b| b.region == RegionKind::Weights) {
                // An operand covers one weight or a run laid out back to back (a packed QKV).
                for t in weights.range(b.offset..b.offset + b.bytes).map(|(_, t)| *t).filter(|t| t.shape.len() == 2) {
                    let want = if gemv && tiled && half(t.dtype) { Layout::GemvTiles } else { Layout::RowMajor };
                    ensure!(
                        t.layout == want,
                        "in program {}: launch {i} `{}` ({}) reads weight `{}` laid out {}, but the kernels of this plan read it {}",
                        p.label(),
                        l.name,
                        l.kernel.name(),
                        t.name,
                        t.layout.name(),
                        want.name()
                    );
                }
            }
        }
    }
    Ok(())
}

/// The kernels of linear.cu / linear_fused.cu: GEMVs up to 8 rows (with dense variants and the
/// tile-packed weight layout), their tiled path beyond.
fn linear_family(k: &Kernel) -> bool {
    matches!(
        k,
        Kernel::Linear { .. } | Kernel::FusedLinear { .. } | Kernel::GatedLinear { .. } | Kernel::QkvLinear { .. } | Kernel::QkvRope { .. }
    )
}

/// Invariant 15 for launch `i`: a `QkvAttention` has the kernel's shape (bf16 operands, head_dim
/// 64 rotated whole in halves, at most 1024 inputs and 14 heads: `geometry::qkv_attention_fits`),
/// its operands (x, [norm weight], the packed weight, [the packed bias], positions, cache_base,
/// k_cache, v_cache, out) of the sizes those give, and one cluster of 8 per head.
fn check_qkv_attention(i: usize, l: &super::Launch) -> Result<()> {
    let Kernel::QkvAttention { in_features, heads, kv_heads, head_dim, kv_rows, norm, bias, rope, split_len, .. } = l.kernel else {
        return Ok(());
    };
    let bf16 = l.bufs.iter().filter(|b| b.dtype.is_float()).all(|b| b.dtype == DType::BF16);
    let fits = super::geometry::qkv_attention_fits(1, in_features as usize, heads as usize, head_dim, &rope, bf16);
    ensure!(
        fits && kv_heads > 0 && heads.is_multiple_of(kv_heads),
        "launch {i} `{}`: qkv_attention of a shape its kernel does not take",
        l.name
    );
    let (k, width, kvd) = (in_features as u64, ((heads + 2 * kv_heads) * head_dim) as u64, (kv_heads * head_dim) as u64);
    let mut want = vec![2 * k];
    if norm {
        want.push(2 * k);
    }
    want.push(2 * width * k);
    if bias {
        want.push(2 * width);
    }
    want.extend([4, 4, 2 * kvd * kv_rows as u64, 2 * kvd * kv_rows as u64, 2 * (heads * head_dim) as u64]);
    let got: Vec<u64> = l.bufs.iter().map(|b| b.bytes).collect();
    ensure!(got == want, "launch {i} `{}`: qkv_attention operands of {got:?} bytes, its shape needs {want:?}", l.name);
    ensure!(
        l.grid == [heads, super::ATTENTION_CLUSTER_SPLITS, 1] && split_len > 0,
        "launch {i} `{}`: qkv_attention needs one cluster of {} blocks per head and a split length",
        l.name,
        super::ATTENTION_CLUSTER_SPLITS
    );
    Ok(())
}

/// Invariant 14 for launch `i`.
fn check_out_norm(i: usize, l: &super::Launch) -> Result<()> {
    let gemv = |rows: u32, in_features: u32| (1..=super::geometry::LINEAR_GEMV_MAX_ROWS).contains(&rows) && in_features.is_multiple_of(8);
    let f32_groups = |b: Option<&BufArg>, rows: u32, features: u32| {
        b.is_some_and(|b| b.dtype == DType::F32 && b.bytes == rows as u64 * (features / 8) as u64 * 4)
    };
    match l.kernel {
        Kernel::FusedLinear { rows, in_features, out_features, l2_prefetch, out_norm: true, .. } => {
            let n = l.bufs.len();
            let (out, sumsq) = (l.bufs.get(n.wrapping_sub(2)), l.bufs.last());
            let bf16 = |b: Option<&BufArg>| b.is_some_and(|b| b.dtype == DType::BF16);
            ensure!(
                gemv(rows, in_features)
                    && out_features % 8 == 0
                    && l2_prefetch == 0
                    && l.occupancy == 0
                    && bf16(l.bufs.first())
                    && bf16(out)
                    && f32_groups(sumsq, rows, out_features),
                "launch {i} `{}` carries an output norm but is not a bf16 tensor-core GEMV in its default variant (rows {rows}, in {in_features}, out {out_features}) writing out and f32 sums of squares per 8 features",
                l.name
            );
        }
        Kernel::Linear { rows, in_features, bias, stats: Some(_), .. } => {
            ensure!(
                gemv(rows, in_features)
                    && !bias
                    && l.bufs.first().is_some_and(|b| b.dtype == DType::BF16)
                    && f32_groups(l.bufs.get(1), rows, in_features),
                "launch {i} `{}` takes its norm's statistics but is not a bias-less bf16 tensor-core GEMV (rows {rows}, in {in_features}) whose second operand is f32 sums of squares per 8 features",
                l.name
            );
        }
        _ => {}
    }
    Ok(())
}

fn touches(a: &BufArg, b: &BufArg) -> bool {
    a.region == b.region && a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes
}

fn check_program(plan: &Plan, p: &ProgramPlan) -> Result<()> {
    // Shadow: start -> (end, tag offset, tag length) of the last write, per shadowed region.
    let mut shadow: BTreeMap<(RegionKind, u64), (u64, u64, u64)> = BTreeMap::new();
    for (i, l) in p.launches.iter().enumerate() {
        // 8: kernel variants.
        let linear = linear_family(&l.kernel);
        ensure!(
            l.occupancy == 0
                || (l.occupancy == GEMV_DENSE_BLOCKS_PER_SM
                    && linear
                    && l.block == [LINEAR_GEMV_THREADS, 1, 1]
                    && dense_variant_covers(&l.kernel)),
            "launch {i} `{}` ({}, block {:?}) asks for {} blocks per SM, a variant no kernel has",
            l.name,
            l.kernel.name(),
            l.block,
            l.occupancy
        );
        // 9: planned early reads.
        let early: Vec<usize> = if l.kernel.early() { super::early_read_operands(l) } else { Vec::new() };
        ensure!(!l.kernel.early() || !early.is_empty(), "launch {i} `{}` is planned to read early but has no early operands", l.name);
        for k in early {
            let b = &l.bufs[k];
            let writers: Vec<usize> =
                (0..i).filter(|&j| p.launches[j].bufs.iter().any(|o| o.access == Access::Write && touches(o, b))).collect();
            if writers.is_empty() {
                continue;
            }
            // Written in this program: only behind a barrier (a launch that waits before it
            // releases its dependents, of which this one descends and every writer is an ancestor).
            let barrier = (0..i).filter(|&x| p.launches[x].kernel.waits_before_release()).find(|&x| {
                let down = super::reachable(&p.deps, p.launches.len(), x, true);
                let up = super::reachable(&p.deps, p.launches.len(), x, false);
                down[i] && writers.iter().all(|&j| j != x && up[j])
            });
            if barrier.is_none() {
                let j = *writers.last().expect("not empty");
                bail!(
                    "launch {i} `{}` reads operand {k} before its wait, but launch {j} `{}` writes it and may still run (no launch that waits before releasing its dependents stands between them)",
                    l.name,
                    p.launches[j].name
                );
            }
        }
        // 14: out-norm producers and stats readers.
        check_out_norm(i, l)?;
        // 15: QKV-RoPE with the attention in one launch.
        check_qkv_attention(i, l)?;
        // 13: planned L2 prefetch spans.
        if let Kernel::FusedLinear { norm, bias, residual, l2_prefetch, .. } = l.kernel {
            if l2_prefetch > 0 {
                let want = 4 + norm as usize + bias as usize + residual as usize;
                ensure!(
                    l.bufs.len() == want && l2_prefetch.is_multiple_of(16),
                    "launch {i} `{}` plans an L2 prefetch of {l2_prefetch} bytes per block but has {} operands (want {want}) or a span not in 16-byte pieces",
                    l.name,
                    l.bufs.len()
                );
                let b = &l.bufs[want - 2];
                ensure!(
                    b.access == Access::Read && b.region == RegionKind::Weights && b.bytes == l.grid[0] as u64 * l2_prefetch as u64,
                    "launch {i} `{}`: its L2 prefetch span ({} bytes of region {}) is no read-only weight span of {} blocks x {l2_prefetch} bytes",
                    l.name,
                    b.bytes,
                    b.region.name(),
                    l.grid[0]
                );
            }
        }
        for (j, b) in l.bufs.iter().enumerate() {
            ensure!(b.offset.is_multiple_of(ALIGN), "launch {i} `{}` operand {j} offset {} is not aligned", l.name, b.offset);
            ensure!(
                b.offset + b.bytes <= plan.region_bytes[b.region.index()],
                "launch {i} `{}` operand {j} overruns region {}",
                l.name,
                b.region.name()
            );
            ensure!(b.bytes > 0, "launch {i} `{}` operand {j} is empty", l.name);
            if b.region != RegionKind::Arena {
                let Some(t) = plan.tensors.iter().find(|t| t.region == b.region && t.offset == b.offset) else {
                    bail!("launch {i} `{}` operand {j} at {}+{} is no planned tensor", l.name, b.region.name(), b.offset);
                };
                if b.bytes > t.bytes {
                    // A read-only weight operand may span tensors laid out back to back (a
                    // packed QKV): each next one must start where the last one ended.
                    ensure!(
                        b.access == Access::Read && t.class == ValueClass::Weight,
                        "launch {i} `{}` reads past the end of `{}`",
                        l.name,
                        t.name
                    );
                    let mut end = t.offset + t.bytes;
                    while end < b.offset + b.bytes {
                        let Some(n) =
                            plan.tensors.iter().find(|n| n.region == b.region && n.offset == end && n.class == ValueClass::Weight)
                        else {
                            bail!(
                                "launch {i} `{}` operand {j} spans from `{}` into bytes that are no weight laid out right after it",
                                l.name,
                                t.name
                            );
                        };
                        end += n.bytes;
                    }
                    ensure!(end == b.offset + b.bytes, "launch {i} `{}` operand {j} ends inside a weight", l.name);
                }
                if b.access == Access::Write {
                    ensure!(
                        matches!(t.class, ValueClass::State | ValueClass::Output)
                            || matches!(t.class, ValueClass::Step | ValueClass::Ring)
                                && matches!(l.kernel, super::Kernel::Advance { .. } | super::Kernel::SampleAdvance { .. }),
                        "launch {i} `{}` writes {} `{}`",
                        l.name,
                        t.class.name(),
                        t.name
                    );
                }
            }
            if b.access == Access::Write {
                for (k, o) in l.bufs.iter().enumerate() {
                    ensure!(k == j || !touches(b, o), "launch {i} `{}`: written operand {j} overlaps operand {k}", l.name);
                }
            }
        }
        // Reads must find their bytes intact.
        for (j, b) in l.bufs.iter().enumerate() {
            if b.access != Access::Read || !matches!(b.region, RegionKind::Arena | RegionKind::Output) {
                continue;
            }
            match shadow.get(&(b.region, b.offset)) {
                Some(&(end, tag_off, tag_len)) if end == b.offset + b.bytes && tag_off == b.offset && tag_len == b.bytes => {}
                _ => bail!(
                    "launch {i} `{}` reads operand {j} ({}+{}, {} bytes), but those bytes were not written as that buffer earlier in the program or were overwritten since",
                    l.name,
                    b.region.name(),
                    b.offset,
                    b.bytes
                ),
            }
        }
        for b in l.bufs.iter().filter(|b| b.access == Access::Write && matches!(b.region, RegionKind::Arena | RegionKind::Output)) {
            let (s, e) = (b.offset, b.offset + b.bytes);
            // Clip every interval overlapping [s, e).
            let hits: Vec<_> = shadow
                .range((b.region, 0)..(b.region, e))
                .filter(|(&(_, st), &(en, _, _))| st < e && en > s)
                .map(|(&k, &v)| (k, v))
                .collect();
            for ((r, st), (en, to, tl)) in hits {
                shadow.remove(&(r, st));
                if st < s {
                    shadow.insert((r, st), (s, to, tl));
                }
                if en > e {
                    shadow.insert((r, e), (en, to, tl));
                }
            }
            shadow.insert((b.region, s), (e, s, b.bytes));
        }
    }
    // 7: the temps table agrees with the launches, and temps live at a common launch share no
    // byte. Tags of (offset, length) alone cannot tell two same-sized buffers apart, so this is
    // what catches a planner that puts one live temp exactly on top of another.
    let arena = plan.region_bytes[RegionKind::Arena.index()];
    for t in &p.temps {
        ensure!(t.offset.is_multiple_of(ALIGN) && t.offset + t.bytes <= arena, "temp `{}` is misaligned or outside the arena", t.name);
        ensure!(t.first <= t.last && (t.last as usize) < p.launches.len(), "temp `{}` has lifetime [{}, {}]", t.name, t.first, t.last);
    }
    for (k, a) in p.temps.iter().enumerate() {
        for b in &p.temps[k + 1..] {
            let live_together = a.first <= b.last && b.first <= a.last;
            let share = a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
            ensure!(
                !(live_together && share),
                "temps `{}` (launches {}..={}) and `{}` (launches {}..={}) are live together but share arena bytes",
                a.name,
                a.first,
                a.last,
                b.name,
                b.first,
                b.last
            );
        }
    }
    for (i, l) in p.launches.iter().enumerate() {
        for (j, b) in l.bufs.iter().enumerate().filter(|(_, b)| b.region == RegionKind::Arena) {
            let owners = p
                .temps
                .iter()
                .filter(|t| t.offset == b.offset && t.bytes == b.bytes)
                .filter(|t| match b.access {
                    Access::Write => t.first as usize == i,
                    Access::Read => (t.first as usize) < i && i <= t.last as usize,
                })
                .count();
            ensure!(
                owners == 1,
                "launch {i} `{}` operand {j} (arena+{}, {} bytes) is not exactly one temp live at that launch",
                l.name,
                b.offset,
                b.bytes
            );
        }
    }
    // 6: ordering of conflicting launches by the edges.
    let n = p.launches.len();
    let words = n.div_ceil(64);
    let mut reach = vec![vec![0u64; words]; n];
    let mut succ = vec![Vec::new(); n];
    for &(a, b) in &p.deps {
        ensure!((a as usize) < n && (b as usize) < n && a < b, "dependency ({a}, {b}) is not a forward edge between launches");
        succ[a as usize].push(b as usize);
    }
    for i in (0..n).rev() {
        let mut row = vec![0u64; words];
        for &s in &succ[i] {
            row[s / 64] |= 1 << (s % 64);
            for w in 0..words {
                row[w] |= reach[s][w];
            }
        }
        reach[i] = row;
    }
    for j in 0..n {
        for (i, reach_i) in reach.iter().enumerate().take(j) {
            let conflict = p.launches[i]
                .bufs
                .iter()
                .any(|a| p.launches[j].bufs.iter().any(|b| (a.access == Access::Write || b.access == Access::Write) && touches(a, b)));
            if conflict && reach_i[j / 64] & (1 << (j % 64)) == 0 {
                bail!(
                    "launches {i} `{}` and {j} `{}` touch the same bytes but no dependency orders them",
                    p.launches[i].name,
                    p.launches[j].name
                );
            }
        }
    }
    // 11: a device loop's launches are copies of one step (`ProgramPlan::loop_copies`), the first
    // ending in its advance, so that its prefix alone is a whole step (its edges stay inside it:
    // every edge goes forward, rule 6).
    if p.phase == crate::ir::Phase::DecodeLoop {
        let copies = p.loop_copies();
        ensure!(n.is_multiple_of(copies) && n > 0, "{}: {n} launches are not {copies} copies of one step", p.label());
        let body = n / copies;
        ensure!(
            p.launches[body - 1].kernel.is_loop_step(),
            "{}: the first of its {copies} copies does not end in its advance (launch {} `{}`)",
            p.label(),
            body - 1,
            p.launches[body - 1].name
        );
        for c in 1..copies {
            for k in 0..body {
                let (a, b) = (&p.launches[k], &p.launches[c * body + k]);
                ensure!(
                    b.name == format!("u{c}.{}", a.name)
                        && b.kernel == a.kernel
                        && b.bufs == a.bufs
                        && (b.grid, b.block, b.shared_bytes, b.occupancy) == (a.grid, a.block, a.shared_bytes, a.occupancy),
                    "{}: launch {} `{}` is not copy {c} of launch {k} `{}`",
                    p.label(),
                    c * body + k,
                    b.name,
                    a.name
                );
            }
        }
    }
    // 12: argmax keys. In program order, each key a `Linear { argmax }` folds into is next read by
    // a `SampleAdvance { argmax }` over that linear's logits (which zeroes it), with no other
    // launch touching the key in between, and every such sampler's key was folded by such a linear
    // since the key was last zeroed: a key is zero when its linear starts, and a greedy token is
    // the argmax of the logits next to it.
    let mut pending: BTreeMap<(RegionKind, u64), (usize, BufArg, u64)> = BTreeMap::new();
    for (i, l) in p.launches.iter().enumerate() {
        match l.kernel {
            super::Kernel::Linear { argmax: true, .. } => {
                let (key, out) = match l.bufs.as_slice() {
                    [.., out, key] => (key, out),
                    _ => bail!("launch {i} `{}`: an argmax linear needs its logits and a key", l.name),
                };
                ensure!(
                    key.dtype == DType::U32 && key.access == Access::Write && out.dtype == DType::F32,
                    "launch {i} `{}`: an argmax linear writes f32 logits and a u32 key",
                    l.name
                );
                if let Some((j, ..)) = pending.insert((key.region, key.offset), (i, *out, key.bytes)) {
                    bail!("launch {i} `{}` folds into the argmax key launch {j} folded into before a sampler zeroed it", l.name);
                }
            }
            super::Kernel::SampleAdvance { argmax: true, .. } => {
                let key = l.bufs.last().filter(|b| b.dtype == DType::U32 && b.access == Access::Write);
                let Some(key) = key else { bail!("launch {i} `{}`: a keyed sample_advance needs its key last", l.name) };
                let Some((_, logits, _)) = pending.remove(&(key.region, key.offset)) else {
                    bail!("launch {i} `{}` reads an argmax key no argmax linear folded into since it was last zeroed", l.name)
                };
                ensure!(
                    l.bufs.first().is_some_and(|b| (b.region, b.offset, b.bytes) == (logits.region, logits.offset, logits.bytes)),
                    "launch {i} `{}` samples other logits than the ones its argmax key was folded from",
                    l.name
                );
            }
            _ => {
                for b in &l.bufs {
                    let hit = pending.iter().find(|(&(r, o), &(_, _, n))| r == b.region && o < b.offset + b.bytes && b.offset < o + n);
                    if let Some((&k, (j, ..))) = hit {
                        bail!("launch {i} `{}` touches the argmax key {:?} between launch {j} and its sampler", l.name, k);
                    }
                }
            }
        }
    }
    ensure!(pending.is_empty(), "an argmax key is folded into but never read and zeroed: {:?}", pending.keys().collect::<Vec<_>>());
    Ok(())
}
