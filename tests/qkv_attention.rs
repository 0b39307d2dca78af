//! QKV-RoPE and the decode attention in one launch (`lower::fuse` rewrite 11, on by default, off
//! under the plan-time knob `KILN_FUSE_QKV_ATTN=0`) on the CPU executor: in a bf16 model of head_dim 64 (the shape class of
//! the Qwen2.5-0.5B's attention), every one-row decode program's `qkv_rope` and `attention_cluster`
//! become one `qkv_attention` per layer, other buckets and prefill keep theirs, the plan file and
//! its checker keep it, and its arithmetic is the two launches' bit for bit: one-row decode gives
//! the same logits and tokens as without the knob, and its device loop one-step decode's tokens.
//!
//! The knob is read once per process, so the test runs its own binary as a child with the knob
//! off, on and unset (the default, which must be on), and compares what they print.

mod common_cpu;

use common_cpu::loops::{loop_plan, looped, one_step};
use common_cpu::Shape;
use kiln::ir::{DType, Phase, RopeScaling, RopeStyle};
use kiln::lower::names;
use kiln::model::{ModelConfig, SrcDType};
use kiln::plan::{Kernel, Plan};
use kiln::runtime::cpu::CpuExecutor;
use kiln::runtime::{Executor, StepBlock};
use kiln::synth::MemWeights;

const CHILD: &str = "KILN_QKV_ATTN_TEST_CHILD";
const TEST: &str = "qkv_attention_is_the_two_launches_bit_for_bit";

fn config() -> ModelConfig {
    Shape {
        vocab: 300,
        hidden: 256,
        ffn: 320,
        layers: 2,
        heads: 4,
        kv_heads: 2,
        head_dim: 64,
        rotary_dim: 64,
        style: RopeStyle::HalfSplit,
        scaling: RopeScaling::None,
        tied: false,
        qkv_bias: true,
        qk_norm: false,
    }
    .build()
}

