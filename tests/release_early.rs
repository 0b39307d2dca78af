//! The plan knob `KILN_RELEASE_EARLY` (src/plan/planner.rs `plan_release_early`): a decode program's token
//! embedding (`gather`) and output norm (`rms_norm`) let their dependents launch before they wait, calling
//! `kiln_gather_release_*` / `kiln_rms_norm_release_*`, only where that costs no early read but their own
//! dependents'. Its own test binary: the knob is read once per process, here before any plan.

use kiln::ir::{DType, Phase};
use kiln::model::config::ModelConfig;
use kiln::plan::{build_plan, Kernel, Plan, PlanOptions};
use kiln::runtime::cuda::abi;

fn plan(shape: &str) -> Plan {
    std::env::set_var("KILN_RELEASE_EARLY", "gather,norm");
    let cfg = ModelConfig::preset(shape).unwrap();
    let opts = PlanOptions {
        decode_buckets: vec![1, 2],
        prefill_buckets: vec![16],
        max_context: 256,
        dtype: DType::BF16,
        memory_budget: None,
        burst: 64,
        fuse: true,
    };
    build_plan(&cfg, &opts).unwrap() // the plan checker runs in build_plan (rule 9: early reads; 11: alike copies)
}

#[test]
fn the_qwen_embedding_and_output_norm_release_first_and_layer_0_reads_after_its_wait() {
    let plan = plan("qwen2.5-0.5b");
    let mut seen = Vec::new();
    for p in &plan.programs {
        let (decode, looped) = (matches!(p.phase, Phase::Decode | Phase::DecodeLoop), p.phase == Phase::DecodeLoop);
        // One row: the QKV-attention (layer 0's, after the gather, and a barrier for the later layers' early
        // reads). Two rows: QKV-RoPE (a GEMV, which releases first) and the cluster attention.
        let fused = p.launches.iter().any(|l| matches!(l.kernel, Kernel::QkvAttention { .. }));
        for (i, l) in p.launches.iter().enumerate() {
            let symbol = abi::launch_symbol(l);
            match l.kernel {
                Kernel::Gather { release, .. } => {
                    // In a device loop, the second copy's gather stands between the first copy's
                    // `sample_advance` (which writes the position) and the attention's early reads.
                    let want = decode && (!looped || fused);
                    assert_eq!(release, want, "{}: {}", p.label(), l.name);
                    assert_eq!(symbol, if want { "kiln_gather_release_bf16" } else { "kiln_gather_bf16" });
                    if release {
                        seen.push(format!("{} gather", p.label()));
                        // Layer 0's QKV-attention reads its position after its wait in a device loop (in both
                        // copies alike: the second's has no barrier but the released gather); in one step it
                        // reads early (no launch before it writes the position).
                        let next = &p.launches[i + 1];
                        match next.kernel {
                            Kernel::QkvAttention { early, .. } | Kernel::QkvRope { early, .. } => {
                                assert_eq!(early, !looped, "{}: {}", p.label(), next.name)
                            }
                            _ => panic!("{}: {:?}", next.name, next.kernel),
                        }
                    }
                }
                Kernel::RmsNorm { release, .. } => {
                    assert_eq!(release, decode, "{}: {}", p.label(), l.name);
                    assert_eq!(symbol, if decode { "kiln_rms_norm_release_bf16" } else { "kiln_rms_norm_bf16" });
                    if release {
                        seen.push(format!("{} norm", p.label()));
                    }
                }
                _ => {}
            }
        }
        // Every later layer's QKV-attention still reads early, and every cluster attention.
        let layers = 24;
        let early: Vec<bool> = p
            .launches
            .iter()
            .filter_map(|l| match l.kernel {
                Kernel::QkvAttention { early, .. } | Kernel::AttentionCluster { early, .. } => Some(early),
                _ => None,
            })
            .collect();
        if decode {
            assert_eq!(early.len() % layers, 0, "{}", p.label());
            for (j, e) in early.iter().enumerate() {
                assert_eq!(*e, !(fused && looped && j % layers == 0), "{}: attention {j}", p.label());
            }
        }
    }
    // Buckets 1 and 2: a one-step program and a device loop of two copies each.
    seen.sort();
    let want = [
        "decode.b1 gather",
        "decode.b1 norm",
        "decode.b2 gather",
        "decode.b2 norm",
        "loop.b1 gather",
        "loop.b1 gather",
        "loop.b1 norm",
        "loop.b1 norm",
        "loop.b2 norm",
        "loop.b2 norm",
    ];
    assert_eq!(seen, want);
}

#[test]
fn the_llama_embedding_keeps_its_barrier_and_its_output_norm_releases_first() {
    // The 1B's attention has no kernel that waits before it releases after layer 0's QKV-RoPE (a GEMV,
    // which releases first): releasing the second copy's gather would cost every layer's early reads.
    let plan = plan("llama3.2-1b");
    for p in &plan.programs {
        let decode = matches!(p.phase, Phase::Decode | Phase::DecodeLoop);
        for l in &p.launches {
            match l.kernel {
                Kernel::Gather { release, .. } => assert_eq!(release, p.phase == Phase::Decode, "{}: {}", p.label(), l.name),
                Kernel::RmsNorm { release, .. } => assert_eq!(release, decode, "{}: {}", p.label(), l.name),
                Kernel::AttentionCluster { early, .. } => assert!(early, "{}: {}", p.label(), l.name),
                _ => {}
            }
        }
    }
}
