//! The canonical text dump of a plan: deterministic bytes for the same plan on any machine,
//! `\n` line endings, names from the model. Reviewed as insta snapshots and by `kiln diff`.
//!
//! Sections: header (model, options, fingerprint), regions, memory report (per program: arena
//! bytes, naive bytes without reuse, reuse ratio, fragmentation), persistent tensors, then each
//! program's launches, one per line, with their operands and the launches they wait for.

use super::planner::fmt_bytes;
use super::{Access, Kernel, Plan, ProgramPlan, RegionKind};
use std::fmt::Write;

pub fn region_summary(plan: &Plan) -> String {
    RegionKind::ALL.iter().map(|r| format!("{} {}", r.name(), fmt_bytes(plan.region_bytes[r.index()]))).collect::<Vec<_>>().join(", ")
}

/// For an error about a plan's size: how much of it is the tile-packed second copy of the GEMV
/// weights (`lower::tiles`) and how to plan without it; empty for a row-major plan.
pub fn tiles_hint(plan: &Plan) -> String {
    match plan.gemv_tiles_bytes() {
        (0, _) => String::new(),
        (_, twins) => format!("; or plan with KILN_GEMV_TILES=0 (the tile-packed second copy of the GEMV weights is {})", fmt_bytes(twins)),
    }
}

/// Largest sum of live temp bytes at any launch (the lower bound any allocator could reach).
pub fn live_peak(p: &ProgramPlan) -> u64 {
    (0..p.launches.len() as u32)
        .map(|i| p.temps.iter().filter(|t| t.first <= i && i <= t.last).map(|t| super::align_up(t.bytes)).sum::<u64>())
        .max()
        .unwrap_or(0)
}

/// One-line memory report of a program.
pub fn program_summary(p: &ProgramPlan) -> String {
    let reuse = if p.arena_bytes > 0 { p.naive_bytes as f64 / p.arena_bytes as f64 } else { 1.0 };
    let live = live_peak(p);
    let frag = if p.arena_bytes > 0 { 1.0 - live as f64 / p.arena_bytes as f64 } else { 0.0 };
    format!(
        "{:<14} launches={:<4} deps={:<4} arena={} naive={} reuse={:.2}x fragmentation={:.1}%",
        p.label(),
        p.launches.len(),
        p.deps.len(),
        p.arena_bytes,
        p.naive_bytes,
        reuse,
        frag * 100.0
    )
}

/// Header, regions and memory report: what `kiln plan` prints.
pub fn summary(plan: &Plan) -> String {
    let c = &plan.config;
    let o = &plan.options;
    let mut s = String::new();
    let _ = writeln!(s, "kiln plan (kiln {}, plan format {})", plan.kiln_version, super::file::FORMAT_VERSION);
    let _ = writeln!(
        s,
        "model: {} vocab={} hidden={} ffn={} layers={} heads={} kv_heads={} head_dim={} tied={} qkv_bias={} qk_norm={} params={}",
        c.arch.name(),
        c.vocab_size,
        c.hidden_size,
        c.intermediate_size,
        c.n_layers,
        c.n_heads,
        c.n_kv_heads,
        c.head_dim,
        c.tie_word_embeddings,
        c.qkv_bias,
        c.qk_norm,
        c.n_params()
    );
    let _ = writeln!(s, "rope: {:?}", c.rope);
    let _ = writeln!(s, "fingerprint: {}", plan.fingerprint);
    let _ = writeln!(
        s,
        "options: dtype={} max_context={} max_seqs={} decode_buckets={:?} prefill_buckets={:?} burst={}",
        o.dtype,
        o.max_context,
        o.max_seqs(),
        o.decode_buckets,
        o.prefill_buckets,
        o.burst
    );
    let _ = writeln!(s, "regions:");
    for r in RegionKind::ALL {
        let b = plan.region_bytes[r.index()];
        let _ = writeln!(s, "  {:<8} {:>14} B  {}", r.name(), b, fmt_bytes(b));
    }
    let _ = writeln!(s, "  {:<8} {:>14} B  {}", "total", plan.total_bytes(), fmt_bytes(plan.total_bytes()));
    match plan.gemv_tiles_bytes() {
        _ if !plan.gemv_tiles() => {
            let _ = writeln!(s, "gemv weights: row-major");
        }
        (n, bytes) => {
            let _ = writeln!(
                s,
                "gemv weights: tile-packed, a second copy of {n} tensors, {} of the weights region (KILN_GEMV_TILES=0 plans without)",
                fmt_bytes(bytes)
            );
        }
    }
    let naive_max = plan.programs.iter().map(|p| p.naive_bytes).max().unwrap_or(0);
    let arena = plan.region_bytes[RegionKind::Arena.index()];
    let _ = writeln!(
        s,
        "memory: arena {} vs naive {} without reuse (largest program), reduced {:.2}x",
        fmt_bytes(arena),
        fmt_bytes(naive_max),
        if arena > 0 { naive_max as f64 / arena as f64 } else { 1.0 }
    );
    let _ = writeln!(s, "programs:");
    for p in &plan.programs {
        let _ = writeln!(s, "  {}", program_summary(p));
    }
    s
}

