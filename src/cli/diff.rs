//! `kiln diff A.plan B.plan`: what changed in regions and arenas, then a unified diff of the
//! canonical dumps.

use crate::plan::{dump, file, planner::fmt_bytes, RegionKind};
use anyhow::Result;
use clap::Args;
use std::fmt::Write;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct DiffCmd {
    pub a: PathBuf,
    pub b: PathBuf,
    /// Lines of context around each change.
    #[arg(long, default_value_t = 2)]
    pub context: usize,
}

pub fn diff_text(a: &crate::plan::Plan, b: &crate::plan::Plan, a_name: &str, b_name: &str, context: usize) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "--- {a_name}\n+++ {b_name}");
    if a.fingerprint != b.fingerprint {
        let _ = writeln!(s, "model fingerprint: {} -> {}", &a.fingerprint[..12], &b.fingerprint[..12]);
    }
    let _ = writeln!(s, "regions:");
    for r in RegionKind::ALL {
        let (x, y) = (a.region_bytes[r.index()], b.region_bytes[r.index()]);
        let mark = if x == y { " " } else { "*" };
        let _ = writeln!(s, " {mark} {:<8} {:>12} -> {:>12}  ({:+})", r.name(), fmt_bytes(x), fmt_bytes(y), y as i128 - x as i128);
    }
    let _ = writeln!(s, "programs:");
    let labels: std::collections::BTreeSet<String> = a.programs.iter().chain(&b.programs).map(|p| p.label()).collect();
    for l in labels {
        let pa = a.programs.iter().find(|p| p.label() == l);
        let pb = b.programs.iter().find(|p| p.label() == l);
        let f = |p: Option<&crate::plan::ProgramPlan>| {
            p.map(|p| format!("arena={} launches={}", p.arena_bytes, p.launches.len())).unwrap_or_else(|| "absent".into())
        };
        let (fa, fb) = (f(pa), f(pb));
        let mark = if fa == fb { " " } else { "*" };
        let _ = writeln!(s, " {mark} {l:<14} {fa} -> {fb}");
    }
    let (da, db) = (dump::dump(a), dump::dump(b));
    let udiff = similar::TextDiff::from_lines(&da, &db).unified_diff().context_radius(context).header(a_name, b_name).to_string();
    if udiff.is_empty() {
        let _ = writeln!(s, "dumps are identical");
    } else {
        s.push_str(&udiff);
    }
    s
}

pub fn diff_main(cmd: &DiffCmd) -> Result<()> {
    let a = file::load(&cmd.a)?;
    let b = file::load(&cmd.b)?;
    super::print_out(&diff_text(&a, &b, &cmd.a.display().to_string(), &cmd.b.display().to_string(), cmd.context))
}
