//! The plan-time knob `KILN_ATTN_CLUSTER_CHUNK=2` (`planner::attention_cluster`): decode attention's
//! clusters take two query heads each where they fit in one wave (the default takes one), and the
//! CPU reference still gives stories260K's known greedy output and decode logits equal to an
//! unsplit prefill step's. Its own test binary: the knob is read once per process.

mod common_cpu;

use kiln::ir::{DType, Phase};
use kiln::plan::{build_plan, Kernel, PlanOptions};
use std::path::PathBuf;

const KNOWN: &str = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.";

#[test]
fn a_forced_chunk_of_two_heads_plans_and_keeps_the_known_greedy_output() {
    std::env::set_var("KILN_ATTN_CLUSTER_CHUNK", "2");
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/stories260K");
    let m = kiln::model::open(&dir.join("stories260K.gguf"), None).unwrap();
    assert_eq!(m.config.n_heads / m.config.n_kv_heads, 2, "stories260K's query groups are of two heads");
    let options = PlanOptions {
        decode_buckets: vec![1, 4],
        prefill_buckets: vec![16],
        max_context: 512,
        dtype: DType::F32,
        memory_budget: None,
        burst: 0,
        fuse: false,
    };
    let plan = build_plan(&m.config, &options).unwrap();
    for p in plan.programs.iter().filter(|p| p.phase == Phase::Decode) {
        let chunks: Vec<(u32, [u32; 3])> = p
            .launches
            .iter()
            .filter_map(|l| match l.kernel {
                Kernel::AttentionCluster { chunk_heads, .. } => Some((chunk_heads, l.grid)),
                _ => None,
            })
            .collect();
        assert_eq!(chunks.len(), m.config.n_layers, "{}", p.label());
        let rows = p.bucket as u32;
        for (chunk, grid) in chunks {
            assert_eq!(chunk, 2, "{}", p.label());
            assert_eq!(grid, [rows * m.config.n_kv_heads as u32, 8, 1], "{}: one cluster per (row, kv head)", p.label());
        }
    }
    let text = common_cpu::greedy_text(&m, plan);
    assert!(text.starts_with(KNOWN), "got:\n{text}");
}

#[test]
fn a_forced_chunk_of_two_heads_matches_unsplit_prefill() {
    std::env::set_var("KILN_ATTN_CLUSTER_CHUNK", "2");
    common_cpu::decode_attention_matches_unsplit_prefill(|k| match *k {
        Kernel::AttentionCluster { split_len, chunk_heads: 2, .. } => Some((kiln::plan::ATTENTION_CLUSTER_SPLITS, split_len)),
        _ => None,
    });
}
