//! Properties of the planner over random small models and bucket sets, re-derived here
//! independently of `plan::planner` and `plan::check`, plus the errors users meet: bad
//! options, a memory budget, and damaged or mismatched plan files.
//!
//! What this proves:
//! - every random (config, buckets) plans, passes the checker, reuses memory (arena <= naive)
//!   and plans deterministically (byte-identical plan files and dumps);
//! - liveness re-derived from the IR (`lower`, not the planner) agrees with the plan's temps
//!   table and launch operands, and no two temps live at the same launch share a byte;
//! - option, budget and plan-file errors say what is wrong.

mod common_cpu;

use common_cpu::{llama3_scaling, Rng, Shape};
use kiln::ir::{DType, Phase, RopeScaling, RopeStyle, ValueClass};
use kiln::lower::{lower, LowerOptions};
use kiln::model::ModelConfig;
use kiln::plan::file::{check_model, from_bytes, to_bytes, FORMAT_VERSION};
use kiln::plan::planner::fmt_bytes;
use kiln::plan::{build_plan, check::check_plan, dump::dump, Access, Plan, PlanOptions, RegionKind, ALIGN};
use std::collections::BTreeMap;

fn random_config(rng: &mut Rng) -> ModelConfig {
    let kv_heads = rng.range(1, 3);
    let heads = kv_heads * rng.range(1, 4);
    let rotary_dim = 2 * rng.range(1, 4);
    let head_dim = rotary_dim + rng.pick(&[0, 0, 1, 2]);
    let scaling = match rng.range(0, 2) {
        0 => RopeScaling::None,
        1 => llama3_scaling(),
        _ => RopeScaling::Linear { factor: 2.0 },
    };
    Shape {
        vocab: rng.range(5, 40),
        hidden: rng.range(3, 40),
        ffn: rng.range(3, 48),
        layers: rng.range(1, 3),
        heads,
        kv_heads,
        head_dim,
        rotary_dim,
        style: rng.pick(&[RopeStyle::Interleaved, RopeStyle::HalfSplit]),
        scaling,
        tied: rng.coin(),
        qkv_bias: rng.coin(),
        qk_norm: rng.coin(),
    }
    .build()
}

/// A strictly ascending random subset of `from`.
fn subset(rng: &mut Rng, from: &[usize]) -> Vec<usize> {
    from.iter().copied().filter(|_| rng.range(0, 2) == 0).collect()
}

fn random_options(rng: &mut Rng, cfg: &ModelConfig) -> PlanOptions {
    let max_context = rng.pick(&[8usize, 16, 24, 64]).min(cfg.max_position_embeddings);
    let mut decode_buckets = subset(rng, &[1, 2, 3, 4, 8, 16]);
    let prefill_buckets = subset(rng, &[1, 2, 4, 5, 8, 16, 32, 64]).into_iter().filter(|&b| b <= max_context).collect();
    if decode_buckets.is_empty() && rng.coin() {
        decode_buckets.push(1);
    }
    let mut opts = PlanOptions {
        decode_buckets,
        prefill_buckets,
        max_context,
        dtype: rng.pick(&[DType::F32, DType::F16, DType::BF16]),
        memory_budget: None,
        burst: 0,
        fuse: false,
    };
    if opts.decode_buckets.is_empty() && opts.prefill_buckets.is_empty() {
        opts.prefill_buckets.push(max_context.min(4));
    }
    opts
}

/// Liveness from the IR (op order == launch order), checked against the plan's temps table
/// and launch operands; then every pair of temps live at a common launch is byte-disjoint.
fn recheck_liveness(cfg: &ModelConfig, plan: &Plan) {
    let lower_opts = LowerOptions { dtype: plan.options.dtype, kv_rows: plan.options.kv_rows(), burst: plan.options.burst };
    let arena = plan.region_bytes[RegionKind::Arena.index()];
    for p in &plan.programs {
        let label = p.label();
        let ir = lower(cfg, p.phase, p.bucket, lower_opts).unwrap();
        assert_eq!(ir.ops.len(), p.launches.len(), "{label}: one launch per op");
        let mut first = BTreeMap::new();
        let mut last = BTreeMap::new();
        for (i, node) in ir.ops.iter().enumerate() {
            assert_eq!(node.name, p.launches[i].name, "{label}: launch {i} is not op {i}");
            for v in node.op.writes() {
                first.entry(v).or_insert(i);
            }
            for v in node.op.reads() {
                last.insert(v, i);
            }
        }
        // Scratch workspaces (a GEMM's) are live during their one launch only.
        for t in p.temps.iter().filter(|t| t.name.ends_with(".workspace")) {
            assert_eq!(t.first, t.last, "{label}: workspace `{}` outlives its launch", t.name);
            let l = &p.launches[t.first as usize];
            assert_eq!(t.bytes, l.kernel.workspace_bytes(), "{label}: size of `{}`", t.name);
            assert!(t.offset + t.bytes <= p.arena_bytes, "{label}: `{}` ends past the program's arena", t.name);
        }
        let temps: BTreeMap<&str, _> = p.temps.iter().filter(|t| !t.name.ends_with(".workspace")).map(|t| (t.name.as_str(), t)).collect();
        let n_temps = ir.values.iter().filter(|v| v.class == ValueClass::Temp).count();
        assert_eq!(temps.len(), n_temps, "{label}: temps table does not list every temp once");
        for (id, v) in ir.values.iter().enumerate() {
            if v.class != ValueClass::Temp {
                continue;
            }
            let id = kiln::ir::ValueId(id as u32);
            let t = temps[v.name.as_str()];
            assert_eq!((t.first as usize, t.last as usize), (first[&id], last[&id]), "{label}: lifetime of `{}`", v.name);
            assert_eq!(t.bytes, v.bytes(), "{label}: size of `{}`", v.name);
            assert_eq!(t.offset % ALIGN, 0, "{label}: `{}` is not aligned", v.name);
            assert!(t.offset + t.bytes <= p.arena_bytes, "{label}: `{}` ends past the program's arena", v.name);
            assert!(p.arena_bytes <= arena);
        }
        // Launch operands are where the temps table says.
        for (i, node) in ir.ops.iter().enumerate() {
            let values = node.op.reads().into_iter().chain(node.op.writes());
            for (j, (v, b)) in values.zip(&p.launches[i].bufs).enumerate() {
                let val = ir.value(v);
                let want_access = if j < node.op.reads().len() { Access::Read } else { Access::Write };
                assert_eq!(b.access, want_access, "{label}: launch {i} operand {j} access");
                assert_eq!(b.bytes, val.bytes(), "{label}: launch {i} operand {j} length");
                if val.class == ValueClass::Temp {
                    assert_eq!(b.region, RegionKind::Arena);
                    assert_eq!(b.offset, temps[val.name.as_str()].offset, "{label}: launch {i} operand {j} offset");
                } else {
                    let t = plan.tensor(&val.name).unwrap();
                    assert_eq!((b.region, b.offset), (t.region, t.offset), "{label}: `{}` address", val.name);
                }
            }
        }
        // The property the arena exists for.
        for (a_i, a) in p.temps.iter().enumerate() {
            for b in &p.temps[a_i + 1..] {
                let live_together = a.first <= b.last && b.first <= a.last;
                let share_bytes = a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
                assert!(
                    !(live_together && share_bytes),
                    "{label}: `{}` [{}, {}] at {}+{} and `{}` [{}, {}] at {}+{} are live together and share bytes",
                    a.name,
                    a.first,
                    a.last,
                    a.offset,
                    a.bytes,
                    b.name,
                    b.first,
                    b.last,
                    b.offset,
                    b.bytes
                );
            }
        }
    }
}

