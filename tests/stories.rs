//! stories260K end to end on the CPU executor: load -> lower -> plan -> execute. The expected
//! text is the model's known greedy output, published with the model (see
//! `models/stories260K/README.md`), not something kiln computed.

use kiln::ir::DType;
use kiln::plan::{build_plan, file, PlanOptions};
use kiln::runtime::cpu::CpuExecutor;
use kiln::runtime::session::{generate, Sampling};
use std::path::PathBuf;

mod common_cpu;
use common_cpu::greedy_text;

const KNOWN: &str = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball. She wanted to play with it, but it was too high.\nLily's mom said, \"Lily, let's go to the park.\" Lily was sad and didn't know what to do.";

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/stories260K")
}

fn options() -> PlanOptions {
    PlanOptions {
        decode_buckets: vec![1],
        prefill_buckets: vec![16],
        max_context: 512,
        dtype: DType::F32,
        memory_budget: None,
        burst: 0,
        fuse: false,
    }
}

#[test]
fn gguf_greedy_matches_known_output() {
    let m = kiln::model::open(&dir().join("stories260K.gguf"), None).unwrap();
    let plan = build_plan(&m.config, &options()).unwrap();
    let text = greedy_text(&m, plan);
    assert!(text.starts_with(KNOWN), "got:\n{text}");
}

#[test]
fn llama2c_greedy_matches_known_output() {
    let m = kiln::model::open(&dir().join("stories260K.bin"), Some(&dir().join("tok512.bin"))).unwrap();
    let plan = build_plan(&m.config, &options()).unwrap();
    let text = greedy_text(&m, plan);
    assert!(text.starts_with(KNOWN), "got:\n{text}");
}

#[test]
fn bundled_model_from_a_plan_file_matches_known_output() {
    let m = kiln::bundled::open_default().unwrap();
    let plan = build_plan(&m.config, &options()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("stories.plan");
    file::save(&plan, &path).unwrap();
    let loaded = file::load(&path).unwrap();
    file::check_model(&loaded, &m.config, "stories260K").unwrap();
    let text = greedy_text(&m, loaded);
    assert!(text.starts_with(KNOWN), "got:\n{text}");
}

#[test]
fn seeded_sampling_is_reproducible() {
    let m = kiln::bundled::open_default().unwrap();
    let run = |seed| {
        let plan = build_plan(&m.config, &options()).unwrap();
        let mut exec = CpuExecutor::new(plan, m.weights.as_ref()).unwrap();
        let s = Sampling { temperature: 0.9, top_k: 40, top_p: 0.9, seed };
        generate(&mut exec, &[1], 40, s, &[], |_| true).unwrap().tokens
    };
    assert_eq!(run(7), run(7));
    assert_ne!(run(7), run(8), "different seeds should give different samples");
}
