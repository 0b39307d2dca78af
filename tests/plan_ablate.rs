//! The plan-time timing ablation `KILN_PLAN_ABLATE=attention` (`lower::fuse::ablate_attention`):
//! decode programs lose their attention ops, the o projection reads the attention's q in place of
//! its output, prefill programs keep theirs, and the plans still verify, plan, check and run on
//! the CPU reference, plain and fused alike. One test: the knob is read once per process.

mod common_cpu;

use common_cpu::Shape;
use kiln::ir::{DType, Op, Phase, RopeScaling, RopeStyle};
use kiln::lower::{fuse, lower, LowerOptions};
use kiln::model::SrcDType;
use kiln::plan::{build_plan, PlanOptions};
use kiln::runtime::cpu::CpuExecutor;
use kiln::synth::MemWeights;

#[test]
fn attention_ablation_drops_decode_attention_only() {
    std::env::set_var("KILN_PLAN_ABLATE", "attention");
    // Packable (head_dim 64, whole 256-byte weights): the fused decode QKV is one qkv_rope.
    let cfg = Shape {
        vocab: 40,
        hidden: 128,
        ffn: 40,
        layers: 2,
        heads: 4,
        kv_heads: 2,
        head_dim: 64,
        rotary_dim: 64,
        style: RopeStyle::HalfSplit,
        scaling: RopeScaling::None,
        tied: true,
        qkv_bias: false,
        qk_norm: false,
    }
    .build();
    // Attention ops, or QKV-RoPE and attention in one op (rewrite 11: one-row bf16 decode here).
    let attentions =
        |p: &kiln::ir::Program| p.ops.iter().filter(|n| matches!(n.op, Op::Attention { .. } | Op::QkvAttention { .. })).count();

    // The pass itself: every decode attention gone, its readers now read its q.
    let lopts = LowerOptions { dtype: DType::BF16, kv_rows: 64, burst: 0 };
    for fused in [false, true] {
        let mut d = lower(&cfg, Phase::Decode, 1, lopts).unwrap();
        if fused {
            d = fuse::fuse(&d).unwrap();
        }
        assert_eq!(attentions(&d), cfg.n_layers);
        let folded = d.ops.iter().filter(|n| matches!(n.op, Op::QkvAttention { .. })).count();
        assert_eq!(folded, if fused { cfg.n_layers } else { 0 }, "rewrite 11 is on by default");
        // The q each o projection reads once the attention is gone: an attention's q, or what a
        // QkvAttention wrote as its output (its QKV-RoPE's q once ablated).
        let qs: Vec<String> = d
            .ops
            .iter()
            .filter_map(|n| match n.op {
                Op::Attention { q, .. } | Op::QkvAttention { out: q, .. } => Some(d.value(q).name.clone()),
                _ => None,
            })
            .collect();
        let a = fuse::ablate_attention(&d).unwrap();
        assert_eq!(attentions(&a), 0, "fused={fused}");
        let qkv_ropes = a.ops.iter().filter(|n| matches!(n.op, Op::QkvRope { .. })).count();
        assert_eq!(qkv_ropes, if fused { cfg.n_layers } else { 0 }, "fused={fused}: each QkvAttention leaves its QkvRope");
        assert_eq!(a.ops.len(), d.ops.len() - (cfg.n_layers - folded), "fused={fused}: only the attentions go");
        // Each q is now read by the op that read the attention's output (the o projection).
        for q in &qs {
            let readers = a.ops.iter().filter(|n| n.op.reads().iter().any(|&v| &a.value(v).name == q)).count();
            assert_eq!(readers, 1, "fused={fused}: {q} should be read by its layer's o projection");
        }
        let p = lower(&cfg, Phase::Prefill, 8, lopts).unwrap();
        assert_eq!(fuse::ablate_attention(&p).unwrap().ops.len(), p.ops.len(), "prefill keeps its attention");
    }

    // Plans built with the knob: no decode attention launch; prefill's stays; both run on the CPU.
    let opts = |fuse| PlanOptions {
        decode_buckets: vec![1, 2],
        prefill_buckets: vec![8],
        max_context: 32,
        dtype: DType::BF16,
        memory_budget: None,
        burst: 0,
        fuse,
    };
    let (plain, fused) = (build_plan(&cfg, &opts(false)).unwrap(), build_plan(&cfg, &opts(true)).unwrap());
    for plan in [&plain, &fused] {
        for prog in &plan.programs {
            let n = prog.launches.iter().filter(|l| l.kernel.name().starts_with("attention")).count();
            if prog.phase == Phase::Prefill {
                assert_eq!(n, cfg.n_layers, "{}", prog.label());
            } else {
                assert_eq!(n, 0, "{}", prog.label());
            }
        }
    }
    let w = MemWeights::random(&cfg, 5, SrcDType::BF16);
    let mut a = CpuExecutor::new(plain.clone(), &w).unwrap();
    let mut b = CpuExecutor::new(fused.clone(), &w).unwrap();
    // Fused decode applies its norms after the dot product: within rounding (tests/fusion.rs).
    common_cpu::prefill_then_decode((&plain, &mut a), (&fused, &mut b), 8, 4, |what, la, lb| {
        let err = common_cpu::normalized_error(&la, &lb);
        assert!(common_cpu::f32s(&la).iter().all(|x| x.is_finite()), "{what}: logits not finite");
        assert!(err <= 2e-2, "{what}: normalized error {err:.3e}");
    });
}