#[test]
fn random_plans_are_valid_compact_and_deterministic() {
    let mut rng = Rng::new(0x9A11);
    let mut programs = 0;
    for iter in 0..50 {
        let cfg = random_config(&mut rng);
        let opts = random_options(&mut rng, &cfg);
        let ctx = format!("iteration {iter}: {cfg:?} {opts:?}");
        let plan = build_plan(&cfg, &opts).unwrap_or_else(|e| panic!("{ctx}: {e:#}"));
        check_plan(&plan).unwrap_or_else(|e| panic!("{ctx}: {e:#}"));
        let arena = plan.region_bytes[RegionKind::Arena.index()];
        assert_eq!(arena, plan.programs.iter().map(|p| p.arena_bytes).max().unwrap(), "{ctx}");
        for p in &plan.programs {
            assert!(p.arena_bytes <= p.naive_bytes, "{ctx}: {} arena {} > naive {}", p.label(), p.arena_bytes, p.naive_bytes);
            assert!(p.arena_bytes <= arena, "{ctx}");
            for &(a, b) in &p.deps {
                assert!(a < b && (b as usize) < p.launches.len(), "{ctx}: edge ({a}, {b})");
            }
        }
        recheck_liveness(&cfg, &plan);
        let again = build_plan(&cfg, &opts).unwrap();
        assert_eq!(to_bytes(&plan).unwrap(), to_bytes(&again).unwrap(), "{ctx}: plan files differ between builds");
        assert_eq!(dump(&plan), dump(&again), "{ctx}: dumps differ between builds");
        programs += plan.programs.len();
    }
    eprintln!("50 random plans, {programs} programs: checked");
}

// =============================================================================================
// Errors users meet.

fn small_config() -> ModelConfig {
    Shape {
        vocab: 32,
        hidden: 16,
        ffn: 24,
        layers: 2,
        heads: 4,
        kv_heads: 2,
        head_dim: 4,
        rotary_dim: 4,
        style: RopeStyle::HalfSplit,
        scaling: RopeScaling::None,
        tied: false,
        qkv_bias: true,
        qk_norm: false,
    }
    .build()
}

fn small_options() -> PlanOptions {
    PlanOptions {
        decode_buckets: vec![1, 2, 4],
        prefill_buckets: vec![4, 8],
        max_context: 32,
        dtype: DType::F32,
        memory_budget: None,
        burst: 0,
        fuse: false,
    }
}

fn plan_error(cfg: &ModelConfig, opts: &PlanOptions) -> String {
    format!("{:#}", build_plan(cfg, opts).expect_err("plan should fail"))
}

#[test]
fn memory_budget_is_enforced_with_the_needed_size() {
    let cfg = small_config();
    let total = build_plan(&cfg, &small_options()).unwrap().total_bytes();
    let at = |budget: u64| PlanOptions { memory_budget: Some(budget), ..small_options() };
    build_plan(&cfg, &at(total)).expect("a budget of exactly the plan's size is enough");
    for budget in [1, total - 1] {
        let msg = plan_error(&cfg, &at(budget));
        assert!(msg.contains("needs"), "{msg}");
        assert!(msg.contains(&fmt_bytes(total)), "message should name the {total} bytes needed: {msg}");
        assert!(msg.contains(&fmt_bytes(budget)), "message should name the budget: {msg}");
    }
}

#[test]
fn bad_options_are_clear_errors() {
    let cfg = small_config();
    let o = small_options;
    let cases: Vec<(PlanOptions, &[&str])> = vec![
        (PlanOptions { max_context: 300, ..o() }, &["max context 300", "max_position_embeddings", "256"]),
        (PlanOptions { decode_buckets: vec![4, 2], ..o() }, &["decode buckets", "ascending", "[4, 2]"]),
        (PlanOptions { prefill_buckets: vec![8, 8], ..o() }, &["prefill buckets", "ascending"]),
        (PlanOptions { prefill_buckets: vec![4, 64], ..o() }, &["prefill bucket 64", "max context 32"]),
        (PlanOptions { decode_buckets: vec![0, 1], ..o() }, &["positive"]),
        (PlanOptions { decode_buckets: vec![], prefill_buckets: vec![], ..o() }, &["no buckets"]),
        (PlanOptions { max_context: 0, prefill_buckets: vec![], ..o() }, &["max context"]),
        (PlanOptions { dtype: DType::I32, ..o() }, &["dtype", "i32"]),
    ];
    for (opts, wants) in cases {
        let msg = plan_error(&cfg, &opts);
        for w in wants {
            assert!(msg.contains(w), "error for {opts:?} should mention `{w}`: {msg}");
        }
    }
}

