//! Tile-packed GEMV weights (`lower::tiles`, plan time `KILN_GEMV_TILES`, by default where every
//! 16-bit GEMV weight can be packed): the plan reads tile-packed twins in its GEMV-family launches and the row-major originals in the
//! library GEMMs of prefill and the embedding gather; on the CPU reference it gives the logits of
//! the row-major plan bit for bit (the loader permutes each twin, the CPU indexes it, and sums
//! in the same order), plain and fused, tied and untied, f16 and bf16.

mod common_cpu;

use common_cpu::Shape;
use kiln::ir::{DType, Phase, RopeScaling, RopeStyle};
use kiln::lower::tiles::{self, Mode};
use kiln::model::SrcDType;
use kiln::plan::{build_plan_tiles, Kernel, Layout, Plan, PlanOptions, RegionKind};
use kiln::runtime::cpu::CpuExecutor;
use kiln::synth::MemWeights;

fn weight_names(plan: &Plan, program: usize) -> Vec<(String, Vec<String>)> {
    plan.programs[program]
        .launches
        .iter()
        .map(|l| {
            let names = l
                .bufs
                .iter()
                .filter(|b| b.region == RegionKind::Weights)
                .filter_map(|b| plan.tensors.iter().find(|t| t.region == RegionKind::Weights && t.offset == b.offset))
                .map(|t| t.name.clone())
                .collect();
            (l.kernel.name().to_string(), names)
        })
        .collect()
}

/// A small Llama-style config of these dimensions (`common_cpu::Shape`).
fn config(vocab: usize, hidden: usize, ffn: usize, heads: usize, head_dim: usize, tied: bool) -> kiln::model::ModelConfig {
    Shape {
        vocab,
        hidden,
        ffn,
        layers: 2,
        heads,
        kv_heads: heads / 2,
        head_dim,
        rotary_dim: head_dim,
        style: RopeStyle::HalfSplit,
        scaling: RopeScaling::None,
        tied,
        qkv_bias: false,
        qk_norm: false,
    }
    .build()
}

/// Decode buckets 1 and 2, prefill bucket 16 (its linears are library GEMMs), context 32.
fn options(dtype: DType, fuse: bool) -> PlanOptions {
    PlanOptions { decode_buckets: vec![1, 2], prefill_buckets: vec![16], max_context: 32, dtype, memory_budget: None, burst: 0, fuse }
}

#[test]
fn tiled_plans_give_the_row_major_plans_logits_bit_for_bit() {
    for (tied, fuse, dtype) in [(true, true, DType::BF16), (false, true, DType::F16), (false, false, DType::BF16)] {
        let cfg = config(64, 128, 96, 4, 32, tied);
        let opts = options(dtype, fuse);
        let plain = build_plan_tiles(&cfg, &opts, Mode::Off).unwrap();
        let tiled = build_plan_tiles(&cfg, &opts, Mode::On).unwrap();
        assert_eq!(build_plan_tiles(&cfg, &opts, Mode::Auto).unwrap(), tiled, "the default plan is the tiled one");
        assert!(tiled.gemv_tiles() && !plain.gemv_tiles());
        let twins = tiled.tensors.iter().filter(|t| t.layout == Layout::GemvTiles).count();
        assert!(tiled.tensors.iter().all(|t| (t.layout == Layout::GemvTiles) == t.name.ends_with(tiles::SUFFIX)));
        assert!(tiled
            .tensors
            .iter()
            .filter(|t| t.layout == Layout::GemvTiles)
            .all(|t| t.name == "output.weight@tiles" || tiled.tensor(t.source()).is_some()));
        // q, k, v, o, gate, up, down per layer and the output projection (the table when tied).
        assert_eq!(twins, 7 * cfg.n_layers + 1, "twins in the tiled plan");
        // An untied output projection is read by GEMVs only: its row-major original is not planned
        // (the twin loads from the model's tensor), so it is no second copy.
        assert!(tiled.tensor("output.weight").is_none());
        assert_eq!(plain.tensor("output.weight").is_some(), !tied);
        assert_eq!(tiled.tensor("output.weight@tiles").is_some(), !tied);
        assert_eq!(tiled.gemv_tiles_bytes().0, 7 * cfg.n_layers + tied as usize, "second copies");
        let decode = tiled.program(Phase::Decode, 1).unwrap();
        for (kernel, names) in weight_names(&tiled, decode) {
            let gemv = !matches!(kernel.as_str(), "gather" | "rms_norm" | "add_rms_norm");
            for n in names.iter().filter(|n| !n.contains("norm")) {
                assert_eq!(n.ends_with(tiles::SUFFIX), gemv, "decode {kernel} reads {n}");
            }
        }
        let prefill = tiled.program(Phase::Prefill, 16).unwrap();
        for (kernel, names) in weight_names(&tiled, prefill) {
            if kernel == "gemm" || kernel == "gather" {
                assert!(names.iter().all(|n| !n.ends_with(tiles::SUFFIX)), "prefill {kernel} reads {names:?}");
            }
        }
        assert!(matches!(
            tiled.programs[prefill].launches.iter().find(|l| l.kernel.name() == "gemm").map(|l| &l.kernel),
            Some(Kernel::Gemm { .. })
        ));

        let src = if dtype == DType::F16 { SrcDType::F16 } else { SrcDType::BF16 };
        let w = MemWeights::random(&cfg, 5, src);
        let mut a = CpuExecutor::new(plain.clone(), &w).unwrap();
        let mut b = CpuExecutor::new(tiled.clone(), &w).unwrap();
        common_cpu::prefill_then_decode((&plain, &mut a), (&tiled, &mut b), 16, 4, |what, la, lb| assert_eq!(la, lb, "{what}"));
    }
}