fn kernel_params(k: &Kernel) -> String {
    match k {
        Kernel::Gather { rows, dim, table_rows, release } => {
            format!("rows={rows} dim={dim} table_rows={table_rows}{}", if *release { " release" } else { "" })
        }
        Kernel::RmsNorm { rows, dim, eps, release } => format!("rows={rows} dim={dim} eps={eps:e}{}", if *release { " release" } else { "" }),
        Kernel::AddRmsNorm { rows, dim, eps } => format!("rows={rows} dim={dim} eps={eps:e}"),
        Kernel::HeadRmsNorm { rows, heads, head_dim, eps } => format!("rows={rows} heads={heads} head_dim={head_dim} eps={eps:e}"),
        Kernel::Linear { rows, in_features, out_features, bias, argmax, stats } => {
            let a = if *argmax { " argmax=true" } else { "" };
            let st = stats.map(|eps| format!(" stats_eps={eps:e}")).unwrap_or_default();
            format!("rows={rows} in={in_features} out={out_features} bias={bias}{a}{st}")
        }
        Kernel::Rope { rows, heads, head_dim, rope } => format!(
            "rows={rows} heads={heads} head_dim={head_dim} style={:?} theta={} rotary_dim={}",
            rope.style, rope.theta, rope.rotary_dim
        ),
        Kernel::FusedLinear { rows, in_features, out_features, norm, eps, bias, residual, l2_prefetch, out_norm } => {
            let pf = if *l2_prefetch > 0 { format!(" l2_prefetch={l2_prefetch}") } else { String::new() };
            let on = if *out_norm { " out_norm=true" } else { "" };
            format!("rows={rows} in={in_features} out={out_features} norm={norm} eps={eps:e} bias={bias} residual={residual}{pf}{on}")
        }
        Kernel::Gemm { rows, in_features, out_features, bias } => format!("rows={rows} in={in_features} out={out_features} bias={bias}"),
        Kernel::QkvLinear { rows, in_features, out_features: [q, k, v], norm, eps, bias } => {
            format!("rows={rows} in={in_features} out={q}+{k}+{v} norm={norm} eps={eps:e} bias={bias}")
        }
        Kernel::GatedLinear { rows, in_features, out_features, norm, eps } => {
            format!("rows={rows} in={in_features} out={out_features} norm={norm} eps={eps:e}")
        }
        Kernel::KvWrite { rows, kv_dim, kv_rows } => format!("rows={rows} kv_dim={kv_dim} kv_rows={kv_rows}"),
        Kernel::QkvRope { rows, in_features, heads, kv_heads, head_dim, kv_rows, norm, eps, bias, early, rope } => format!(
            "rows={rows} in={in_features} heads={heads} kv_heads={kv_heads} head_dim={head_dim} kv_rows={kv_rows} norm={norm} eps={eps:e} bias={bias} early={early} style={:?} theta={} rotary_dim={} scaling={:?}",
            rope.style, rope.theta, rope.rotary_dim, rope.scaling
        ),
        Kernel::RopeKvWrite { rows, heads, kv_heads, head_dim, kv_rows, rope, packed } => format!(
            "rows={rows} heads={heads} kv_heads={kv_heads} head_dim={head_dim} kv_rows={kv_rows} style={:?} theta={} rotary_dim={} packed={packed}",
            rope.style, rope.theta, rope.rotary_dim
        ),
        Kernel::Attention { rows, heads, kv_heads, head_dim, scale, kv_rows }
        | Kernel::AttentionPrefill { rows, heads, kv_heads, head_dim, scale, kv_rows } => {
            format!("rows={rows} heads={heads} kv_heads={kv_heads} head_dim={head_dim} scale={scale} kv_rows={kv_rows}")
        }
        Kernel::AttentionSplit { rows, heads, kv_heads, head_dim, scale, kv_rows, splits, split_len, min_split_len, early } => format!(
            "rows={rows} heads={heads} kv_heads={kv_heads} head_dim={head_dim} scale={scale} kv_rows={kv_rows} splits={splits} split_len={split_len} min_split_len={min_split_len}{}",
            if *early { " early=true" } else { "" }
        ),
        Kernel::AttentionMerge { rows, heads, head_dim, splits, split_len, min_split_len, early } => {
            format!(
                "rows={rows} heads={heads} head_dim={head_dim} splits={splits} split_len={split_len} min_split_len={min_split_len}{}",
                if *early { " early=true" } else { "" }
            )
        }
        Kernel::AttentionCluster { rows, heads, kv_heads, head_dim, scale, kv_rows, split_len, min_split_len, chunk_heads, early } => {
            format!(
                "rows={rows} heads={heads} kv_heads={kv_heads} head_dim={head_dim} scale={scale} kv_rows={kv_rows} split_len={split_len} min_split_len={min_split_len} chunk_heads={chunk_heads}{}",
                if *early { " early=true" } else { "" }
            )
        }
        Kernel::QkvAttention {
            in_features,
            heads,
            kv_heads,
            head_dim,
            kv_rows,
            norm,
            eps,
            bias,
            rope,
            scale,
            split_len,
            min_split_len,
            early,
        } => format!(
            "in={in_features} heads={heads} kv_heads={kv_heads} head_dim={head_dim} kv_rows={kv_rows} norm={norm} eps={eps:e} bias={bias} style={:?} theta={} rotary_dim={} scaling={:?} scale={scale} split_len={split_len} min_split_len={min_split_len}{}",
            rope.style,
            rope.theta,
            rope.rotary_dim,
            rope.scaling,
            if *early { " early=true" } else { "" }
        ),
        Kernel::SwiGlu { n } | Kernel::Add { n } => format!("n={n}"),
        Kernel::Sample { rows, vocab } => format!("rows={rows} vocab={vocab}"),
        Kernel::Advance { rows, burst, stop_ids } => format!("rows={rows} burst={burst} stop_ids={stop_ids}"),
        Kernel::SampleAdvance { vocab, burst, stop_ids, argmax } => {
            let a = if *argmax { " argmax=true" } else { "" };
            format!("vocab={vocab} burst={burst} stop_ids={stop_ids}{a}")
        }
    }
}