// =============================================================================================
// Plan files.

fn plan_file() -> (Plan, Vec<u8>) {
    let plan = build_plan(&small_config(), &small_options()).unwrap();
    let bytes = to_bytes(&plan).unwrap();
    (plan, bytes)
}

fn load_error(bytes: &[u8]) -> String {
    match from_bytes(bytes, "test.plan") {
        Ok(_) => panic!("a damaged or inconsistent plan file loaded"),
        Err(e) => format!("{e:#}"),
    }
}

#[test]
fn plan_file_round_trips() {
    let (plan, bytes) = plan_file();
    let back = from_bytes(&bytes, "test.plan").unwrap();
    assert_eq!(back, plan);
    assert_eq!(to_bytes(&back).unwrap(), bytes);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.plan");
    kiln::plan::file::save(&plan, &path).unwrap();
    assert_eq!(kiln::plan::file::load(&path).unwrap(), plan);
    check_model(&plan, &small_config(), "the test model").unwrap();
}

#[test]
fn damaged_plan_files_are_rejected() {
    let (_, bytes) = plan_file();
    // A flipped byte anywhere after the header: in the body and in the checksum.
    for at in [12, bytes.len() / 2, bytes.len() - 40, bytes.len() - 1] {
        let mut b = bytes.clone();
        b[at] ^= 0x40;
        let msg = load_error(&b);
        assert!(msg.contains("corrupt"), "flipped byte {at}: {msg}");
    }
    // Truncation at any length.
    for len in [0, 7, 11, 12, 40, 43, 44, bytes.len() / 2, bytes.len() - 1] {
        let msg = load_error(&bytes[..len]);
        assert!(msg.contains("test.plan"), "truncated to {len}: {msg}");
        if len >= 12 {
            assert!(msg.contains("truncated"), "truncated to {len}: {msg}");
        }
    }
    let mut b = bytes.clone();
    b[..8].copy_from_slice(b"GGUF\0\0\0\0");
    assert!(load_error(&b).contains("not a kiln plan file"));
    let mut b = bytes.clone();
    b[8..12].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    let msg = load_error(&b);
    assert!(msg.contains("version") && msg.contains(&(FORMAT_VERSION + 1).to_string()), "{msg}");
    // Trailing garbage is not silently ignored either.
    let mut b = bytes.clone();
    b.push(0);
    load_error(&b);
}

#[test]
fn plan_for_another_model_names_the_difference() {
    let (plan, _) = plan_file();
    let checks: Vec<(ModelConfig, &str)> = vec![
        (ModelConfig { n_layers: 3, ..small_config() }, "n_layers"),
        (ModelConfig { rms_norm_eps: 1e-6, ..small_config() }, "rms_norm_eps"),
        (ModelConfig { qkv_bias: false, ..small_config() }, "qkv_bias"),
        (ModelConfig { vocab_size: 33, ..small_config() }, "vocab_size"),
    ];
    for (other, field) in checks {
        let msg = format!("{:#}", check_model(&plan, &other, "other.gguf").expect_err("mismatched model accepted"));
        assert!(msg.contains(field) && msg.contains("other.gguf"), "should name `{field}`: {msg}");
    }
}

/// The plan checker itself is run on load: a plan whose bytes are intact but whose contents
/// are inconsistent (as if written by a buggy kiln) does not load.
#[test]
fn inconsistent_plan_in_a_valid_envelope_is_rejected() {
    let (mut plan, _) = plan_file();
    let p = plan.program(Phase::Decode, 1).unwrap();
    let l = plan.programs[p].launches.iter_mut().find(|l| l.name == "blk.0.attn_q").unwrap();
    l.bufs.last_mut().unwrap().offset += ALIGN * 1000;
    let msg = load_error(&to_bytes(&plan).unwrap());
    assert!(msg.contains("plan check"), "{msg}");
}

/// Kernel variants: a launch may ask for the dense GEMV (three blocks per SM) only where that
/// variant exists, a 256-thread linear-family launch; the checker refuses it anywhere else.
#[test]
fn dense_gemv_variant_only_on_256_thread_linears() {
    let (plan, _) = plan_file();
    let p = plan.program(Phase::Decode, 1).unwrap();
    check_plan(&plan).unwrap();
    let launches = &plan.programs[p].launches;
    let linear = launches.iter().position(|l| l.kernel.name() == "linear").unwrap();
    let other = launches.iter().position(|l| l.kernel.name() == "rms_norm").unwrap();
    for (at, block) in [(linear, [512, 1, 1]), (other, launches[other].block)] {
        let mut bad = plan.clone();
        let l = &mut bad.programs[p].launches[at];
        (l.occupancy, l.block) = (3, block);
        let name = l.name.clone();
        let msg = format!("{:#}", check_plan(&bad).unwrap_err());
        assert!(msg.contains("blocks per SM") && msg.contains(&name), "{msg}");
    }
    let mut good = plan.clone();
    let l = &mut good.programs[p].launches[linear];
    (l.occupancy, l.block) = (3, [256, 1, 1]);
    check_plan(&good).unwrap();
}

