//! The plan-time knob `KILN_ATTN_CLUSTER_CHUNK=2` (`planner::attention_cluster`): decode attention's
//! clusters take two query heads each where they fit in one wave (the default takes one), and the
//! CPU reference still gives stories260K's known greedy output and decode logits equal to an
//! unsplit prefill step's. Its own test binary: the knob is read once per process.

mod common_cpu;

use kiln::plan::Kernel;

const KNOWN: &str = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.";

#[test]
fn a_forced_chunk_of_two_heads_plans_and_keeps_the_known_greedy_output() {
    std::env::set_var("KILN_ATTN_CLUSTER_CHUNK", "2");
    let (m, plan, clusters) = common_cpu::stories260k_cluster_plan();
    assert_eq!(m.config.n_heads / m.config.n_kv_heads, 2, "stories260K's query groups are of two heads");
    for (label, rows, chunk, grid) in clusters {
        assert_eq!(chunk, 2, "{label}");
        assert_eq!(grid, [rows * m.config.n_kv_heads as u32, 8, 1], "{label}: one cluster per (row, kv head)");
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
