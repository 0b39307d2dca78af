//! The fusion pass changes launches, not results: on the CPU reference, every program of a
//! fused plan gives the logits of the unfused plan, for every architecture variant (norm
//! prologues, gated MLP, residual epilogues, QKV bias, Q/K norm, tied/untied), in f32, f16 and
//! bf16, and it cuts the launch count. Bit for bit where every fused norm is applied before the
//! dot product (f16, and prefill, which fuses no norm into a linear); within rounding where it
//! is applied after it (`ir::NormOrder::AfterDot`: f32 and bf16 decode).

mod common_cpu;

use common_cpu::{normalized_error, Shape};
use kiln::ir::{DType, NormOrder, Phase, RopeScaling, RopeStyle};
use kiln::model::SrcDType;
use kiln::plan::{build_plan, Kernel, PlanOptions};
use kiln::runtime::cpu::CpuExecutor;
use kiln::synth::MemWeights;

#[test]
fn fused_plans_match_unfused() {
    // The last two have Q/K/V weights and biases of whole 256-byte blocks: their QKV is packed
    // (one linear over the three weights laid out back to back, read by a packed rope_kv_write)
    // in prefill, and one qkv_rope in decode (head_dim 64).
    let shapes = [
        (false, false, true, RopeStyle::Interleaved, false),
        (true, false, true, RopeStyle::HalfSplit, false),
        (false, true, false, RopeStyle::HalfSplit, false),
        (true, false, false, RopeStyle::HalfSplit, true),
        (false, false, true, RopeStyle::Interleaved, true),
    ];
    for (qkv_bias, qk_norm, tied, style, packable) in shapes {
        let (hidden, head_dim) = if packable { (128, 64) } else { (24, 6) };
        let cfg = Shape {
            vocab: 40,
            hidden,
            ffn: 40,
            layers: 2,
            heads: 4,
            kv_heads: 2,
            head_dim,
            rotary_dim: head_dim,
            style,
            scaling: RopeScaling::None,
            tied,
            qkv_bias,
            qk_norm,
        }
        .build();
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let opts = |fuse| PlanOptions {
                decode_buckets: vec![1, 2],
                prefill_buckets: vec![8],
                max_context: 32,
                dtype,
                memory_budget: None,
                burst: 0,
                fuse,
            };
            let (plain, fused) = (build_plan(&cfg, &opts(false)).unwrap(), build_plan(&cfg, &opts(true)).unwrap());
            let count = |p: &kiln::plan::Plan, i: usize| p.programs[i].launches.len();
            for prog in &fused.programs {
                let packed_rkv = prog.launches.iter().filter(|l| matches!(l.kernel, Kernel::RopeKvWrite { packed: true, .. })).count();
                let split_qkv = prog.launches.iter().filter(|l| l.kernel.name() == "qkv_linear").count();
                let qkv_rope = prog.launches.iter().filter(|l| matches!(l.kernel, Kernel::QkvRope { .. })).count();
                let qkv_attn = prog.launches.iter().filter(|l| matches!(l.kernel, Kernel::QkvAttention { .. })).count();
                // Packable shapes have head_dim 64: their decode QKV also takes RoPE and the KV
                // write (rewrite 7, head_dim % 16 == 0); prefill keeps the packed rope_kv_write.
                // One-row bf16 decode with half-split RoPE goes on into the attention (rewrite 11,
                // on by default: the Qwen2.5-0.5B's class).
                let want_packed = packable && !qk_norm;
                let decode = prog.phase == Phase::Decode;
                let into_attn = want_packed && decode && prog.bucket == 1 && dtype == DType::BF16 && style == RopeStyle::HalfSplit;
                assert_eq!(packed_rkv, if want_packed && !decode { cfg.n_layers } else { 0 }, "packed rope_kv_writes in {}", prog.label());
                assert_eq!(qkv_rope, if want_packed && decode && !into_attn { cfg.n_layers } else { 0 }, "qkv_ropes in {}", prog.label());
                assert_eq!(qkv_attn, if into_attn { cfg.n_layers } else { 0 }, "qkv_attentions in {} ({dtype:?})", prog.label());
                let want_split = if decode && !want_packed { cfg.n_layers } else { 0 };
                assert_eq!(split_qkv, want_split, "three-output qkv_linears in {}", prog.label());
            }
            assert!(count(&fused, 0) < count(&plain, 0), "fusion should cut launches: {} vs {}", count(&fused, 0), count(&plain, 0));
            let src = match dtype {
                DType::F32 => SrcDType::F32,
                DType::F16 => SrcDType::F16,
                _ => SrcDType::BF16,
            };
            let w = MemWeights::random(&cfg, 3, src);
            let mut a = CpuExecutor::new(plain.clone(), &w).unwrap();
            let mut b = CpuExecutor::new(fused.clone(), &w).unwrap();
            let prefill = plain.program(Phase::Prefill, 8).unwrap();
            // Prefill takes rewrites 5 (rope_kv_write) and 6 (add_rms_norm).
            assert!(count(&fused, prefill) < count(&plain, prefill), "prefill fusion should cut launches");
            let adds_normed = fused.programs[prefill].launches.iter().filter(|l| l.kernel.name() == "add_rms_norm").count();
            // Every residual add feeds the next norm but the last, whose sum is gathered to the
            // logit rows before the final norm.
            assert_eq!(adds_normed, 2 * cfg.n_layers - 1, "residual adds fused with the norm after them");
            // Prefill 6 tokens, then 5 decode steps at batch 2 (two sequences).
            let mut worst = 0.0f64;
            common_cpu::prefill_then_decode((&plain, &mut a), (&fused, &mut b), 8, 5, |what, la, lb| {
                match (what, NormOrder::of(dtype), dtype) {
                    ("prefill", ..) | (_, NormOrder::BeforeDot, _) => assert_eq!(la, lb, "{what}"),
                    // One rounding of each normed element moved (x * w rounded instead of
                    // x * inv, then times w): bf16 logits move by a few units in the last place
                    // of their largest (8 mantissa bits: 2^-8 = 3.9e-3), f32 ones by ~2^-20.
                    (_, NormOrder::AfterDot, dt) => {
                        let bound = if dt == DType::F32 { 4e-6 } else { 2e-2 };
                        let err = normalized_error(&la, &lb);
                        assert!(err <= bound, "{what} ({dt:?}): normalized error {err:.3e} > {bound:e}");
                        worst = worst.max(err);
                    }
                }
            });
            eprintln!("{dtype:?} qkv_bias={qkv_bias} qk_norm={qk_norm} packable={packable}: decode normalized error {worst:.3e}");
            if NormOrder::of(dtype) == NormOrder::AfterDot {
                assert!(worst > 0.0, "{dtype:?}: a norm after the dot product rounds differently from the unfused ops");
            }
        }
    }
}