/// Decode attention's split grid is one wave of the split kernel's one block per SM
/// (`ATTENTION_SPLIT_TARGET_BLOCKS`) at every decode bucket of the reference shapes, and its
/// splits still cover the whole context.
#[test]
fn attention_split_grid_is_one_wave_and_covers_the_context() {
    use kiln::plan::planner::{attention_splits, ATTENTION_SPLIT_TARGET_BLOCKS};
    // (heads, kv_heads): Qwen2.5-0.5B, Llama-3.2-1B, Llama-3.1-8B, Qwen3-0.6B.
    for (heads, kv_heads) in [(14u32, 2u32), (32, 8), (32, 8), (16, 8)] {
        for rows in [1u32, 2, 4, 8] {
            for max_context in [128u32, 1024, 4096, 32768] {
                let (splits, split_len) = attention_splits(rows, heads, kv_heads, max_context);
                let blocks = rows * kv_heads * kiln::plan::geometry::attention_head_chunks(heads, kv_heads) * splits;
                assert!(splits * split_len >= max_context && split_len % 64 == 0, "{heads}/{kv_heads} rows {rows} ctx {max_context}");
                assert!(
                    blocks <= ATTENTION_SPLIT_TARGET_BLOCKS || splits == 1,
                    "{heads}/{kv_heads} rows {rows} ctx {max_context}: {splits} splits, {blocks} blocks"
                );
            }
        }
    }
    assert_eq!(attention_splits(1, 14, 2, 4096), (32, 128));
    assert_eq!(attention_splits(1, 32, 8, 4096), (16, 256));
}

/// Decode attention in one launch where its clusters fit in one wave (`ATTENTION_CLUSTER_WAVE`),
/// with the fewest heads per block that fit; split + merge where none does (larger buckets).
#[test]
fn attention_cluster_only_in_one_wave() {
    use kiln::plan::planner::{attention_cluster, ATTENTION_CLUSTER_WAVE};
    use kiln::plan::Kernel;
    let chunk = |rows, heads, kv_heads| match attention_cluster(rows, heads, kv_heads, 64, 0.125, 4352, 4352) {
        Some(Kernel::AttentionCluster { chunk_heads, split_len, .. }) => {
            assert_eq!(split_len, 544);
            Some(chunk_heads)
        }
        Some(k) => panic!("{k:?}"),
        None => None,
    };
    // Qwen2.5-0.5B (14 / 2): 14 and 28 clusters of one head at batch 1 and 2; 56, 32, 16 at 4.
    assert_eq!([1, 2, 4, 8].map(|r| chunk(r, 14, 2)), [Some(1), Some(1), None, None]);
    // Llama-3.2-1B / 3.1-8B (32 / 8): 32 clusters of one head at batch 1; 64, 32, 16 at 2.
    assert_eq!([1, 2, 4, 8].map(|r| chunk(r, 32, 8)), [Some(1), None, None, None]);
    // Qwen3-0.6B (16 / 8): group 2.
    assert_eq!([1, 2, 4, 8].map(|r| chunk(r, 16, 8)), [Some(1), Some(1), None, None]);
    for (c, wave) in ATTENTION_CLUSTER_WAVE {
        assert!(wave > 0 && [1, 2, 4].contains(&c));
    }
}

/// A fused bf16 plan of a preset shape with these decode buckets (prefill 16, context 256),
/// checked.
fn fused_bf16_plan(shape: &str, decode_buckets: &[usize]) -> (ModelConfig, kiln::plan::Plan) {
    let cfg = ModelConfig::preset(shape).unwrap();
    let opts = PlanOptions {
        decode_buckets: decode_buckets.to_vec(),
        prefill_buckets: vec![16],
        max_context: 256,
        fuse: true,
        dtype: DType::BF16,
        ..small_options()
    };
    let plan = build_plan(&cfg, &opts).unwrap();
    check_plan(&plan).unwrap();
    (cfg, plan)
}

