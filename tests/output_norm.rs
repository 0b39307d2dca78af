//! The output norm carried by its producer (`lower::fuse` rewrite 10, plan-time knob
//! `KILN_FUSE_OUTPUT_NORM=1`) on the CPU executor: in a bf16 model whose vocabulary projection
//! keeps its own norm launch (wider than `NORM_PROLOGUE_MAX_FEATURES`), every decode program's
//! last down projection also writes the normed hidden state and its sums of squares per 8
//! features (`ir::OutNorm`), the norm launch leaves, and the vocabulary GEMV (with the argmax key
//! in the one-row loop) scales its sums by the row's inverse RMS from those sums. Its logits stay
//! within rounding of the unfused plan's, its device loops give one-step decode's tokens bit for
//! bit, and f16 / f32 plans and prefill are left alone. Its own test binary: the knob is read once
//! per process.

mod common_cpu;

use common_cpu::loops::{loop_plan, looped, one_step};
use common_cpu::{normalized_error, Shape};
use kiln::ir::{DType, Phase, RopeScaling, RopeStyle};
use kiln::model::SrcDType;
use kiln::plan::Kernel;
use kiln::runtime::cpu::CpuExecutor;
use kiln::synth::MemWeights;

/// (out-norm producers, stats linears, stats linears with a key, rms_norm launches) of a program.
fn census(p: &kiln::plan::ProgramPlan) -> (usize, usize, usize, usize) {
    let count = |f: &dyn Fn(&Kernel) -> bool| p.launches.iter().filter(|l| f(&l.kernel)).count();
    (
        count(&|k| matches!(k, Kernel::FusedLinear { out_norm: true, .. })),
        count(&|k| matches!(k, Kernel::Linear { stats: Some(_), .. })),
        count(&|k| matches!(k, Kernel::Linear { stats: Some(_), argmax: true, .. })),
        count(&|k| matches!(k, Kernel::RmsNorm { .. })),
    )
}

#[test]
fn the_down_projection_carries_the_output_norm() {
    std::env::set_var("KILN_FUSE_OUTPUT_NORM", "1");
    let cfg = Shape {
        vocab: kiln::lower::fuse::NORM_PROLOGUE_MAX_FEATURES + 1000,
        hidden: 64,
        ffn: 96,
        layers: 2,
        heads: 4,
        kv_heads: 2,
        head_dim: 16,
        rotary_dim: 16,
        style: RopeStyle::HalfSplit,
        scaling: RopeScaling::None,
        tied: false,
        qkv_bias: false,
        qk_norm: false,
    }
    .build();
    let fused = loop_plan(&cfg, DType::BF16, true);
    for p in &fused.programs {
        let (producers, stats, keyed, norms) = census(p);
        match p.phase {
            // Prefill keeps the final norm (after the gather of the logit rows) as a launch.
            Phase::Prefill => assert!((producers, stats) == (0, 0) && norms > 0, "{}", p.label()),
            // The one-row loop's vocabulary GEMV also folds the argmax key (rewrite 9).
            // Once per step (a device loop's body in `loop_copies` copies).
            _ => {
                let c = if p.phase == Phase::DecodeLoop { p.loop_copies() } else { 1 };
                let want_keyed = (p.phase == Phase::DecodeLoop && p.bucket == 1) as usize;
                assert_eq!((producers, stats, keyed, norms), (c, c, c * want_keyed, 0), "{}", p.label());
            }
        }
    }
    // The plan file keeps it (and the checker, run on every load, accepts it).
    let bytes = kiln::plan::file::to_bytes(&fused).unwrap();
    assert_eq!(kiln::plan::file::from_bytes(&bytes, "the test plan").unwrap(), fused);
    let dump = kiln::plan::dump::dump(&fused);
    assert!(dump.contains("out_norm=true") && dump.contains("stats_eps="), "the dump names both ends");
    // The kernels the GPU would call (tests/kernels_compile.rs proves kernels/ defines them).
    let symbols = kiln::runtime::cuda::abi::symbols(&fused);
    // (The vocabulary GEMV in its default or dense `_o3` variant, as the grid asks.)
    for s in ["kiln_fused_linear_outnorm_bf16_bf16", "kiln_linear_argmax_stats_bf16_f32", "kiln_linear_stats_bf16_f32"] {
        assert!(symbols.iter().any(|x| x.starts_with(s)), "{s} not among {symbols:?}");
    }

    // Within rounding of the unfused plan: the norm after the dot product, as rewrite 1's.
    let plain = loop_plan(&cfg, DType::BF16, false);
    let w = MemWeights::random(&cfg, 7, SrcDType::BF16);
    let (mut a, mut b) = (CpuExecutor::new(plain.clone(), &w).unwrap(), CpuExecutor::new(fused.clone(), &w).unwrap());
    let mut worst = 0.0f64;
    common_cpu::prefill_then_decode((&plain, &mut a), (&fused, &mut b), 8, 5, |what, la, lb| {
        if what == "prefill" {
            assert_eq!(la, lb, "prefill keeps its norm launch");
        } else {
            let err = normalized_error(&la, &lb);
            assert!(err <= 2e-2, "{what}: normalized error {err:.3e}");
            worst = worst.max(err);
        }
    });
    eprintln!("bf16 decode normalized error against unfused: {worst:.3e}");
    assert!(worst > 0.0, "the norm after the dot product rounds differently from the unfused ops");

    // Device loops (the one-row loop's greedy token from the key) == one-step decode, bit for bit.
    for first in [vec![3], vec![3, 17]] {
        for temperature in [0.0, 0.9] {
            let reference = one_step(&fused, &w, &first, 0, 10, temperature);
            let (ring, ctl) = looped(&fused, &w, &first, 0, 10, &[], temperature);
            assert_eq!((ctl[1], ctl[2]), (10, 1), "loop finished after its budget");
            assert_eq!(ring, reference, "rows {} T {temperature}", first.len());
        }
    }

    // Only bf16 takes it (its kernels' dtype); f16 and f32 keep the norm launch.
    for dtype in [DType::F16, DType::F32] {
        let p = loop_plan(&cfg, dtype, true);
        for prog in &p.programs {
            let (producers, stats, _, _) = census(prog);
            assert_eq!((producers, stats), (0, 0), "{dtype:?} {}", prog.label());
        }
    }
}
