//! Tile-packed GEMV weights (`lower::tiles`, plan time `KILN_GEMV_TILES=1`; an experiment): the
//! plan reads tile-packed twins in its GEMV-family launches and the row-major originals in the
//! library GEMMs of prefill and the embedding gather; on the CPU reference it gives the logits of
//! the row-major plan bit for bit (the loader permutes each twin, the CPU indexes it, and sums
//! in the same order), plain and fused, tied and untied, f16 and bf16.

mod common_cpu;

use common_cpu::Shape;
use kiln::ir::{DType, Phase, RopeScaling, RopeStyle};
use kiln::lower::{names, tiles};
use kiln::model::SrcDType;
use kiln::plan::{build_plan_tiles, Kernel, Plan, PlanOptions, RegionKind};
use kiln::runtime::cpu::CpuExecutor;
use kiln::runtime::{Executor, StepBlock};
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

#[test]
fn tiled_plans_give_the_row_major_plans_logits_bit_for_bit() {
    for (tied, fuse, dtype) in [(true, true, DType::BF16), (false, true, DType::F16), (false, false, DType::BF16)] {
        let cfg = Shape {
            vocab: 64,
            hidden: 128,
            ffn: 96,
            layers: 2,
            heads: 4,
            kv_heads: 2,
            head_dim: 32,
            rotary_dim: 32,
            style: RopeStyle::HalfSplit,
            scaling: RopeScaling::None,
            tied,
            qkv_bias: false,
            qk_norm: false,
        }
        .build();
        let opts = PlanOptions {
            decode_buckets: vec![1, 2],
            prefill_buckets: vec![16],
            max_context: 32,
            dtype,
            memory_budget: None,
            burst: 0,
            fuse,
        };
        let plain = build_plan_tiles(&cfg, &opts, false).unwrap();
        let tiled = build_plan_tiles(&cfg, &opts, true).unwrap();
        let twins = tiled.tensors.iter().filter(|t| t.name.ends_with(tiles::SUFFIX)).count();
        // q, k, v, o, gate, up, down per layer and the output projection (the table when tied).
        assert_eq!(twins, 7 * cfg.n_layers + 1, "twins in the tiled plan");
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
        let mut step = StepBlock::new(&plain);
        let ids: Vec<i32> = (0..16).map(|i| if i < 6 { 1 + 4 * i } else { 0 }).collect();
        let pos: Vec<i32> = (0..16).map(|i| if i < 6 { i } else { -1 }).collect();
        step.set_i32(&plain, names::TOKEN_IDS, &ids).unwrap();
        step.set_i32(&plain, names::POSITIONS, &pos).unwrap();
        step.set_i32(&plain, names::CACHE_BASE, &[0; 16]).unwrap();
        step.set_i32(&plain, names::LOGIT_ROWS, &[5]).unwrap();
        let p = plain.program(Phase::Prefill, 16).unwrap();
        assert_eq!(tiled.program(Phase::Prefill, 16), Some(p));
        a.run(p, &step).unwrap();
        let mut step_b = StepBlock::new(&tiled);
        step_b.bytes.copy_from_slice(&step.bytes);
        b.run(p, &step_b).unwrap();
        let v = cfg.vocab_size;
        assert_eq!(a.read_tensor(names::LOGITS, 4 * v).unwrap(), b.read_tensor(names::LOGITS, 4 * v).unwrap(), "prefill logits");
        let d = plain.program(Phase::Decode, 2).unwrap();
        for i in 0..4 {
            let mut s = StepBlock::new(&plain);
            s.set_i32(&plain, names::TOKEN_IDS, &[3 + i, 7 + i]).unwrap();
            s.set_i32(&plain, names::POSITIONS, &[6 + i, i]).unwrap();
            s.set_i32(&plain, names::CACHE_BASE, &[0, 32]).unwrap();
            a.run(d, &s).unwrap();
            let mut sb = StepBlock::new(&tiled);
            sb.bytes.copy_from_slice(&s.bytes);
            b.run(d, &sb).unwrap();
            assert_eq!(a.read_tensor(names::LOGITS, 8 * v).unwrap(), b.read_tensor(names::LOGITS, 8 * v).unwrap(), "decode step {i}");
        }
    }
}

#[test]
fn a_weight_that_cannot_be_packed_is_refused_by_name() {
    let cfg = Shape {
        vocab: 40,
        hidden: 24,
        ffn: 40,
        layers: 1,
        heads: 4,
        kv_heads: 2,
        head_dim: 6,
        rotary_dim: 6,
        style: RopeStyle::HalfSplit,
        scaling: RopeScaling::None,
        tied: false,
        qkv_bias: false,
        qk_norm: false,
    }
    .build();
    let opts = PlanOptions {
        decode_buckets: vec![1],
        prefill_buckets: vec![16],
        max_context: 32,
        dtype: DType::BF16,
        memory_budget: None,
        burst: 0,
        fuse: true,
    };
    let e = format!("{:#}", build_plan_tiles(&cfg, &opts, true).unwrap_err());
    assert!(e.contains("cannot be tile-packed") && e.contains("KILN_GEMV_TILES"), "{e}");
}