/// Fused decode plans put RoPE and the KV write into the packed QKV GEMV (`qkv_rope`) on every
/// layer of every reference shape (the 0.5B's one-row decode on into the attention: `qkv_attention`,
/// rewrite 11), on the GEMV variant the packed QKV itself would take: the
/// Llama-3.1-8B's 384 blocks on the dense one (`_o3`, 3 per SM: one wave of 396 slots), which the
/// plan checker accepts; no `rope_kv_write` launch is left in decode.
#[test]
fn decode_qkv_rope_on_every_layer_with_the_gemv_variant() {
    use kiln::plan::geometry::{gemv_grid, GEMV_DENSE_BLOCKS_PER_SM};
    use kiln::plan::Kernel;
    for shape in ["qwen2.5-0.5b", "llama3.2-1b", "llama3.1-8b"] {
        let (cfg, plan) = fused_bf16_plan(shape, &[1, 4]);
        let features = ((cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim) as u32;
        for bucket in [1, 4] {
            let launches = &plan.programs[plan.program(Phase::Decode, bucket).unwrap()].launches;
            let qkv: Vec<&kiln::plan::Launch> = launches.iter().filter(|l| matches!(l.kernel, Kernel::QkvRope { .. })).collect();
            // The 0.5B's one-row decode goes on into the attention (rewrite 11, on by default).
            let folded = shape == "qwen2.5-0.5b" && bucket == 1;
            let qkv_attn = launches.iter().filter(|l| matches!(l.kernel, Kernel::QkvAttention { .. })).count();
            assert_eq!((qkv.len(), qkv_attn), if folded { (0, cfg.n_layers) } else { (cfg.n_layers, 0) }, "{shape} b{bucket}");
            assert!(!launches.iter().any(|l| matches!(l.kernel, Kernel::RopeKvWrite { .. })), "{shape} b{bucket}");
            let (blocks, threads, occupancy) = gemv_grid(features, cfg.hidden_size as u32);
            for l in qkv {
                assert_eq!((l.grid[0], l.block[0], l.occupancy), (blocks, threads, occupancy), "{shape} b{bucket} {}", l.name);
            }
        }
        if shape == "llama3.1-8b" {
            assert_eq!(gemv_grid(features, cfg.hidden_size as u32), (384, 256, GEMV_DENSE_BLOCKS_PER_SM));
            let symbols = kiln::runtime::cuda::abi::symbols(&plan);
            assert!(symbols.iter().any(|s| s == "kiln_qkv_rope_bf16_o3"), "{symbols:?}");
        }
    }
}

/// The dense `fused_linear` / `gated_linear` keep one tensor-core path (8 warps, a norm whose
/// rows are staged in shared memory): the planner asks for them only there, and the checker
/// refuses a dense launch without a norm or with rows too wide to stage.
#[test]
fn dense_fused_gemv_only_where_a_variant_has_its_path() {
    use kiln::plan::geometry::{dense_variant_covers, dense_variant_suffix, launch_geometry, FUSED_NORM_STAGE_BYTES};
    use kiln::plan::Kernel;
    // 304 blocks of 256 threads (Qwen2.5-0.5B's gate / up): a grid that takes the dense variant.
    let gated = |rows, in_features, norm| Kernel::GatedLinear { rows, in_features, out_features: 4864, norm, eps: 1e-6 };
    let fused = |rows, in_features, norm| Kernel::FusedLinear {
        rows,
        in_features,
        out_features: 4864,
        norm,
        eps: 1e-6,
        bias: false,
        residual: true,
        l2_prefetch: 0,
        out_norm: false,
    };
    let plain = Kernel::Linear { rows: 8, in_features: 4096, out_features: 4864, bias: false, argmax: false, stats: None };
    assert_eq!(launch_geometry(&plain, &[]).occupancy, 3, "the grid itself takes the dense variant");
    let widest = FUSED_NORM_STAGE_BYTES / 2;
    // (rows, in, norm, gated dense, fused dense, fused suffix): gated only with a staged norm;
    // fused with any norm, `_o3u` where its rows are not staged.
    for (rows, in_features, norm, gated_dense, fused_dense, suffix) in [
        (1, 896, true, true, true, "_o3"),
        (8, 1024, true, true, true, "_o3"),
        (1, widest, true, true, true, "_o3"),
        (1, widest + 8, true, false, true, "_o3u"),
        (8, 2048, true, false, true, "_o3u"),
        (1, 896, false, false, false, "_o3"),
    ] {
        for (k, dense) in [(gated(rows, in_features, norm), gated_dense), (fused(rows, in_features, norm), fused_dense)] {
            assert_eq!(dense_variant_covers(&k), dense, "{k:?}");
            assert_eq!(launch_geometry(&k, &[]).occupancy, if dense { 3 } else { 0 }, "{k:?}");
        }
        assert_eq!(dense_variant_suffix(&fused(rows, in_features, norm)), suffix);
    }
    // A fused plan of the 0.5B shape: its gate / up is dense with a staged norm; the checker
    // refuses the same launch once its norm is gone.
    let (_, plan) = fused_bf16_plan("qwen2.5-0.5b", &[1]);
    let p = plan.program(Phase::Decode, 1).unwrap();
    let at = plan.programs[p].launches.iter().position(|l| l.occupancy == 3 && l.kernel.name() == "gated_linear");
    let Some(at) = at else { panic!("no dense gated_linear in the fused decode.b1 program") };
    let mut bad = plan.clone();
    let l = &mut bad.programs[p].launches[at];
    if let Kernel::GatedLinear { norm, .. } = &mut l.kernel {
        *norm = false;
    }
    let name = l.name.clone();
    let msg = format!("{:#}", check_plan(&bad).unwrap_err());
    assert!(msg.contains("blocks per SM") && msg.contains(&name), "{msg}");
}

/// Which kernel each prefill op becomes: linears over more rows than the GEMV takes run as
/// library GEMMs with a workspace as their last operand; attention takes the tensor-core
/// prefill kernel only where it covers the dtype and head_dim; decode keeps its kernels.
#[test]
fn prefill_kernels_are_chosen_by_rows_dtype_and_head_dim() {
    use kiln::plan::{Kernel, GEMM_WORKSPACE_BYTES};
    let kinds = |plan: &Plan, phase: Phase, bucket: usize| -> Vec<&'static str> {
        let p = &plan.programs[plan.program(phase, bucket).unwrap()];
        p.launches.iter().map(|l| l.kernel.name()).collect()
    };
    let mut cfg = small_config();
    cfg.head_dim = 64;
    cfg.rope.rotary_dim = 64;
    for (dtype, attention) in [(DType::BF16, "attention_prefill"), (DType::F16, "attention_prefill"), (DType::F32, "attention")] {
        let opts = PlanOptions { prefill_buckets: vec![8, 16], dtype, ..small_options() };
        let plan = build_plan(&cfg, &opts).unwrap();
        // 8 rows: the GEMV path (linear); 16 rows: GEMMs.
        let t8 = kinds(&plan, Phase::Prefill, 8);
        assert!(t8.contains(&"linear") && !t8.contains(&"gemm"), "{dtype}: {t8:?}");
        let t16 = kinds(&plan, Phase::Prefill, 16);
        // Only the output projection (one sampled row) stays a GEMV.
        assert_eq!(t16.iter().filter(|k| **k == "linear").count(), 1, "{dtype}: {t16:?}");
        assert!(t16.contains(&"gemm") && t16.contains(&attention), "{dtype}: {t16:?}");
        let decode = kinds(&plan, Phase::Decode, 4);
        assert!(!decode.contains(&"gemm") && !decode.contains(&"attention_prefill"), "{decode:?}");
        let p = &plan.programs[plan.program(Phase::Prefill, 16).unwrap()];
        for l in p.launches.iter().filter(|l| l.kernel.is_library()) {
            let ws = l.bufs.last().unwrap();
            assert_eq!((ws.region, ws.access, ws.bytes), (RegionKind::Arena, Access::Write, GEMM_WORKSPACE_BYTES), "{}", l.name);
            assert_eq!((l.grid, l.block), ([0; 3], [0; 3]), "{}: a library call has no geometry", l.name);
            let Kernel::Gemm { bias, .. } = l.kernel else { unreachable!() };
            assert_eq!(l.bufs.len(), 4 + bias as usize, "{}", l.name);
        }
    }
    // A head_dim the prefill kernel does not cover keeps the general kernel.
    let plan = build_plan(&small_config(), &PlanOptions { prefill_buckets: vec![16], dtype: DType::BF16, ..small_options() }).unwrap();
    assert!(kinds(&plan, Phase::Prefill, 16).contains(&"attention"));
}

