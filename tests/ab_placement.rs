//! `scripts/ab_placement.py`, the placement-averaged A/B (session 43), end to end on the CPU
//! executor: every arm runs at every pad, the rows of each run's report are read back, and the
//! table compares the arms. On the CPU the pads move nothing; what this proves is the pipeline
//! (the GPU run differs only in `--device`).

use std::path::PathBuf;
use std::process::Command;

#[test]
fn every_arm_runs_at_every_pad_and_the_table_compares_them() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().unwrap();
    let kiln = env!("CARGO_BIN_EXE_kiln");
    let model = repo.join("models/stories260K/stories260K.gguf");
    let out = Command::new("python3")
        .arg(repo.join("scripts/ab_placement.py"))
        .args(["--arm", &format!("base={kiln}"), "--arm", &format!("unroll4={kiln}:KILN_LOOP_UNROLL=4")])
        .args(["--pads", "0,64", "--rounds", "2", "--out"])
        .arg(tmp.path())
        .arg("--")
        .args(["--models", model.to_str().unwrap(), "--device", "cpu", "--batches", "1", "--contexts", "16"])
        .args(["--prompt", "16", "--new-tokens", "8", "--repeats", "1", "--fuse"])
        .output()
        .expect("python3 runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "stdout:\n{text}\nstderr:\n{}", String::from_utf8_lossy(&out.stderr));
    // 2 arms x 2 pads x 2 rounds, each one bench run with a report.
    assert_eq!(text.matches(" rc 0: stories260K.gguf/b1/c16 ").count(), 8, "{text}");
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().filter(|e| e.as_ref().unwrap().path().extension().unwrap() == "json").count(), 8);
    // The rounds rotate which arm goes first at a pad.
    let order: Vec<&str> = text.lines().filter(|l| l.contains(" rc ")).map(|l| l.split_whitespace().nth(7).unwrap()).collect();
    assert_eq!(order[..4], ["base", "unroll4", "unroll4", "base"], "{text}");
    assert_eq!(order[4..], ["unroll4", "base", "base", "unroll4"], "{text}");
    let base = text.lines().find(|l| l.starts_with("base ")).unwrap_or_else(|| panic!("{text}"));
    assert!(base.split_whitespace().nth(4) == Some("4"), "4 runs of base: {base}");
    let other = text.lines().find(|l| l.starts_with("unroll4 ")).unwrap_or_else(|| panic!("{text}"));
    assert_eq!(other.matches('%').count(), 2, "ratio and paired ratio: {other}");
}

#[test]
fn a_bench_argument_that_the_script_owns_is_refused() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("python3")
        .arg(repo.join("scripts/ab_placement.py"))
        .args(["--arm", "a=kiln", "--dry-run", "--", "--out", "x"])
        .output()
        .expect("python3 runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("pass --out to this script"));
}