/// The whole canonical dump: summary, tensors, and every program's launches.
pub fn dump(plan: &Plan) -> String {
    let mut s = summary(plan);
    let _ = writeln!(s, "tensors:");
    for t in &plan.tensors {
        let shape: Vec<String> = t.shape.iter().map(|d| d.to_string()).collect();
        let layout = if t.layout == super::Layout::RowMajor { String::new() } else { format!(" {}", t.layout.name()) };
        let _ = writeln!(
            s,
            "  {}+{} {} {} {}[{}] {}{layout}",
            t.region.name(),
            t.offset,
            t.class.name(),
            t.name,
            t.dtype,
            shape.join(","),
            t.bytes
        );
    }
    for p in &plan.programs {
        let _ = writeln!(s, "program {}", p.label());
        let mut waits: Vec<Vec<u32>> = vec![Vec::new(); p.launches.len()];
        for &(a, b) in &p.deps {
            waits[b as usize].push(a);
        }
        for (i, l) in p.launches.iter().enumerate() {
            let ops: Vec<String> = l
                .bufs
                .iter()
                .map(|b| {
                    format!("{}{}+{}:{}:{}", if b.access == Access::Write { "w " } else { "" }, b.region.name(), b.offset, b.bytes, b.dtype)
                })
                .collect();
            let after: Vec<String> = waits[i].iter().map(|w| format!("L{w}")).collect();
            let occupancy = if l.occupancy != 0 { format!(" per_sm={}", l.occupancy) } else { String::new() };
            let _ = writeln!(
                s,
                "  L{i} {} = {}({}) grid={:?} block={:?}{occupancy} smem={} [{}] after [{}]",
                l.name,
                l.kernel.name(),
                kernel_params(&l.kernel),
                l.grid,
                l.block,
                l.shared_bytes,
                ops.join(", "),
                after.join(",")
            );
        }
    }
    s
}
