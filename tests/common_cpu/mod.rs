//! Helpers shared by `tests/cpu_numerics.rs`, `tests/planner_invariants.rs` and the decode attention tests: a seeded
//! generator (no `rand` crate, so every run sees the same numbers on every machine) and a
//! compact way to spell a small model config.
#![allow(dead_code)]

use kiln::ir::{RopeScaling, RopeSpec, RopeStyle};
use kiln::model::{Arch, ModelConfig};

/// SplitMix64: tiny, seeded, good enough to draw test weights and configs.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in `[-1, 1)`.
    pub fn signed(&mut self) -> f32 {
        (2.0 * self.unit() - 1.0) as f32
    }
    /// Uniform integer in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next_u64() % (hi - lo + 1) as u64) as usize
    }
    pub fn coin(&mut self) -> bool {
        self.next_u64() & 1 == 1
    }
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.range(0, items.len() - 1)]
    }
}

/// Little-endian f32s (logits read back from an executor).
pub fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// max |a - b| over max |a| (both f32 logits).
pub fn normalized_error(a: &[u8], b: &[u8]) -> f64 {
    let (a, b) = (f32s(a), f32s(b));
    let scale = a.iter().fold(0.0f64, |m, &v| m.max((v as f64).abs()));
    let diff = a.iter().zip(&b).fold(0.0f64, |m, (&x, &y)| m.max((x as f64 - y as f64).abs()));
    diff / scale
}

/// The shape of a small test model; `build` fills in the rest consistently.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub vocab: usize,
    pub hidden: usize,
    pub ffn: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub rotary_dim: usize,
    pub style: RopeStyle,
    pub scaling: RopeScaling,
    pub tied: bool,
    pub qkv_bias: bool,
    pub qk_norm: bool,
}

impl Shape {
    pub fn build(self) -> ModelConfig {
        let arch = if self.qk_norm {
            Arch::Qwen3
        } else if self.qkv_bias {
            Arch::Qwen2
        } else {
            Arch::Llama
        };
        let cfg = ModelConfig {
            arch,
            vocab_size: self.vocab,
            hidden_size: self.hidden,
            intermediate_size: self.ffn,
            n_layers: self.layers,
            n_heads: self.heads,
            n_kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            rms_norm_eps: 1e-5,
            rope: RopeSpec { style: self.style, theta: 10000.0, rotary_dim: self.rotary_dim as u32, scaling: self.scaling },
            tie_word_embeddings: self.tied,
            qkv_bias: self.qkv_bias,
            qk_norm: self.qk_norm,
            max_position_embeddings: 256,
            bos_token_id: Some(1),
            eos_token_ids: vec![2],
        };
        cfg.validate().expect("test config is valid");
        cfg
    }
}

/// Llama 3.1-style scaling tuned so that, with theta 10000 and head dims of 8..16, some pairs
/// keep their frequency (wavelength < 256), some are smoothed, and some are divided by 8
/// (wavelength > 1024).
pub fn llama3_scaling() -> RopeScaling {
    RopeScaling::Llama3 { factor: 8.0, low_freq_factor: 1.0, high_freq_factor: 4.0, original_max_position: 1024 }
}

/// Decode attention through `decode.b2` (row 1; row 0 is padding) gives the same last-token
/// logits as one unsplit `prefill` step over the same tokens, within f32 rounding, at lengths
/// before, on and after split boundaries; `attention` picks the decode attention launch that the
/// plan must hold and returns its longest split. Shared by `tests/attention_split.rs` (split +
/// merge) and `tests/attention_cluster.rs` (one launch).
pub fn decode_attention_matches_unsplit_prefill(attention: fn(&kiln::plan::Kernel) -> Option<(u32, u32)>) {
    use kiln::ir::{DType, Phase};
    use kiln::lower::names;
    use kiln::model::SrcDType;
    use kiln::plan::{build_plan, PlanOptions};
    use kiln::runtime::cpu::CpuExecutor;
    use kiln::runtime::{Executor, StepBlock};
    use kiln::synth::MemWeights;
    let logits = |exec: &mut CpuExecutor, rows: usize, vocab: usize| -> Vec<f32> {
        let b = exec.read_tensor(names::LOGITS, rows * vocab * 4).unwrap();
        f32s(&b)
    };
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
    let split_len = plan.programs[decode].launches.iter().find_map(|l| attention(&l.kernel)).expect("the decode attention launch");
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
        println!("n={n}: decode vs prefill max |diff| {worst:.3e} (max |logit| {scale:.3})");
        assert!(worst <= 1e-5 * scale.max(1.0), "n={n}: {worst}");
        assert!(got[..v].iter().all(|&x| x.is_finite()), "padding row produced non-finite logits");
    }
}

