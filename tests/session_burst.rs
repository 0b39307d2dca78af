//! The generation loop's burst path (decode through the plan's device loop, `--burst N`) gives
//! exactly what one-step decode gives, on the CPU executor: the same tokens and the same stop
//! reason for greedy and seeded sampling, when the token budget is not a multiple of the burst,
//! at a stop token in the middle of a burst, at the end of the context, and when the caller
//! stops early. (On a GPU the same is proven by `kiln gate --checks 5`.)

use kiln::gate::random_config;
use kiln::ir::DType;
use kiln::model::{ModelConfig, SrcDType};
use kiln::plan::{build_plan, PlanOptions};
use kiln::runtime::cpu::CpuExecutor;
use kiln::runtime::session::{generate, Generated, Sampling, Stop};
use kiln::synth::MemWeights;

fn options(burst: usize, max_context: usize) -> PlanOptions {
    PlanOptions {
        decode_buckets: vec![1],
        prefill_buckets: vec![16],
        max_context,
        dtype: DType::F32,
        memory_budget: None,
        burst,
        fuse: false,
    }
}

struct Case<'a> {
    prompt: &'a [u32],
    max_tokens: usize,
    sampling: Sampling,
    stops: &'a [u32],
    max_context: usize,
    /// The callback refuses more tokens after this many.
    accept_at_most: usize,
}

fn run(cfg: &ModelConfig, weights: &MemWeights, burst: usize, c: &Case) -> Generated {
    let plan = build_plan(cfg, &options(burst, c.max_context)).unwrap();
    let mut exec = CpuExecutor::new(plan, weights).unwrap();
    let mut seen = 0usize;
    generate(&mut exec, c.prompt, c.max_tokens, c.sampling, c.stops, |_| {
        seen += 1;
        seen < c.accept_at_most
    })
    .unwrap()
}

/// One-step decode and bursts of several sizes agree on tokens and stop reason.
fn check(cfg: &ModelConfig, weights: &MemWeights, c: &Case, want_stop: Stop) -> Vec<u32> {
    let reference = run(cfg, weights, 0, c);
    assert_eq!(reference.stop, want_stop, "the case does not exercise what it says (tokens {:?})", reference.tokens);
    for burst in [1, 7, 16] {
        let g = run(cfg, weights, burst, c);
        assert_eq!(g.tokens, reference.tokens, "burst {burst}");
        assert_eq!(g.stop, reference.stop, "burst {burst}");
        assert!(g.decode_steps >= reference.tokens.len().saturating_sub(1), "burst {burst}: {} decode steps", g.decode_steps);
    }
    reference.tokens
}

fn model() -> (ModelConfig, MemWeights) {
    let cfg = random_config("qwen2").unwrap();
    let weights = MemWeights::random(&cfg, 3, SrcDType::F32);
    (cfg, weights)
}

const SEEDED: Sampling = Sampling { temperature: 0.9, top_k: 40, top_p: 0.95, seed: 17 };

#[test]
fn bursts_match_one_step_decode_greedy_and_seeded() {
    let (cfg, w) = model();
    let prompt = [1, 5, 9, 200, 31];
    for sampling in [Sampling::greedy(), SEEDED] {
        // 37 tokens: bursts of 16 end on a partial burst; no stop tokens.
        let c = Case { prompt: &prompt, max_tokens: 37, sampling, stops: &[], max_context: 128, accept_at_most: usize::MAX };
        let tokens = check(&cfg, &w, &c, Stop::MaxTokens);
        assert_eq!(tokens.len(), 37);
    }
}

#[test]
fn a_stop_token_in_the_middle_of_a_burst_ends_generation_there() {
    let (cfg, w) = model();
    let prompt = [1, 5, 9, 200, 31];
    let free = Case { prompt: &prompt, max_tokens: 40, sampling: SEEDED, stops: &[], max_context: 128, accept_at_most: usize::MAX };
    let tokens = run(&cfg, &w, 0, &free).tokens;
    // A token first sampled at index 11 (past the first bursts of 1 and 7, inside one of 16).
    let (at, &stop) = tokens.iter().enumerate().skip(9).find(|(i, t)| !tokens[..*i].contains(t)).expect("a fresh token");
    let c = Case { stops: &[stop], ..free };
    let got = check(&cfg, &w, &c, Stop::StopToken);
    assert_eq!(got, tokens[..at], "generation ends right before the stop token");
    // More stop tokens than the device loop has slots: the host still stops at each.
    let many: Vec<u32> = (1000..1010).chain([stop]).collect();
    check(&cfg, &w, &Case { stops: &many, ..free }, Stop::StopToken);
}

#[test]
fn the_context_end_and_an_early_callback_stop_bursts_as_they_stop_one_step() {
    let (cfg, w) = model();
    let prompt: Vec<u32> = (0..20).map(|i| (i * 7 + 3) % 384).collect();
    // Context of 32: 12 positions after the prompt, reached inside the second burst of 7.
    let c = Case { prompt: &prompt, max_tokens: 100, sampling: SEEDED, stops: &[], max_context: 32, accept_at_most: usize::MAX };
    let tokens = check(&cfg, &w, &c, Stop::ContextFull);
    assert_eq!(tokens.len(), 32 - 20 + 1);
    let c = Case { accept_at_most: 9, max_context: 128, ..c };
    let tokens = check(&cfg, &w, &c, Stop::Callback);
    assert_eq!(tokens.len(), 9);
}

#[test]
fn stories260k_greedy_text_is_the_same_in_bursts() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/stories260K");
    let m = kiln::model::open(&dir.join("stories260K.gguf"), None).unwrap();
    let tok = m.tokenizer.as_deref().unwrap();
    let bos = tok.bos().unwrap();
    let mut stops = tok.eos();
    stops.push(bos);
    let mut texts = Vec::new();
    for burst in [0, 64] {
        let plan = build_plan(&m.config, &options(burst, 512)).unwrap();
        let mut exec = CpuExecutor::new(plan, m.weights.as_ref()).unwrap();
        let g = generate(&mut exec, &[bos], 200, Sampling::greedy(), &stops, |_| true).unwrap();
        texts.push((g.tokens, g.stop));
    }
    assert_eq!(texts[0], texts[1]);
}

#[test]
fn gate_check_5_logic_runs_with_the_cpu_standing_in() {
    let args = kiln::gate::GateArgs {
        checks: vec![5],
        steps: 3,
        min_context: 64,
        synth_dir: std::env::temp_dir(),
        skip_hf: true,
        hf_shapes: vec![],
        hf_steps: 4,
        hf_prompt: 8,
        seed: 1,
        per_launch: false,
        stories: concat!(env!("CARGO_MANIFEST_DIR"), "/models/stories260K/stories260K.gguf").into(),
        python: "python3".into(),
        hf_script: "scripts/hf_compare.py".into(),
        cpu_stand_in: true,
    };
    kiln::gate::main(&args).unwrap();
}