/// Invariant 9: in fused decode plans the QKV-with-RoPE reads the positions and cache bases
/// (and computes its rotation angles) before its wait: no launch of the program writes them
/// before it. The checker refuses an early read of bytes an earlier launch writes.
#[test]
fn early_reads_only_of_values_that_predate_the_program() {
    use kiln::plan::Kernel;
    let cfg = ModelConfig::preset("qwen2.5-0.5b").unwrap();
    let opts = PlanOptions {
        decode_buckets: vec![1, 2, 4],
        prefill_buckets: vec![16],
        max_context: 256,
        fuse: true,
        burst: 16,
        ..small_options()
    };
    let plan = build_plan(&cfg, &PlanOptions { dtype: DType::BF16, ..opts }).unwrap();
    // Batch 4: `qkv_rope`; batch 1: `qkv_attention` (rewrite 11), whose operands end the same way.
    for bucket in [1, 4] {
        for phase in [Phase::Decode, Phase::DecodeLoop] {
            let program = &plan.programs[plan.program(phase, bucket).unwrap()];
            let qkv: Vec<bool> = program
                .launches
                .iter()
                .filter_map(|l| match l.kernel {
                    Kernel::QkvRope { early, .. } if bucket == 4 => Some(early),
                    Kernel::QkvAttention { early, .. } if bucket == 1 => Some(early),
                    Kernel::QkvRope { .. } | Kernel::QkvAttention { .. } => panic!("{phase:?} b{bucket}: {}", l.name),
                    _ => None,
                })
                .collect();
            assert_eq!(qkv, vec![true; cfg.n_layers * program.loop_copies()], "{phase:?} b{bucket}");
        }
        let p = plan.program(Phase::Decode, bucket).unwrap();
        let launches = &plan.programs[p].launches;
        let at = launches.iter().position(|l| matches!(l.kernel, Kernel::QkvRope { .. } | Kernel::QkvAttention { .. })).unwrap();
        let written = *launches[0].bufs.iter().find(|b| b.access == Access::Write).unwrap();
        let mut bad = plan.clone();
        let l = &mut bad.programs[p].launches[at];
        let n = l.bufs.len();
        l.bufs[n - 5] = kiln::plan::BufArg { access: Access::Read, ..written };
        let name = l.name.clone();
        let msg = format!("{:#}", check_plan(&bad).unwrap_err());
        assert!(msg.contains("before its wait") && msg.contains(&name), "b{bucket}: {msg}");
    }

    // The decode attention's positions and cache bases predate the program too, and are planned
    // early (unless the plan-time A/B knob `KILN_ATTN_EARLY=0` is set, which no test sets): the
    // one-launch cluster attention at batch 2 (at batch 1 inside `qkv_attention`, above), split +
    // merge at batch 4 (its clusters would not fit in one wave). An early attention launch whose
    // positions an earlier launch writes is refused, and so is an early merge.
    for (bucket, per_layer) in [(1, 1), (2, 1), (4, 2)] {
        for phase in [Phase::Decode, Phase::DecodeLoop] {
            let program = &plan.programs[plan.program(phase, bucket).unwrap()];
            let launches = &program.launches;
            let attn: Vec<usize> = (0..launches.len())
                .filter(|&i| {
                    matches!(
                        launches[i].kernel,
                        Kernel::AttentionSplit { .. }
                            | Kernel::AttentionMerge { .. }
                            | Kernel::AttentionCluster { .. }
                            | Kernel::QkvAttention { .. }
                    )
                })
                .collect();
            assert_eq!(attn.len(), per_layer * cfg.n_layers * program.loop_copies(), "{phase:?} b{bucket}");
            for i in attn {
                assert!(kiln::plan::early_reads_safe(launches, &program.deps, i), "{phase:?} launch {i} `{}`", launches[i].name);
                let planned = match launches[i].kernel {
                    Kernel::AttentionSplit { early, .. }
                    | Kernel::AttentionMerge { early, .. }
                    | Kernel::AttentionCluster { early, .. }
                    | Kernel::QkvAttention { early, .. } => early,
                    _ => unreachable!(),
                };
                assert!(planned, "{phase:?} launch {i} `{}` is not planned early", launches[i].name);
            }
        }
    }
    for (bucket, kind) in [(4, 0), (4, 1), (2, 2)] {
        let p = plan.program(Phase::Decode, bucket).unwrap();
        let launches = &plan.programs[p].launches;
        let written = *launches[0].bufs.iter().find(|b| b.access == Access::Write).unwrap();
        let merge = kind == 1;
        let at = launches
            .iter()
            .position(|l| match kind {
                0 => matches!(l.kernel, Kernel::AttentionSplit { .. }),
                1 => matches!(l.kernel, Kernel::AttentionMerge { .. }),
                _ => matches!(l.kernel, Kernel::AttentionCluster { .. }),
            })
            .unwrap();
        let mut good = plan.clone();
        match &mut good.programs[p].launches[at].kernel {
            Kernel::AttentionSplit { early, .. } | Kernel::AttentionMerge { early, .. } | Kernel::AttentionCluster { early, .. } => {
                *early = true
            }
            _ => unreachable!(),
        }
        check_plan(&good).unwrap();
        let mut bad = good.clone();
        let l = &mut bad.programs[p].launches[at];
        l.bufs[if merge { 1 } else { 3 }] = kiln::plan::BufArg { access: Access::Read, ..written };
        let name = l.name.clone();
        let msg = format!("{:#}", check_plan(&bad).unwrap_err());
        assert!(msg.contains("before its wait") && msg.contains(&name), "{msg}");
    }
}

