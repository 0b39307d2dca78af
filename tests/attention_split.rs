//! Decode attention split over the KV length (attention_split + attention_merge launches,
//! with a planned workspace) computes the same attention as the unsplit prefill kernel.
//!
//! Proves, on the CPU executor: the last token's logits through `decode.b2` (split) equal the
//! same position's logits through one `prefill` step (unsplit) within f32 rounding, at lengths
//! that land before, on and after split boundaries; and that the plan really splits.

mod common_cpu;

use kiln::plan::Kernel;

#[test]
fn split_decode_attention_matches_unsplit_prefill() {
    // Split + merge (not the one-launch cluster attention the planner picks where it fits in one
    // wave: tests/attention_cluster.rs); the knob is read once per process, this binary's only plan.
    std::env::set_var("KILN_ATTN_CLUSTER", "0");
    common_cpu::decode_attention_matches_unsplit_prefill(|k| match *k {
        Kernel::AttentionSplit { splits, split_len, .. } => Some((splits, split_len)),
        _ => None,
    });
}

#[test]
fn live_split_len_covers_every_key_within_the_planned_splits() {
    use kiln::plan::{live_split_len, SPLIT_LEN_QUANTUM};
    for (splits, split_len, min) in [(34u32, 128u32, 32u32), (8, 512, 16), (8, 64, 32), (3, 64, 64), (1, 4096, 32), (5, 64, 1000)] {
        for p in 0..(splits * split_len) as i32 {
            let len = live_split_len(p, splits, split_len, min);
            assert!(len <= split_len && len >= min.min(split_len), "p={p}: {len}");
            assert!(splits as usize * len as usize > p as usize, "p={p}: {splits} x {len} misses key {p}");
            assert!(len == split_len || len.is_multiple_of(SPLIT_LEN_QUANTUM), "p={p}: {len}");
            if min >= split_len {
                assert_eq!(len, split_len, "min_split_len >= split_len keeps the planned length");
            }
        }
    }
    // Planned for max context 4352 (34 x 128): at context 128 five splits of 32, at 4096 the
    // planned 128.
    assert_eq!(live_split_len(129, 34, 128, 32), 32);
    assert_eq!(live_split_len(4095, 34, 128, 32), 128);
}
