//! Decode attention in one launch (`Kernel::AttentionCluster`, planned by default where its clusters fit in one wave)
//! on the CPU executor: stories260K's known greedy output, as the split + merge plans give it
//! (tests/stories.rs), and the last-token logits of a decode step against an unsplit prefill
//! step (as tests/attention_split.rs for split + merge). Its own test binary: the knob is read
//! once per process.

mod common_cpu;

use kiln::plan::Kernel;

const KNOWN: &str = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball. She wanted to play with it, but it was too high.\nLily's mom said, \"Lily, let's go to the park.\" Lily was sad and didn't know what to do.";

#[test]
fn cluster_attention_plans_one_launch_and_keeps_the_known_greedy_output() {
    std::env::set_var("KILN_ATTN_CLUSTER", "1");
    let (m, plan, clusters) = common_cpu::stories260k_cluster_plan();
    let (heads, kv_heads) = (m.config.n_heads as u32, m.config.n_kv_heads as u32);
    for (_, rows, chunk_heads, grid) in clusters {
        assert_eq!(grid, [rows * kv_heads * (heads / kv_heads).div_ceil(chunk_heads), 8, 1]);
        let wave = kiln::plan::planner::ATTENTION_CLUSTER_WAVE.iter().find(|w| w.0 == chunk_heads).unwrap().1;
        assert!(grid[0] <= wave, "{} clusters of chunk {chunk_heads} in one wave of {wave}", grid[0]);
    }
    let text = common_cpu::greedy_text(&m, plan);
    assert!(text.starts_with(KNOWN), "got:\n{text}");
}

#[test]
fn cluster_decode_attention_matches_unsplit_prefill() {
    std::env::set_var("KILN_ATTN_CLUSTER", "1");
    common_cpu::decode_attention_matches_unsplit_prefill(|k| match *k {
        Kernel::AttentionCluster { split_len, .. } => Some((kiln::plan::ATTENTION_CLUSTER_SPLITS, split_len)),
        _ => None,
    });
}