/// Invariant 9 in an unrolled device loop (`ProgramPlan::loop_copies`): the copies after the
/// first read early too, because each starts with a `gather` (a kernel that waits before it
/// releases its dependents) that follows the previous copy's `advance`, the writer of the
/// positions. Without that barrier the checker refuses the same early reads.
#[test]
fn early_reads_in_every_copy_of_an_unrolled_loop_only_behind_a_barrier() {
    use kiln::plan::Kernel;
    let cfg = ModelConfig::preset("qwen2.5-0.5b").unwrap();
    let opts = PlanOptions {
        decode_buckets: vec![1],
        prefill_buckets: vec![],
        max_context: 256,
        fuse: true,
        burst: 16,
        dtype: DType::BF16,
        ..small_options()
    };
    let plan = kiln::plan::build_plan_unrolled(&cfg, &opts, 3).unwrap();
    let p = plan.program(Phase::DecodeLoop, 1).unwrap();
    let program = &plan.programs[p];
    assert_eq!(program.loop_copies(), 3);
    let body = program.launches.len() / 3;
    let early = |l: &kiln::plan::Launch| l.kernel.early();
    // One early launch per layer: QKV-RoPE inside the attention (`qkv_attention`, rewrite 11).
    assert_eq!(program.launches.iter().filter(|l| early(l)).count(), 3 * cfg.n_layers, "qkv_attention, every copy");
    // Each copy starts with its gather, which depends on the previous copy's last launch alone.
    for c in 1..3u32 {
        let g = c as usize * body;
        assert!(matches!(program.launches[g].kernel, Kernel::Gather { .. }), "{}", program.launches[g].name);
        assert_eq!(program.launches[g].name, format!("u{c}.{}", program.launches[0].name));
        let into: Vec<u32> = program.deps.iter().filter(|&&(_, b)| b as usize == g).map(|&(a, _)| a).collect();
        assert_eq!(into, vec![g as u32 - 1], "copy {c}'s gather");
    }
    // Rule 11: a copy that is not the first's launches under `u{c}.` names is refused.
    let mut renamed = plan.clone();
    renamed.programs[p].launches[body + 3].name = "blk.0.not_a_copy".into();
    let msg = format!("{:#}", check_plan(&renamed).unwrap_err());
    assert!(msg.contains("is not copy 1 of launch 3"), "{msg}");
    // Copy 2's gather as a launch that releases its dependents first: no barrier before copy 2.
    let mut bad = plan.clone();
    let g = &mut bad.programs[p].launches[body];
    g.kernel = Kernel::Add { n: 1 };
    let msg = format!("{:#}", check_plan(&bad).unwrap_err());
    assert!(msg.contains("before its wait") && msg.contains("u1.") && msg.contains("no launch that waits"), "{msg}");
}

/// Every cluster launch's grid is whole clusters along the dimension its kernel's
/// `__cluster_dims__` names (the sampler's blocks of a row along x, the cluster attention's splits
/// along y, the k2 GEMV's pairs along x): a grid that is not would fail to launch on the GPU.
#[test]
fn cluster_launch_grids_are_whole_clusters() {
    use kiln::plan::geometry::{cluster_blocks, k2_launch};
    use kiln::plan::Kernel;
    let mut seen = [0usize; 4];
    for shape in ["qwen2.5-0.5b", "llama3.2-1b", "qwen3-0.6b"] {
        let cfg = ModelConfig::preset(shape).unwrap();
        let opts = PlanOptions {
            decode_buckets: vec![1, 2, 4, 8],
            prefill_buckets: vec![16],
            max_context: 4096,
            fuse: true,
            burst: 16,
            dtype: DType::BF16,
            ..small_options()
        };
        let plan = build_plan(&cfg, &opts).unwrap();
        for l in plan.programs.iter().flat_map(|p| &p.launches) {
            let Some(size) = cluster_blocks(l) else { continue };
            match l.kernel {
                Kernel::Sample { .. } | Kernel::SampleAdvance { .. } => {
                    assert!(l.grid[0].is_multiple_of(size) && l.grid[1] == 1 && l.grid[2] == 1, "{}: {:?}", l.name, l.grid);
                    seen[0] += 1;
                }
                Kernel::AttentionCluster { .. } => {
                    assert!(l.grid[1] == size && l.grid[2] == 1, "{}: {:?}", l.name, l.grid);
                    seen[1] += 1;
                }
                // The 0.5B's one-row decode: QKV-RoPE inside the cluster attention (rewrite 11).
                Kernel::QkvAttention { .. } => {
                    assert!(l.grid[1] == size && l.grid[2] == 1, "{}: {:?}", l.name, l.grid);
                    seen[2] += 1;
                }
                // The 0.5B's and Qwen3-0.6B's decode down over clusters of two (geometry::gemv_k2, on by default).
                Kernel::FusedLinear { .. } if k2_launch(l) => {
                    assert!(size == 2 && l.grid[0].is_multiple_of(2) && l.grid[1] == 1 && l.grid[2] == 1, "{}: {:?}", l.name, l.grid);
                    seen[3] += 1;
                }
                _ => panic!("{}: a cluster kernel this test does not know", l.name),
            }
        }
    }
    assert!(seen.iter().all(|&n| n > 0), "{seen:?}");
}

