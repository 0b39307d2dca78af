//! Decode attention split over the KV length (attention_split + attention_merge launches,
//! with a planned workspace) computes the same attention as the unsplit prefill kernel.
//!
//! Proves, on the CPU executor: the last token's logits through `decode.b2` (split) equal the
//! same position's logits through one `prefill` step (unsplit) within f32 rounding, at lengths
//! that land before, on and after split boundaries; and that the plan really splits.

mod common_cpu;

use common_cpu::Shape;
use kiln::ir::{DType, Phase, RopeScaling, RopeStyle};
use kiln::lower::names;
use kiln::model::SrcDType;
use kiln::plan::{build_plan, Kernel, PlanOptions};
use kiln::runtime::cpu::CpuExecutor;
use kiln::runtime::{Executor, StepBlock};
use kiln::synth::MemWeights;

fn logits(exec: &mut CpuExecutor, rows: usize, vocab: usize) -> Vec<f32> {
    let b = exec.read_tensor(names::LOGITS, rows * vocab * 4).unwrap();
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

#[test]
fn split_decode_attention_matches_unsplit_prefill() {
    let cfg = Shape {
        vocab: 64,
        hidden: 32,
        ffn: 48,
        layers: 2,
        heads: 4,
        kv_heads: 2,
        head_dim: 8,
        rotary_dim: 8,
        style: RopeStyle::HalfSplit,
        scaling: RopeScaling::None,
        tied: true,
        qkv_bias: false,
        qk_norm: false,
    }
    .build();
    let cfg = kiln::model::ModelConfig { max_position_embeddings: 512, ..cfg };
    let max_context = 512;
    let opts = PlanOptions {
        decode_buckets: vec![1, 2],
        prefill_buckets: vec![512],
        max_context,
        dtype: DType::F32,
        memory_budget: None,
        burst: 0,
        fuse: false,
    };
    let plan = build_plan(&cfg, &opts).unwrap();
    let decode = plan.program(Phase::Decode, 2).unwrap();
    let split_len = plan.programs[decode]
        .launches
        .iter()
        .find_map(|l| match l.kernel {
            Kernel::AttentionSplit { splits, split_len, .. } => Some((splits, split_len)),
            _ => None,
        })
        .expect("decode attention is split");
    assert!(split_len.0 > 1, "{split_len:?}");
    let split_len = split_len.1 as usize;
    let prefill = plan.program(Phase::Prefill, 512).unwrap();
    let weights = MemWeights::random(&cfg, 7, SrcDType::F32);
    let mut exec = CpuExecutor::new(plan.clone(), &weights).unwrap();
    let tokens: Vec<i32> = (0..max_context as i32).map(|i| (i * 7 + 3) % cfg.vocab_size as i32).collect();
    let v = cfg.vocab_size;

    // Short lengths take live splits shorter than the planned split_len (plan::live_split_len).
    for n in [1, 20, 33, 40, split_len - 1, split_len, split_len + 1, 2 * split_len + 5, max_context] {
        // Reference: one prefill step over the first n tokens (sequence 0), logits of row n-1.
        let mut step = StepBlock::new(&plan);
        let mut ids = vec![0i32; 512];
        let mut pos = vec![-1i32; 512];
        for i in 0..n {
            ids[i] = tokens[i];
            pos[i] = i as i32;
        }
        step.set_i32(&plan, names::TOKEN_IDS, &ids).unwrap();
        step.set_i32(&plan, names::POSITIONS, &pos).unwrap();
        step.set_i32(&plan, names::CACHE_BASE, &[0; 512]).unwrap();
        step.set_i32(&plan, names::LOGIT_ROWS, &[n as i32 - 1]).unwrap();
        exec.run(prefill, &step).unwrap();
        let reference = logits(&mut exec, 1, v);
        // The same cache again in sequence 1 (rows from max_context), all but the last token, then
        // the last token through the split decode program as row 1 (row 0 is padding).
        let mut step = StepBlock::new(&plan);
        for i in 0..n - 1 {
            ids[i] = tokens[i];
            pos[i] = i as i32;
        }
        ids[n - 1] = 0;
        pos[n - 1] = -1;
        if n > 1 {
            step.set_i32(&plan, names::TOKEN_IDS, &ids).unwrap();
            step.set_i32(&plan, names::POSITIONS, &pos).unwrap();
            step.set_i32(&plan, names::CACHE_BASE, &[max_context as i32; 512]).unwrap();
            step.set_i32(&plan, names::LOGIT_ROWS, &[0]).unwrap();
            exec.run(prefill, &step).unwrap();
        }
        let mut step = StepBlock::new(&plan);
        step.set_i32(&plan, names::TOKEN_IDS, &[0, tokens[n - 1]]).unwrap();
        step.set_i32(&plan, names::POSITIONS, &[-1, n as i32 - 1]).unwrap();
        step.set_i32(&plan, names::CACHE_BASE, &[0, max_context as i32]).unwrap();
        exec.run(decode, &step).unwrap();
        let got = logits(&mut exec, 2, v);
        let worst = reference.iter().zip(&got[v..]).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        let scale = reference.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        println!("n={n}: split decode vs prefill max |diff| {worst:.3e} (max |logit| {scale:.3})");
        assert!(worst <= 1e-5 * scale.max(1.0), "n={n}: {worst}");
        assert!(got[..v].iter().all(|&x| x.is_finite()), "padding row produced non-finite logits");
    }
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