/// One decode `AttentionCluster` launch: (program label, rows, chunk_heads, grid).
pub type ClusterLaunch = (String, u32, u32, [u32; 3]);

/// The bundled stories260K planned with decode buckets 1 and 4 (f32, context 512), with every
/// decode program's `AttentionCluster` launches, one per layer asserted
/// (`tests/attention_cluster.rs`, `tests/attention_cluster_chunk.rs`).
pub fn stories260k_cluster_plan() -> (kiln::model::LoadedModel, kiln::plan::Plan, Vec<ClusterLaunch>) {
    use kiln::ir::{DType, Phase};
    use kiln::plan::{build_plan, Kernel, PlanOptions};
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/stories260K");
    let m = kiln::model::open(&dir.join("stories260K.gguf"), None).unwrap();
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
    let mut clusters = Vec::new();
    for p in plan.programs.iter().filter(|p| p.phase == Phase::Decode) {
        let kinds = |f: fn(&Kernel) -> bool| p.launches.iter().filter(|l| f(&l.kernel)).count();
        assert_eq!(kinds(|k| matches!(k, Kernel::AttentionCluster { .. })), m.config.n_layers, "{}", p.label());
        assert_eq!(kinds(|k| matches!(k, Kernel::AttentionSplit { .. } | Kernel::AttentionMerge { .. })), 0);
        for l in &p.launches {
            if let Kernel::AttentionCluster { rows, chunk_heads, .. } = l.kernel {
                clusters.push((p.label(), rows, chunk_heads, l.grid));
            }
        }
    }
    (m, plan, clusters)
}

/// Greedy text from BOS, 200 tokens at most, stopping at BOS/EOS (stories260K's known output is
/// given this way).
pub fn greedy_text(m: &kiln::model::LoadedModel, plan: kiln::plan::Plan) -> String {
    use kiln::runtime::cpu::CpuExecutor;
    use kiln::runtime::session::{generate, Sampling};
    let tok = m.tokenizer.as_deref().expect("tokenizer");
    let mut exec = CpuExecutor::new(plan, m.weights.as_ref()).expect("executor");
    let bos = tok.bos().expect("bos");
    let mut stops = tok.eos();
    stops.push(bos);
    let g = generate(&mut exec, &[bos], 200, Sampling::greedy(), &stops, |_| true).expect("generate");
    let mut prev = Some(bos);
    let mut bytes = Vec::new();
    for &t in &g.tokens {
        bytes.extend(tok.decode_piece(prev, t));
        prev = Some(t);
    }
    String::from_utf8(bytes).expect("utf-8")
}

