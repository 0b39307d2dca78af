//! Device loops (`loop.b{B}` programs: decode + `advance`, repeated until the loop control
//! says stop) produce exactly the tokens of one-step-per-launch decode, on the CPU executor
//! (the reference the GPU's conditional-node loop is gated against).
//!
//! Proves: bit-identical tokens for greedy and seeded sampling at batch 1 and 2; the budget,
//! stop tokens and the context end stop the loop; the ring holds the tokens in order. Each on
//! unfused plans and on fused ones, whose one-row loop ends in one `sample_advance` launch
//! (`lower::fuse` rewrite 8) instead of `sample` -> `advance`, and with the loop body planned
//! in 1, 2 and 3 copies per pass (`ProgramPlan::loop_copies`): budgets that are not a multiple
//! of the copies run the first copy alone, and the copies a pass still runs after a stop change
//! no token, no loop control and no KV row past a sequence's end. The fused one-row loop's greedy
//! tokens come from the argmax key its vocabulary projection folds the logits into (`lower::fuse`
//! rewrite 9), zeroed again by every step.

mod common_cpu;

use common_cpu::loops::{ints, looped, one_step, step_for, MAX_CONTEXT};
use common_cpu::Shape;
use kiln::ir::{DType, Phase, RopeScaling, RopeStyle};
use kiln::lower::{names, MAX_STOP_IDS};
use kiln::model::SrcDType;
use kiln::plan::{build_plan_unrolled, Kernel, Plan, PlanOptions};
use kiln::runtime::cpu::CpuExecutor;
use kiln::runtime::Executor;
use kiln::synth::MemWeights;

/// Copies of the loop body the tests plan (1: not unrolled).
const COPIES: [usize; 3] = [1, 2, 3];

fn setup(burst: usize, fuse: bool, copies: usize) -> (Plan, MemWeights) {
    setup_vocab(48, burst, fuse, copies)
}

/// `setup` with `vocab` tokens: over `NORM_PROLOGUE_MAX_FEATURES` the final norm stays a launch of
/// its own and the vocabulary projection a plain linear, which the fused one-row loop turns into
/// the argmax-key linear (rewrite 9; the real models' shape).
fn setup_vocab(vocab: usize, burst: usize, fuse: bool, copies: usize) -> (Plan, MemWeights) {
    let cfg = Shape {
        vocab,
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
    let plan = build_plan_unrolled(&cfg, &opts, copies).unwrap();
    // The fused plan's one-row loop ends in sample_advance; its two-row loop keeps both launches.
    let kernels = |rows: usize| -> Vec<&'static str> {
        plan.programs[plan.program(Phase::DecodeLoop, rows).unwrap()].launches.iter().map(|l| l.kernel.name()).collect()
    };
    assert_eq!(kernels(1).contains(&"sample_advance"), fuse, "{:?}", kernels(1));
    // ... whose greedy token comes from the argmax key the vocabulary projection folds its logits
    // into (rewrite 9): both launches of every copy carry the key.
    let one = &plan.programs[plan.program(Phase::DecodeLoop, 1).unwrap()];
    let keyed = one
        .launches
        .iter()
        .filter(|l| matches!(l.kernel, Kernel::Linear { argmax: true, .. } | Kernel::SampleAdvance { argmax: true, .. }))
        .count();
    let plain_logits = vocab > kiln::lower::fuse::NORM_PROLOGUE_MAX_FEATURES;
    assert_eq!(keyed, if fuse && plain_logits { 2 * copies } else { 0 }, "{:?}", kernels(1));
    assert!(kernels(2).ends_with(&["sample", "advance"]), "{:?}", kernels(2));
    for rows in [1, 2] {
        let p = &plan.programs[plan.program(Phase::DecodeLoop, rows).unwrap()];
        assert_eq!(p.loop_copies(), copies);
        let decode = &plan.programs[plan.program(Phase::Decode, rows).unwrap()];
        assert_eq!(p.launches.len() % copies, 0);
        // Every copy plans the same early reads as the first (each copy's gather is a barrier).
        let early: Vec<bool> = p.launches.iter().map(|l| l.kernel.early()).collect();
        let body = p.launches.len() / copies;
        for c in 1..copies {
            assert_eq!(early[c * body..(c + 1) * body], early[..body], "copy {c} of loop.b{rows}");
        }
        assert_eq!(early[..body].iter().filter(|&&e| e).count(), decode.launches.iter().filter(|l| l.kernel.early()).count());
    }
    let weights = MemWeights::random(&cfg, 11, SrcDType::F32);
    (plan, weights)
}

#[test]
fn loop_matches_one_step_decode() {
    for (fuse, copies) in [false, true].into_iter().flat_map(|f| COPIES.map(|c| (f, c))) {
        let (plan, w) = setup(16, fuse, copies);
        for (first, temperature) in [(vec![3], 0.0), (vec![3], 0.9), (vec![3, 17], 0.0), (vec![3, 17], 1.1)] {
            let reference = one_step(&plan, &w, &first, 0, 12, temperature);
            // 12: whole passes of 1, 2 or 3 copies; 7: the first copy alone for 2 and 3.
            for budget in [12, 7] {
                let (ring, ctl) = looped(&plan, &w, &first, 0, budget, &[], temperature);
                assert_eq!((ctl[1], ctl[2]), (budget, 1), "loop finished after its budget");
                assert_eq!(
                    ring[..],
                    reference[..budget as usize],
                    "fuse {fuse} copies {copies} rows {} T {temperature} budget {budget}",
                    first.len()
                );
            }
        }
    }
}