#[test]
fn a_weight_that_cannot_be_packed_makes_the_default_plan_row_major_and_is_refused_by_name_when_required() {
    let cfg = config(40, 24, 40, 4, 6, false);
    let opts = options(DType::BF16, true);
    let e = format!("{:#}", build_plan_tiles(&cfg, &opts, Mode::On).unwrap_err());
    assert!(e.contains("cannot be tile-packed") && e.contains("KILN_GEMV_TILES"), "{e}");
    let auto = build_plan_tiles(&cfg, &opts, Mode::Auto).unwrap();
    assert_eq!(auto, build_plan_tiles(&cfg, &opts, Mode::Off).unwrap());
    assert!(!auto.gemv_tiles());
}

#[test]
fn f32_weights_stay_row_major() {
    let cfg = config(64, 128, 96, 4, 32, false);
    let opts = options(DType::F32, true);
    for mode in [Mode::Auto, Mode::On] {
        let plan = build_plan_tiles(&cfg, &opts, mode).unwrap();
        assert!(!plan.gemv_tiles(), "{mode:?}");
        assert_eq!(plan, build_plan_tiles(&cfg, &opts, Mode::Off).unwrap());
    }
}

#[test]
fn the_default_plans_row_major_where_the_second_copy_would_not_fit_the_budget() {
    let cfg = config(64, 128, 96, 4, 32, true);
    let plain = build_plan_tiles(&cfg, &options(DType::BF16, true), Mode::Off).unwrap();
    let tiled = build_plan_tiles(&cfg, &options(DType::BF16, true), Mode::On).unwrap();
    assert!(tiled.total_bytes() > plain.total_bytes());
    let opts = PlanOptions { memory_budget: Some(plain.total_bytes()), ..options(DType::BF16, true) };
    let auto = build_plan_tiles(&cfg, &opts, Mode::Auto).unwrap();
    assert!(!auto.gemv_tiles() && auto.total_bytes() == plain.total_bytes());
    // Required, the budget error says how much the second copy is and how to plan without it.
    let e = format!("{:#}", build_plan_tiles(&cfg, &opts, Mode::On).unwrap_err());
    assert!(e.contains("memory budget") && e.contains("KILN_GEMV_TILES=0"), "{e}");
}

#[test]
fn a_tiled_plan_survives_its_file_and_its_dump_names_the_layout() {
    let cfg = config(64, 128, 96, 4, 32, true);
    let tiled = build_plan_tiles(&cfg, &options(DType::BF16, true), Mode::On).unwrap();
    let back = kiln::plan::file::from_bytes(&kiln::plan::file::to_bytes(&tiled).unwrap(), "test plan").unwrap();
    assert_eq!(back, tiled);
    let dump = kiln::plan::dump::dump(&tiled);
    assert!(dump.lines().any(|l| l.contains("@tiles") && l.ends_with(" gemv-tiles")), "{dump}");
}

#[test]
fn the_gate_checks_a_tiled_plan_and_row_major_ones() {
    // `kiln gate`'s `llama-tiles` and `llama-vocab` models get tile-packed plans by default, its other
    // 16-bit models row-major.
    for (kind, tiled) in [("llama-tiles", true), ("llama-vocab", true), ("llama", false), ("qwen2", false), ("qwen3", false)] {
        let cfg = kiln::gate::random_config(kind).unwrap();
        let plan = build_plan_tiles(&cfg, &options(DType::BF16, true), Mode::Auto).unwrap();
        assert_eq!(plan.gemv_tiles(), tiled, "{kind}");
    }
}

#[test]
fn the_plan_checker_refuses_a_plan_whose_layouts_disagree_with_its_kernels() {
    let cfg = config(64, 128, 96, 4, 32, true);
    let tiled = build_plan_tiles(&cfg, &options(DType::BF16, true), Mode::On).unwrap();
    // A twin marked row-major: the GEMVs of a tiled plan would read it as tile-packed.
    let mut bad = tiled.clone();
    let twin = bad.tensors.iter().position(|t| t.layout == Layout::GemvTiles).unwrap();
    let last = bad.tensors.iter().rposition(|t| t.layout == Layout::GemvTiles).unwrap();
    assert!(last > twin);
    bad.tensors[twin].layout = Layout::RowMajor;
    let e = format!("{:#}", kiln::plan::check::check_plan(&bad).unwrap_err());
    assert!(e.contains("laid out row-major") && e.contains("gemv-tiles"), "{e}");
    // A row-major original marked tile-packed: read by the gather or a library GEMM.
    let mut bad = tiled.clone();
    let original = bad.tensors.iter().position(|t| t.name == "token_embd.weight").unwrap();
    bad.tensors[original].layout = Layout::GemvTiles;
    assert!(kiln::plan::check::check_plan(&bad).is_err());
    // A twin of no weight of the model's table (its original need not be planned, but must exist).
    let mut bad = tiled.clone();
    bad.tensors[twin].name = "blk.0.attn_nothing.weight@tiles".into();
    let e = format!("{:#}", kiln::plan::check::check_plan(&bad).unwrap_err());
    assert!(e.contains("no row-major weight `blk.0.attn_nothing.weight`"), "{e}");
}