/// The same steps on executors of two plans of one model (`tests/fusion.rs`, `tests/gemv_tiles.rs`):
/// a prefill of 6 tokens in bucket `prefill` (padding after them), then `steps` decode steps of two
/// sequences at batch 2 (KV bases 0 and 32: plans of max context 32); `check(what, logits a,
/// logits b)` after each.
pub fn prefill_then_decode(
    a: (&kiln::plan::Plan, &mut kiln::runtime::cpu::CpuExecutor),
    b: (&kiln::plan::Plan, &mut kiln::runtime::cpu::CpuExecutor),
    prefill: usize,
    steps: i32,
    mut check: impl FnMut(&str, Vec<u8>, Vec<u8>),
) {
    use kiln::ir::Phase;
    use kiln::lower::names;
    use kiln::runtime::{Executor, StepBlock};
    let ((pa, ea), (pb, eb)) = (a, b);
    let v = pa.config.vocab_size;
    let run = |ea: &mut kiln::runtime::cpu::CpuExecutor, eb: &mut kiln::runtime::cpu::CpuExecutor, program: usize, step: &StepBlock| {
        ea.run(program, step).unwrap();
        let mut sb = StepBlock::new(pb);
        sb.bytes.copy_from_slice(&step.bytes);
        eb.run(program, &sb).unwrap();
    };
    let mut step = StepBlock::new(pa);
    let ids: Vec<i32> = (0..prefill as i32).map(|i| if i < 6 { 1 + 4 * i } else { 0 }).collect();
    let pos: Vec<i32> = (0..prefill as i32).map(|i| if i < 6 { i } else { -1 }).collect();
    step.set_i32(pa, names::TOKEN_IDS, &ids).unwrap();
    step.set_i32(pa, names::POSITIONS, &pos).unwrap();
    step.set_i32(pa, names::CACHE_BASE, &vec![0; prefill]).unwrap();
    step.set_i32(pa, names::LOGIT_ROWS, &[5]).unwrap();
    let p = pa.program(Phase::Prefill, prefill).unwrap();
    assert_eq!(pb.program(Phase::Prefill, prefill), Some(p));
    run(ea, eb, p, &step);
    check("prefill", ea.read_tensor(names::LOGITS, 4 * v).unwrap(), eb.read_tensor(names::LOGITS, 4 * v).unwrap());
    let d = pa.program(Phase::Decode, 2).unwrap();
    for i in 0..steps {
        let mut s = StepBlock::new(pa);
        s.set_i32(pa, names::TOKEN_IDS, &[3 + i, 7 + i]).unwrap();
        s.set_i32(pa, names::POSITIONS, &[6 + i, i]).unwrap();
        s.set_i32(pa, names::CACHE_BASE, &[0, 32]).unwrap();
        run(ea, eb, d, &s);
        check(&format!("decode step {i}"), ea.read_tensor(names::LOGITS, 8 * v).unwrap(), eb.read_tensor(names::LOGITS, 8 * v).unwrap());
    }
}

/// One-step decode and device loops of a plan on the CPU executor (`tests/device_loop.rs`,
/// `tests/output_norm.rs`): sequences at KV bases `r * MAX_CONTEXT`, plans of that context.
pub mod loops {
    use kiln::ir::Phase;
    use kiln::lower::{names, MAX_STOP_IDS};
    use kiln::plan::Plan;
    use kiln::runtime::cpu::CpuExecutor;
    use kiln::runtime::{Executor, StepBlock};
    use kiln::synth::MemWeights;

    /// The context of the plans these helpers run (each sequence's KV rows).
    pub const MAX_CONTEXT: usize = 64;

    /// A plan these helpers run: decode buckets 1 and 2, prefill bucket 8, [`MAX_CONTEXT`],
    /// device loops of 16 tokens (`tests/output_norm.rs`, `tests/qkv_attention.rs`).
    pub fn loop_plan(cfg: &kiln::model::ModelConfig, dtype: kiln::ir::DType, fuse: bool) -> Plan {
        let opts = kiln::plan::PlanOptions {
            decode_buckets: vec![1, 2],
            prefill_buckets: vec![8],
            max_context: MAX_CONTEXT,
            dtype,
            memory_budget: None,
            burst: 16,
            fuse,
        };
        kiln::plan::build_plan(cfg, &opts).unwrap()
    }

    pub fn ints(b: &[u8]) -> Vec<i32> {
        b.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
    }