#[test]
fn the_vocabulary_projection_keeps_its_own_norm() {
    // Rewrite 1 skips linears wider than NORM_PROLOGUE_MAX_FEATURES: the final norm stays a
    // launch of its own before the logits; the per-layer norms are still folded.
    let cfg = Shape {
        vocab: kiln::lower::fuse::NORM_PROLOGUE_MAX_FEATURES + 1,
        hidden: 16,
        ffn: 32,
        layers: 2,
        heads: 2,
        kv_heads: 1,
        head_dim: 8,
        rotary_dim: 8,
        style: RopeStyle::HalfSplit,
        scaling: RopeScaling::None,
        tied: false,
        qkv_bias: false,
        qk_norm: false,
    }
    .build();
    let opts = |fuse| PlanOptions {
        decode_buckets: vec![1],
        prefill_buckets: vec![8],
        max_context: 16,
        dtype: DType::BF16,
        memory_budget: None,
        burst: 0,
        fuse,
    };
    let norms = |p: &kiln::plan::Plan| {
        p.program(Phase::Decode, 1).map(|i| p.programs[i].launches.iter().filter(|l| l.kernel.name() == "rms_norm").count()).unwrap()
    };
    let (plain, fused) = (build_plan(&cfg, &opts(false)).unwrap(), build_plan(&cfg, &opts(true)).unwrap());
    assert_eq!(norms(&plain), 2 * 2 + 1, "two norms per layer and the final one");
    assert_eq!(norms(&fused), 1, "only the final norm before the vocabulary projection is left");
}