/// FNV-1a over `bytes`, continuing from `h`.
fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// `qkv_attention` / `qkv_rope` / `attention_cluster` launches of each program, in plan order.
fn census(plan: &Plan) -> String {
    let count = |p: &kiln::plan::ProgramPlan, f: &dyn Fn(&Kernel) -> bool| p.launches.iter().filter(|l| f(&l.kernel)).count();
    plan.programs
        .iter()
        .map(|p| {
            let fused = count(p, &|k| matches!(k, Kernel::QkvAttention { .. }));
            let qkv = count(p, &|k| matches!(k, Kernel::QkvRope { .. }));
            let attn = count(p, &|k| matches!(k, Kernel::AttentionCluster { .. }));
            format!("{}:{fused}/{qkv}/{attn}", p.label())
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// What a child prints: the census of its bf16 plan, then a digest of one-row decode on the CPU
/// executor (a 6-token prefill, then 20 greedy decode steps of decode.b1 from position 6: the
/// logits' bits and tokens; positions 6..25 take 1 and 2 of the 8 splits), then the tokens of a
/// device loop of 12 steps at temperature 0.9 after asserting them equal to one-step decode's.
fn child_report() -> String {
    let cfg = config();
    let plan = loop_plan(&cfg, DType::BF16, true);
    // The plan file keeps it (and the checker, run on every load, accepts it).
    let bytes = kiln::plan::file::to_bytes(&plan).unwrap();
    assert_eq!(kiln::plan::file::from_bytes(&bytes, "the test plan").unwrap(), plan);
    // The checker's invariant 15 refuses a qkv_attention of a shape its kernel does not take, or
    // with another grid.
    let fused = plan
        .programs
        .iter()
        .enumerate()
        .find_map(|(p, prog)| prog.launches.iter().position(|l| matches!(l.kernel, Kernel::QkvAttention { .. })).map(|i| (p, i)));
    if let Some((p, i)) = fused {
        for bad in 0..2 {
            let mut broken = plan.clone();
            let l = &mut broken.programs[p].launches[i];
            match (bad, &mut l.kernel) {
                (0, Kernel::QkvAttention { head_dim, .. }) => *head_dim = 32,
                _ => l.grid[1] = 4,
            }
            let err = kiln::plan::check::check_plan(&broken).expect_err("the checker refuses it");
            assert!(format!("{err:#}").contains("qkv_attention"), "{err:#}");
        }
    }
    let w = MemWeights::random(&cfg, 11, SrcDType::BF16);
    let mut exec = CpuExecutor::new(plan.clone(), &w).unwrap();
    let v = cfg.vocab_size;
    let mut step = StepBlock::new(&plan);
    let ids: Vec<i32> = (0..8).map(|i| if i < 6 { 1 + 4 * i } else { 0 }).collect();
    let pos: Vec<i32> = (0..8).map(|i| if i < 6 { i } else { -1 }).collect();
    step.set_i32(&plan, names::TOKEN_IDS, &ids).unwrap();
    step.set_i32(&plan, names::POSITIONS, &pos).unwrap();
    step.set_i32(&plan, names::CACHE_BASE, &[0; 8]).unwrap();
    step.set_i32(&plan, names::LOGIT_ROWS, &[5]).unwrap();
    exec.run(plan.program(Phase::Prefill, 8).unwrap(), &step).unwrap();
    let mut h = fnv(0xcbf2_9ce4_8422_2325, &exec.read_tensor(names::LOGITS, 4 * v).unwrap());
    let d = plan.program(Phase::Decode, 1).unwrap();
    let mut token = 7;
    for i in 0..20 {
        let mut s = StepBlock::new(&plan);
        s.set_i32(&plan, names::TOKEN_IDS, &[token]).unwrap();
        s.set_i32(&plan, names::POSITIONS, &[6 + i]).unwrap();
        s.set_i32(&plan, names::CACHE_BASE, &[0]).unwrap();
        s.set_f32(&plan, names::TEMPERATURE, &[0.0]).unwrap();
        exec.run(d, &s).unwrap();
        h = fnv(h, &exec.read_tensor(names::LOGITS, 4 * v).unwrap());
        let t = exec.read_tensor(names::TOKENS, 4).unwrap();
        h = fnv(h, &t);
        token = i32::from_le_bytes([t[0], t[1], t[2], t[3]]);
    }
    let reference = one_step(&plan, &w, &[3], 0, 12, 0.9);
    let (ring, ctl) = looped(&plan, &w, &[3], 0, 12, &[], 0.9);
    assert_eq!((ctl[1], ctl[2]), (12, 1), "the loop finished after its budget");
    assert_eq!(ring, reference, "device loop == one-step decode");
    format!("census={} decode={h:016x} loop={ring:?}", census(&plan))
}

#[test]
fn qkv_attention_is_the_two_launches_bit_for_bit() {
    if std::env::var_os(CHILD).is_some() {
        println!("REPORT {}", child_report());
        return;
    }
    let run = |knob: &str| -> String {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args([TEST, "--exact", "--nocapture", "--test-threads=1"]).env(CHILD, "1").env_remove("KILN_ATTN_CLUSTER");
        match knob {
            "unset" => cmd.env_remove("KILN_FUSE_QKV_ATTN"),
            k => cmd.env("KILN_FUSE_QKV_ATTN", k),
        };
        let out = cmd.output().expect("the test binary runs as a child");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(out.status.success(), "child with KILN_FUSE_QKV_ATTN={knob} failed:\n{text}\n{}", String::from_utf8_lossy(&out.stderr));
        text.lines().find_map(|l| l.split_once("REPORT ").map(|(_, r)| r)).unwrap_or_else(|| panic!("no report in:\n{text}")).to_string()
    };
    let (off, on, default) = (run("0"), run("1"), run("unset"));
    eprintln!("knob off: {off}\nknob on:  {on}\ndefault:  {default}");
    assert_eq!(default, on, "rewrite 11 is on by default");
    let field = |r: &str, k: &str| r.split(' ').find_map(|f| f.strip_prefix(k)).unwrap().to_string();
    let layers = config().n_layers;
    // Off: every decode program has qkv_rope + attention_cluster per layer (the loop in its copies).
    let copies = |census: &str, label: &str| -> usize {
        let c = census.split(',').find_map(|p| p.strip_prefix(&format!("{label}:"))).unwrap();
        let n: Vec<usize> = c.split('/').map(|x| x.parse().unwrap()).collect();
        assert!(n[0] == 0 || n[1] == 0, "{label}: fused and unfused at once ({c})");
        (n[0] + n[1]) / layers
    };
    let (c_off, c_on) = (field(&off, "census="), field(&on, "census="));
    for label in ["decode.b1", "decode.b2", "loop.b1", "loop.b2"] {
        assert_eq!(copies(&c_off, label), copies(&c_on, label), "{label}");
    }
    let want = |label: &str, fused: bool| {
        let n = copies(&c_off, label) * layers;
        let expect = if fused { format!("{label}:{n}/0/0") } else { format!("{label}:0/{n}/{n}") };
        (c_on.split(',').any(|p| p == expect), expect)
    };
    for (label, fused) in [("decode.b1", true), ("loop.b1", true), ("decode.b2", false), ("loop.b2", false)] {
        let (ok, expect) = want(label, fused);
        assert!(ok, "knob on: want {expect} in {c_on}");
        let (ok_off, expect_off) = {
            let n = copies(&c_off, label) * layers;
            let e = format!("{label}:0/{n}/{n}");
            (c_off.split(',').any(|p| p == e), e)
        };
        assert!(ok_off, "knob off: want {expect_off} in {c_off}");
    }
    assert!(c_on.contains("prefill.t8:0/0/0") && c_off.contains("prefill.t8:0/0/0"), "prefill takes neither");
    // The arithmetic: the two launches', bit for bit.
    assert_eq!(field(&off, "decode="), field(&on, "decode="), "one-row decode's logits and tokens");
    assert_eq!(off.split("loop=").nth(1), on.split("loop=").nth(1), "the device loop's tokens");
}

/// f16 / f32 plans and head dims other than 64 never take it (the kernel is bf16, head_dim 64);
/// in this process the knob is whatever the environment says, so only the shapes that must not
/// fuse are checked here.
#[test]
fn other_dtypes_and_head_dims_keep_two_launches() {
    let cfg = config();
    for dtype in [DType::F16, DType::F32] {
        let p = loop_plan(&cfg, dtype, true);
        assert!(!census(&p).split(',').any(|c| !c.contains(":0/")), "{dtype:?}: {}", census(&p));
    }
    let mut narrow = cfg.clone();
    narrow.head_dim = 32;
    narrow.rope.rotary_dim = 32;
    narrow.n_heads = 8;
    narrow.n_kv_heads = 4;
    narrow.validate().unwrap();
    let p = loop_plan(&narrow, DType::BF16, true);
    assert!(!census(&p).split(',').any(|c| !c.contains(":0/")), "head_dim 32: {}", census(&p));
}