    /// Step block for `rows` sequences at `pos`, feeding `ids`, sampling with `temperature`.
    pub fn step_for(plan: &Plan, ids: &[i32], pos: &[i32], temperature: f32) -> StepBlock {
        let rows = ids.len();
        let mut s = StepBlock::new(plan);
        s.set_i32(plan, names::TOKEN_IDS, ids).unwrap();
        s.set_i32(plan, names::POSITIONS, pos).unwrap();
        let bases: Vec<i32> = (0..rows as i32).map(|r| r * MAX_CONTEXT as i32).collect();
        s.set_i32(plan, names::CACHE_BASE, &bases).unwrap();
        s.set_f32(plan, names::TEMPERATURE, &vec![temperature; rows]).unwrap();
        s.set_i32(plan, names::TOP_K, &vec![0; rows]).unwrap();
        s.set_f32(plan, names::TOP_P, &vec![1.0; rows]).unwrap();
        s.set_u32(plan, names::SEED, &(0..rows as u32).map(|r| 5 + r).collect::<Vec<_>>()).unwrap();
        let counters: Vec<u32> = pos.iter().map(|&p| (p + 1) as u32).collect();
        s.set_u32(plan, names::COUNTER, &counters).unwrap();
        s
    }

    /// One-step decode: `steps` launches of decode.b{rows}, feeding back each sampled token.
    pub fn one_step(plan: &Plan, w: &MemWeights, first: &[i32], start: i32, steps: usize, temperature: f32) -> Vec<Vec<i32>> {
        let mut exec = CpuExecutor::new(plan.clone(), w).unwrap();
        let rows = first.len();
        let prog = plan.program(Phase::Decode, rows).unwrap();
        let mut ids = first.to_vec();
        let mut out = Vec::new();
        for i in 0..steps {
            let pos = vec![start + i as i32; rows];
            exec.run(prog, &step_for(plan, &ids, &pos, temperature)).unwrap();
            ids = ints(&exec.read_tensor(names::TOKENS, 4 * rows).unwrap());
            out.push(ids.clone());
        }
        out
    }

    /// The same through one run of loop.b{rows}; returns the ring's rows and the control words.
    pub fn looped(
        plan: &Plan,
        w: &MemWeights,
        first: &[i32],
        start: i32,
        budget: u32,
        stops: &[i32],
        temperature: f32,
    ) -> (Vec<Vec<i32>>, Vec<u32>) {
        let mut exec = CpuExecutor::new(plan.clone(), w).unwrap();
        let rows = first.len();
        let prog = plan.program(Phase::DecodeLoop, rows).unwrap();
        let mut s = step_for(plan, first, &vec![start; rows], temperature);
        let mut control = vec![budget, 0, 0, MAX_CONTEXT as u32];
        control.extend(std::iter::repeat_n(0, rows));
        s.set_u32(plan, names::LOOP_CONTROL, &control).unwrap();
        let mut stop_ids = vec![-1i32; MAX_STOP_IDS];
        stop_ids[..stops.len()].copy_from_slice(stops);
        s.set_i32(plan, names::LOOP_STOP_IDS, &stop_ids).unwrap();
        exec.run(prog, &s).unwrap();
        if let Some(key) = plan.tensor("argmax_key") {
            // Every step's sample_advance leaves the key zeroed for the next step's logits.
            let key = exec.read_tensor("argmax_key", key.bytes as usize).unwrap();
            assert!(key.iter().all(|&b| b == 0), "argmax key left at {key:?}");
        }
        let ring_bytes = plan.tensor(names::RING).unwrap().bytes as usize;
        let ring = ints(&exec.read_tensor(names::RING, ring_bytes).unwrap());
        let ctl_bytes = 4 * (4 + rows);
        let ctl: Vec<u32> = ints(&exec.read_tensor(names::LOOP_CONTROL, ctl_bytes).unwrap()).into_iter().map(|x| x as u32).collect();
        let produced = ctl[1] as usize;
        (ring[..produced * rows].chunks(rows).map(|c| c.to_vec()).collect(), ctl)
    }
}