/// The greedy tokens of the argmax key (rewrite 9) are the scan's: the fused one-row loop of a
/// model whose vocabulary projection carries the key against one-step decode (whose `sample` scans
/// the logits), greedy and sampled (which scans and still zeroes the key), in 1, 2 and 3 copies.
#[test]
fn argmax_key_loop_matches_one_step_decode() {
    for copies in COPIES {
        let (plan, w) = setup_vocab(kiln::lower::fuse::NORM_PROLOGUE_MAX_FEATURES + 1000, 16, true, copies);
        for temperature in [0.0, 0.9] {
            let reference = one_step(&plan, &w, &[3], 0, 10, temperature);
            for budget in [10, 7] {
                let (ring, ctl) = looped(&plan, &w, &[3], 0, budget, &[], temperature);
                assert_eq!((ctl[1], ctl[2]), (budget, 1), "loop finished after its budget");
                assert_eq!(ring[..], reference[..budget as usize], "copies {copies} T {temperature} budget {budget}");
            }
        }
    }
}

#[test]
fn loop_stops_at_budget_ring_end_stop_token_and_context_end() {
    for fuse in [false, true] {
        for copies in COPIES {
            stops_for(fuse, copies);
        }
    }
}

fn stops_for(fuse: bool, copies: usize) {
    let (plan, w) = setup(8, fuse, copies);
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
        for copies in COPIES {
            done_preset_for(fuse, copies);
        }
    }
}

fn done_preset_for(fuse: bool, copies: usize) {
    let (plan, w) = setup(8, fuse, copies);
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

/// The copies a pass still runs after the loop is done: a stop token in the first copy of a
/// pass of three, and a row reaching the context end. They change no loop control, no ring
/// word, and no KV row past a sequence's own rows: the sequence at the end leaves as a padding
/// row (position -1) and writes nothing; the other writes only its next row, the row its next
/// step writes alike. The KV cache equals the one-copy loop's everywhere else.
#[test]
fn copies_after_the_stop_write_no_kv_row_past_a_sequence() {
    let kv = |exec: &mut CpuExecutor, plan: &Plan, layer: usize| -> Vec<u8> {
        let name = format!("blk.{layer}.k_cache");
        let bytes = plan.tensor(&name).unwrap().bytes as usize;
        exec.read_tensor(&name, bytes).unwrap()
    };
    for fuse in [false, true] {
        let (one, w) = setup(8, fuse, 1);
        let (three, _) = setup(8, fuse, 3);
        let row_bytes = one.tensor("blk.0.k_cache").unwrap().bytes as usize / (2 * MAX_CONTEXT);
        // Row 0 starts 2 positions before the end: the loop stops in its second step (a pass of
        // three runs one more copy); row 1 at 10 goes on to position 12.
        let run = |plan: &Plan| {
            let mut exec = CpuExecutor::new(plan.clone(), &w).unwrap();
            let prog = plan.program(Phase::DecodeLoop, 2).unwrap();
            let mut s = step_for(plan, &[3, 17], &[MAX_CONTEXT as i32 - 2, 10], 0.0);
            s.set_u32(plan, names::LOOP_CONTROL, &[6, 0, 0, MAX_CONTEXT as u32, 0, 0]).unwrap();
            s.set_i32(plan, names::LOOP_STOP_IDS, &[-1i32; MAX_STOP_IDS]).unwrap();
            exec.run(prog, &s).unwrap();
            let ctl = ints(&exec.read_tensor(names::LOOP_CONTROL, 4 * 6).unwrap());
            let pos = ints(&exec.read_tensor(names::POSITIONS, 8).unwrap());
            let ring = ints(&exec.read_tensor(names::RING, plan.tensor(names::RING).unwrap().bytes as usize).unwrap());
            let caches: Vec<Vec<u8>> = (0..2).map(|l| kv(&mut exec, plan, l)).collect();
            (ctl, pos, ring, caches)
        };
        let (ctl1, pos1, ring1, kv1) = run(&one);
        let (ctl3, pos3, ring3, kv3) = run(&three);
        assert_eq!(ctl1, vec![6, 2, 1, MAX_CONTEXT as i32, 0, 0], "fuse {fuse}: two steps, stopped at the context end");
        assert_eq!((ctl3, ring3), (ctl1, ring1), "fuse {fuse}");
        let next_row_of_seq1 = (MAX_CONTEXT + 12) * row_bytes;
        for (l, (a, b)) in kv1.iter().zip(&kv3).enumerate() {
            let differ: Vec<usize> =
                (0..2 * MAX_CONTEXT).filter(|&r| a[r * row_bytes..(r + 1) * row_bytes] != b[r * row_bytes..(r + 1) * row_bytes]).collect();
            assert!(differ.iter().all(|&r| r * row_bytes == next_row_of_seq1), "fuse {fuse} layer {l}: rows {differ:?} differ");
        }
        // The first row of sequence 1 (where row 0's position past the end would point) is its
        // own, untouched by sequence 0.
        assert_eq!(
            kv3[0][MAX_CONTEXT * row_bytes..(MAX_CONTEXT + 1) * row_bytes],
            kv1[0][MAX_CONTEXT * row_bytes..(MAX_CONTEXT + 1) * row_bytes]
        );
        // Row 0 left as padding; row 1 at its next position.
        assert_eq!(pos1, vec![-1, 12]);
        assert_eq!(pos3, pos1);
    }
}
