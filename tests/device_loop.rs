//! Device loops (`loop.b{B}` programs: decode + `advance`, repeated until the loop control
//! says stop) produce exactly the tokens of one-step-per-launch decode, on the CPU executor
//! (the reference the GPU's conditional-node loop is gated against).
//!
//! Proves: bit-identical tokens for greedy and seeded sampling at batch 1 and 2; the budget,
//! stop tokens and the context end stop the loop; the ring holds the tokens in order. Each on
//! unfused plans and on fused ones, whose one-row loop ends in one `sample_advance` launch
//! (`lower::fuse` rewrite 8) instead of `sample` -> `advance`.

mod common_cpu;

use common_cpu::Shape;
use kiln::ir::{DType, Phase, RopeScaling, RopeStyle};
use kiln::lower::{names, MAX_STOP_IDS};
use kiln::model::SrcDType;
use kiln::plan::{build_plan, Plan, PlanOptions};
use kiln::runtime::cpu::CpuExecutor;
use kiln::runtime::{Executor, StepBlock};
use kiln::synth::MemWeights;

const MAX_CONTEXT: usize = 64;

fn setup(burst: usize, fuse: bool) -> (Plan, MemWeights) {
    let cfg = Shape {
        vocab: 48,
        hidden: 16,
        ffn: 24,
        layers: 2,
        heads: 4,
        kv_heads: 2,
        head_dim: 4,
        rotary_dim: 4,
        style: RopeStyle::Interleaved,
        scaling: RopeScaling::None,
        tied: false,
        qkv_bias: true,
        qk_norm: false,
    }
    .build();
    let opts = PlanOptions {
        decode_buckets: vec![1, 2],
        prefill_buckets: vec![],
        max_context: MAX_CONTEXT,
        dtype: DType::F32,
        memory_budget: None,
        burst,
        fuse,
    };
    let plan = build_plan(&cfg, &opts).unwrap();
    // The fused plan's one-row loop ends in sample_advance; its two-row loop keeps both launches.
    let kernels = |rows: usize| -> Vec<&'static str> {
        plan.programs[plan.program(Phase::DecodeLoop, rows).unwrap()].launches.iter().map(|l| l.kernel.name()).collect()
    };
    assert_eq!(kernels(1).contains(&"sample_advance"), fuse, "{:?}", kernels(1));
    assert!(kernels(2).ends_with(&["sample", "advance"]), "{:?}", kernels(2));
    let weights = MemWeights::random(&cfg, 11, SrcDType::F32);
    (plan, weights)
}

fn ints(b: &[u8]) -> Vec<i32> {
    b.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// Step block for `rows` sequences at `pos`, feeding `ids`, sampling with `temperature`.
fn step_for(plan: &Plan, ids: &[i32], pos: &[i32], temperature: f32) -> StepBlock {
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
fn one_step(plan: &Plan, w: &MemWeights, first: &[i32], start: i32, steps: usize, temperature: f32) -> Vec<Vec<i32>> {
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
fn looped(
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
    let ring_bytes = plan.tensor(names::RING).unwrap().bytes as usize;
    let ring = ints(&exec.read_tensor(names::RING, ring_bytes).unwrap());
    let ctl_bytes = 4 * (4 + rows);
    let ctl: Vec<u32> = ints(&exec.read_tensor(names::LOOP_CONTROL, ctl_bytes).unwrap()).into_iter().map(|x| x as u32).collect();
    let produced = ctl[1] as usize;
    (ring[..produced * rows].chunks(rows).map(|c| c.to_vec()).collect(), ctl)
}

#[test]
fn loop_matches_one_step_decode() {
    for fuse in [false, true] {
        let (plan, w) = setup(16, fuse);
        for (first, temperature) in [(vec![3], 0.0), (vec![3], 0.9), (vec![3, 17], 0.0), (vec![3, 17], 1.1)] {
            let reference = one_step(&plan, &w, &first, 0, 12, temperature);
            let (ring, ctl) = looped(&plan, &w, &first, 0, 12, &[], temperature);
            assert_eq!(ctl[2], 1, "loop finished");
            assert_eq!(ring, reference, "fuse {fuse} rows {} temperature {temperature}", first.len());
        }
    }
}

#[test]
fn loop_stops_at_budget_ring_end_stop_token_and_context_end() {
    for fuse in [false, true] {
        stops_for(fuse);
    }
}

fn stops_for(fuse: bool) {
    let (plan, w) = setup(8, fuse);
    // Budget larger than the ring: stops when the ring is full.
    let (ring, ctl) = looped(&plan, &w, &[3], 0, 100, &[], 0.0);
    assert_eq!((ring.len(), ctl[1]), (8, 8));
    // A stop token: the loop ends right after producing it.
    let reference = one_step(&plan, &w, &[3], 0, 8, 0.0);
    let stop = reference[2][0];
    let first_hit = reference.iter().position(|r| r[0] == stop).unwrap();
    let (ring, _) = looped(&plan, &w, &[3], 0, 8, &[stop], 0.0);
    assert_eq!(ring.len(), first_hit + 1);
    assert_eq!(ring.last().unwrap()[0], stop);
    // Near the end of the context: positions never pass max_context.
    let (ring, _) = looped(&plan, &w, &[3], MAX_CONTEXT as i32 - 3, 8, &[], 0.0);
    assert_eq!(ring.len(), 3);
    // Budget 0 runs nothing.
    let (ring, ctl) = looped(&plan, &w, &[3], 0, 0, &[], 0.0);
    assert!(ring.is_empty() && ctl[1] == 0);
}

/// A step block whose loop control already says done runs nothing: no ring write, no position
/// or counter moved. The CPU loop checks the flag before each step; on the GPU the WHILE body
/// runs once and its `advance` returns at once on the flag (kernels/advance.cu, `kiln gate`
/// check 5).
#[test]
fn loop_with_done_preset_changes_nothing() {
    for fuse in [false, true] {
        done_preset_for(fuse);
    }
}

fn done_preset_for(fuse: bool) {
    let (plan, w) = setup(8, fuse);
    let mut exec = CpuExecutor::new(plan.clone(), &w).unwrap();
    let prog = plan.program(Phase::DecodeLoop, 1).unwrap();
    let mut s = step_for(&plan, &[3], &[5], 0.0);
    s.set_u32(&plan, names::LOOP_CONTROL, &[8, 0, 1, MAX_CONTEXT as u32, 0]).unwrap();
    s.set_i32(&plan, names::LOOP_STOP_IDS, &[-1i32; MAX_STOP_IDS]).unwrap();
    exec.run(prog, &s).unwrap();
    let ctl = ints(&exec.read_tensor(names::LOOP_CONTROL, 4 * 5).unwrap());
    assert_eq!(ctl, vec![8, 0, 1, MAX_CONTEXT as i32, 0]);
    assert_eq!(ints(&exec.read_tensor(names::POSITIONS, 4).unwrap()), vec![5]);
    assert_eq!(ints(&exec.read_tensor(names::TOKEN_IDS, 4).unwrap()), vec![3]);
}
