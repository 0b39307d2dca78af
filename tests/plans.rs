//! The committed plans in `plans/` and their snapshots.
//!
//! Proves: (1) the code still produces byte-identical plans for the reference configs (a change
//! to lowering or planning must update `plans/` deliberately: `KILN_BLESS=1 cargo test --test
//! plans`); (2) every committed plan loads and passes the plan checker; (3) the canonical dumps
//! are pinned as insta snapshots (`cargo insta review` shows what a change did); (4) planning is
//! deterministic.

use kiln::ir::DType;
use kiln::model::ModelConfig;
use kiln::plan::{build_plan, dump, file, Plan, PlanOptions};
use std::path::PathBuf;

struct Reference {
    name: &'static str,
    config: fn() -> ModelConfig,
    options: PlanOptions,
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn stories_config() -> ModelConfig {
    kiln::bundled::open_default().expect("bundled model opens").config
}

fn hf_config(name: &str) -> ModelConfig {
    let path = repo().join("configs").join(name).join("config.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    ModelConfig::from_hf_json(&text).unwrap_or_else(|e| panic!("{}: {e:#}", path.display()))
}

fn references() -> Vec<Reference> {
    let big = |ctx| PlanOptions {
        decode_buckets: vec![1, 2, 4, 8],
        prefill_buckets: vec![16, 64, 256],
        max_context: ctx,
        dtype: DType::BF16,
        memory_budget: None,
        burst: 64,
        fuse: false,
    };
    vec![
        Reference {
            name: "stories260k",
            config: stories_config,
            options: PlanOptions {
                decode_buckets: vec![1, 2, 4, 8],
                prefill_buckets: vec![16, 64, 256],
                max_context: 512,
                dtype: DType::F32,
                memory_budget: None,
                burst: 64,
                fuse: false,
            },
        },
        Reference { name: "llama3.2-1b", config: || hf_config("llama3.2-1b"), options: big(4096) },
        Reference { name: "qwen2.5-0.5b", config: || hf_config("qwen2.5-0.5b"), options: big(4096) },
        Reference { name: "qwen3-0.6b", config: || hf_config("qwen3-0.6b"), options: big(4096) },
    ]
}

fn build(r: &Reference) -> Plan {
    build_plan(&(r.config)(), &r.options).unwrap_or_else(|e| panic!("planning {}: {e:#}", r.name))
}

#[test]
fn committed_plans_match_the_code() {
    let bless = std::env::var("KILN_BLESS").is_ok_and(|v| v == "1");
    for r in references() {
        let plan = build(&r);
        let bytes = file::to_bytes(&plan).unwrap();
        let path = repo().join("plans").join(format!("{}.plan", r.name));
        let dump_path = repo().join("plans").join(format!("{}.plan.txt", r.name));
        if bless {
            std::fs::write(&path, &bytes).unwrap();
            std::fs::write(&dump_path, dump::dump(&plan)).unwrap();
            continue;
        }
        let committed =
            std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}; run KILN_BLESS=1 cargo test --test plans", path.display()));
        assert!(
            committed == bytes,
            "plans/{}.plan no longer matches what this code plans; review `kiln diff` and re-bless with KILN_BLESS=1 cargo test --test plans",
            r.name
        );
        let loaded = file::load(&path).expect("committed plan loads and passes the checker");
        assert_eq!(loaded, plan);
        assert_eq!(std::fs::read_to_string(&dump_path).unwrap(), dump::dump(&plan), "plans/{}.plan.txt is stale", r.name);
    }
}

#[test]
fn dumps_are_pinned() {
    for r in references() {
        let plan = build(&r);
        insta::assert_snapshot!(format!("dump_{}", r.name), dump::dump(&plan));
    }
}

#[test]
fn planning_is_deterministic() {
    for r in references() {
        let a = file::to_bytes(&build(&r)).unwrap();
        let b = file::to_bytes(&build(&r)).unwrap();
        assert!(a == b, "two plans of {} differ", r.name);
    }
}

#[test]
fn llama_1b_plans_fast_and_reuses_memory() {
    let r = references().into_iter().find(|r| r.name == "llama3.2-1b").unwrap();
    let cfg = (r.config)();
    let t = std::time::Instant::now();
    let plan = build_plan(&cfg, &r.options).unwrap();
    // Not a benchmark: a generous bound that catches an accidentally quadratic planner.
    assert!(t.elapsed().as_secs_f64() < 5.0);
    let biggest = plan.programs.iter().max_by_key(|p| p.naive_bytes).unwrap();
    assert!(biggest.arena_bytes * 4 < biggest.naive_bytes, "liveness reuse should cut the arena well below the naive sum");
}
