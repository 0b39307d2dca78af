//! `scripts/trace_summary.py` on a synthetic block trace (the CUDA executor's `KILN_TRACE_OUT` format:
//! five little-endian u64 per block and `TRACE.phase` beside it), so that its tables are checked
//! without a GPU: the launches split by grid and time, the steps aligned to the plan dump, the
//! phases past each block's wait, and the third table's median and last-ending blocks, their SM
//! mates and the next launch's blocks resident beside them.
//!
//! The script needs numpy. Without it these tests print "skipped: no numpy" and pass, unless
//! `KILN_REQUIRE_NUMPY=1` (CI, which installs it), which makes them fail.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The plan dump's decode body the script aligns to: two launches per step, grids of 8 and 3 blocks.
const PLAN: &str = "program loop.b1
  L0 blk.0.qkv_attn = qkv_attention(x) grid=[4, 2, 1] block=[256, 1, 1]
  L1 blk.0.attn_output = fused_linear(x) grid=[3, 1, 1] block=[256, 1, 1]
";

const STEPS: u64 = 8;
/// The second and third tables' titles.
const PHASES_TABLE: &str = "phases (KILN_TRACE_PHASE)";
const RELEASE_TABLE: &str = "the same, us past the launch's release";
const PHASES: usize = 8;

/// Writes TRACE.bin and TRACE.bin.phase: per step, launch 1 (8 blocks, two to an SM, block b's wait
/// returning 20 b ns after the release, running 2 us, block 7 1.5 us more; phase 0 at 0.1 us past its
/// wait, phase 1 at 0.9 us, block 7's at 1.9) and launch 2 (3 blocks on SM 3, resident 1 us after launch
/// 1's release, i.e. beside its block 7, released 200 us later, no phases).
fn write_trace(dir: &Path) -> PathBuf {
    let (mut entries, mut phases) = (Vec::<u64>::new(), Vec::<u64>::new());
    let base: u64 = 1_700_000_000_000_000_000;
    for step in 0..STEPS {
        let t = base + step * 400_000;
        for b in 0..8u64 {
            let t1 = t + 20 * b;
            let end = t1 + 2000 + if b == 7 { 1500 } else { 0 };
            entries.extend([1, t1 - 500, t1, (b / 2) << 48 | 8 << 24 | b, end]);
            let mut p = [0u64; PHASES];
            p[0] = t1 + 100;
            p[1] = t1 + 900 + if b == 7 { 1000 } else { 0 };
            phases.extend(p);
        }
        let rel = t + 200_000;
        for b in 0..3u64 {
            let t1 = rel + 10 * b;
            entries.extend([2, t + 1000, t1, 3 << 48 | 3 << 24 | b, t1 + 2000]);
            phases.extend([0u64; PHASES]);
        }
    }
    let bytes = |v: &[u64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let trace = dir.join("trace.bin");
    std::fs::write(&trace, bytes(&entries)).unwrap();
    std::fs::write(dir.join("trace.bin.phase"), bytes(&phases)).unwrap();
    trace
}

/// The script's output, or None (after saying so) where numpy is missing and not required.
fn run_summary(dir: &Path, trace: &Path) -> Option<String> {
    let have_numpy = Command::new("python3").args(["-c", "import numpy"]).status().is_ok_and(|s| s.success());
    if !have_numpy {
        if std::env::var("KILN_REQUIRE_NUMPY").as_deref() == Ok("1") {
            panic!("KILN_REQUIRE_NUMPY=1 but python3 cannot import numpy");
        }
        eprintln!("skipped: no numpy (python3 -m pip install numpy)");
        return None;
    }
    let plan = dir.join("plan.txt");
    std::fs::write(&plan, PLAN).unwrap();
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("python3")
        .arg(repo.join("scripts/trace_summary.py"))
        .arg(trace)
        .arg(&plan)
        .arg("--json")
        .arg(dir.join("summary.json"))
        .output()
        .expect("python3 runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "stdout:\n{text}\nstderr:\n{}", String::from_utf8_lossy(&out.stderr));
    Some(text)
}

/// The whitespace-separated fields after `role` and `what` of the first line that starts with them
/// below the line that starts with `table` (a table's title).
fn row<'a>(text: &'a str, table: &str, role: &str, what: &str) -> Vec<&'a str> {
    let line = text
        .lines()
        .skip_while(|l| !l.starts_with(table))
        .find(|l| l.starts_with(role) && l[role.len()..].trim_start().starts_with(what))
        .unwrap_or_else(|| panic!("no `{role} {what}` line below `{table}` in:\n{text}"));
    line[role.len()..].trim_start()[what.len()..].split_whitespace().collect()
}

#[test]
fn phases_and_the_last_ending_block_are_read_past_the_release() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = write_trace(tmp.path());
    let Some(text) = run_summary(tmp.path(), &trace) else { return };
    assert!(text.contains(&format!("{} blocks, {} launches (0 with blocks missing", STEPS * 11, STEPS * 2)), "{text}");
    // Steps 2..6 are used (two skipped, the last has no next release).
    assert!(text.contains("steps used 5 "), "{text}");
    // Second table: phases past each block's own wait, the median block (phase 1: 0.9 us).
    let second = row(&text, PHASES_TABLE, "qkv_attn", "qkv_attention");
    assert_eq!(second[..3], ["0.10", "0.90", "-"], "{text}");
    // Third table, past the launch's release: block 7 (wait 140 ns) ends last, its phase 1 at
    // 0.14 + 1.9 us, its end at 0.14 + 3.5 us; two blocks on its SM, the next launch's 3 beside it
    // before it ended (resident 1 us after the release), and it reached its wait 0.5 us before its return.
    let last = row(&text, RELEASE_TABLE, "qkv_attn", "last to end");
    assert_eq!(last[..3], ["0.14", "0.24", "2.04"], "{text}");
    assert_eq!(last[PHASES + 1..], ["3.64", "2.00", "3.00", "0.00", "-0.36"], "{text}");
    assert!(text.contains("last blocks (index: launches) 7: 5"), "{text}");
    // The median block: the median wait return (70 ns), no next launch's block beside it.
    let median = row(&text, RELEASE_TABLE, "qkv_attn", "median");
    assert_eq!(median[0], "0.07", "{text}");
    assert_eq!(median[PHASES + 1..], ["2.07", "2.00", "0.00", "0.00", "-0.43"], "{text}");
    // The JSON carries the same rows.
    let json = std::fs::read_to_string(tmp.path().join("summary.json")).unwrap();
    assert!(json.contains("\"rel_last_us\"") && json.contains("\"last_blocks\""), "{json}");
}

#[test]
fn a_phase_file_of_another_width_is_read_by_its_size() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = write_trace(tmp.path());
    // Keep the first 4 of each block's 8 stamps: the script derives the width from the sizes.
    let words: Vec<u64> =
        std::fs::read(tmp.path().join("trace.bin.phase")).unwrap().chunks(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
    let narrow: Vec<u8> = words.chunks(PHASES).flat_map(|c| c[..4].iter().flat_map(|x| x.to_le_bytes())).collect();
    std::fs::write(tmp.path().join("trace.bin.phase"), narrow).unwrap();
    let Some(text) = run_summary(tmp.path(), &trace) else { return };
    assert!(text.contains("phase 3") && !text.contains("phase 4"), "{text}");
    assert_eq!(row(&text, PHASES_TABLE, "qkv_attn", "qkv_attention")[..2], ["0.10", "0.90"], "{text}");
}