/// Invariant 12: a fused one-row device loop's vocabulary projection folds its argmax into a key
/// that the copy's `sample_advance` reads and zeroes (`lower::fuse` rewrite 9). The checker
/// refuses a key no sampler zeroes and a sampler whose key no linear folded into.
#[test]
fn argmax_keys_pair_up_with_their_samplers() {
    use kiln::plan::Kernel;
    let cfg = ModelConfig::preset("qwen2.5-0.5b").unwrap();
    let opts =
        PlanOptions { decode_buckets: vec![1, 2], prefill_buckets: vec![16], max_context: 256, fuse: true, burst: 16, ..small_options() };
    let plan = build_plan(&cfg, &PlanOptions { dtype: DType::BF16, ..opts }).unwrap();
    let p = plan.program(Phase::DecodeLoop, 1).unwrap();
    let keyed = |plan: &Plan, linear: bool| -> Vec<usize> {
        (0..plan.programs[p].launches.len())
            .filter(|&i| match plan.programs[p].launches[i].kernel {
                Kernel::Linear { argmax, .. } => linear && argmax,
                Kernel::SampleAdvance { argmax, .. } => !linear && argmax,
                _ => false,
            })
            .collect()
    };
    let copies = plan.programs[p].loop_copies();
    assert_eq!((keyed(&plan, true).len(), keyed(&plan, false).len()), (copies, copies));
    // Only the one-row loop: decode programs and the two-row loop keep `sample`, which scans.
    for (phase, rows) in [(Phase::Decode, 1), (Phase::DecodeLoop, 2)] {
        let other = &plan.programs[plan.program(phase, rows).unwrap()];
        assert!(other.launches.iter().all(|l| !matches!(l.kernel, Kernel::Linear { argmax: true, .. })), "{phase:?} b{rows}");
    }
    check_plan(&plan).unwrap();
    // Every copy's sampler without its key, then every copy's linear without its key.
    for linear in [false, true] {
        let mut bad = plan.clone();
        for i in keyed(&plan, linear) {
            let l = &mut bad.programs[p].launches[i];
            l.bufs.pop();
            match &mut l.kernel {
                Kernel::Linear { argmax, .. } | Kernel::SampleAdvance { argmax, .. } => *argmax = false,
                _ => unreachable!(),
            }
        }
        let msg = format!("{:#}", check_plan(&bad).unwrap_err());
        // (One copy: the key is left folded at the program's end; two or more: the next copy folds into it.)
        let ok = if linear {
            msg.contains("no argmax linear folded into")
        } else {
            msg.contains("before a sampler zeroed it") || msg.contains("never read and zeroed")
        };
        assert!(ok, "{msg}");
    }
}

/// The planned L2 prefetch (`planner::plan_l2_prefetch`): in every fused decode program of the
/// reference shapes, each o projection (the GEMV right after an attention launch) and no other
/// launch asks the L2 for the first grid x `L2_PREFETCH_BYTES` of the next launch's gate weight,
/// its span operand right before `out`; the checker refuses a span that is larger (rule 13); the
/// CPU reference reads nothing there (`tests/fusion.rs`, `tests/cpu_numerics.rs` run these plans).
#[test]
fn o_projections_prefetch_the_gate_weights_first_bytes() {
    use kiln::plan::planner::L2_PREFETCH_BYTES;
    use kiln::plan::Kernel;
    for shape in ["qwen2.5-0.5b", "llama3.2-1b", "llama3.1-8b"] {
        let cfg = ModelConfig::preset(shape).unwrap();
        let opts = PlanOptions {
            decode_buckets: vec![1, 4],
            prefill_buckets: vec![16],
            max_context: 256,
            fuse: true,
            burst: 16,
            dtype: DType::BF16,
            ..small_options()
        };
        let plan = build_plan(&cfg, &opts).unwrap();
        check_plan(&plan).unwrap();
        for (phase, bucket) in [(Phase::Decode, 1), (Phase::Decode, 4), (Phase::DecodeLoop, 1)] {
            let program = &plan.programs[plan.program(phase, bucket).unwrap()];
            let launches = &program.launches;
            let mut planned = 0;
            for (i, l) in launches.iter().enumerate() {
                let Kernel::FusedLinear { l2_prefetch, .. } = l.kernel else { continue };
                let o = matches!(
                    launches[i - 1].kernel,
                    Kernel::AttentionCluster { .. } | Kernel::AttentionMerge { .. } | Kernel::QkvAttention { .. }
                );
                if !o {
                    assert_eq!(l2_prefetch, 0, "{shape} {phase:?} b{bucket} {}", l.name);
                    continue;
                }
                assert_eq!(l2_prefetch, L2_PREFETCH_BYTES, "{shape} {phase:?} b{bucket} {}", l.name);
                let Kernel::GatedLinear { norm: true, .. } = launches[i + 1].kernel else { panic!("{shape}: {}", launches[i + 1].name) };
                let (span, gate) = (&l.bufs[l.bufs.len() - 2], &launches[i + 1].bufs[2]);
                assert_eq!((span.region, span.offset), (gate.region, gate.offset), "{shape} {}", l.name);
                assert_eq!(span.bytes, l.grid[0] as u64 * L2_PREFETCH_BYTES as u64, "{shape} {}", l.name);
                assert!(span.bytes <= gate.bytes);
                planned += 1;
            }
            assert_eq!(planned, cfg.n_layers * program.loop_copies(), "{shape} {phase:?} b{bucket}");
        }
        // Rule 13: a span one block's bytes short of what the grid asks for is refused.
        let mut bad = plan.clone();
        let p = plan.program(Phase::Decode, 1).unwrap();
        let i = bad.programs[p].launches.iter().position(|l| matches!(l.kernel, Kernel::FusedLinear { l2_prefetch: 1.., .. })).unwrap();
        let l = &mut bad.programs[p].launches[i];
        let at = l.bufs.len() - 2;
        l.bufs[at].bytes -= L2_PREFETCH_BYTES as u64;
        let msg = format!("{:#}", check_plan(&bad).unwrap_err());
        assert!(msg.contains("L2 prefetch span"), "{msg}");
    }
}
