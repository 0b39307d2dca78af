//! Where the CUDA executor's regions land in device memory: the order it allocates them in and
//! padding allocations between them, for measurements only (`bench/README.md`).
//!
//! The executor makes one driver allocation per region. Which physical memory the driver gives
//! each one is decided by the allocation sequence of a fresh context, and that placement moves
//! decode speed: on an H200 the same binary's Llama-3.2-1B decode read between 1268.9 and
//! 1285.3 tok/s depending on what was allocated before the regions
//! (`bench/results/2026-12-04-h200-decode-ab-s42.md`), more than the effect of most single
//! changes an A/B compares. These knobs move the regions without changing anything else, so
//! that an A/B can average over placements and a probe can find which region's placement
//! matters:
//! - `KILN_ALLOC_PAD_MB=<n>`: n MiB allocated before the first region (moves every region);
//! - `KILN_ALLOC_PAD_AFTER=<region>:<n>[,<region>:<n>...]`: n MiB allocated right after that
//!   region (moves only the regions allocated after it);
//! - `KILN_ALLOC_ORDER=<region>,...`: those regions first, in that order, then the rest in the
//!   default order (`RegionKind::ALL`: weights, state, step, output, arena, ring).
//!
//! Region names are `RegionKind::name`'s. Unset, the layout is the default one; a malformed
//! value is an error at load, never a silently ignored knob. The pads live as long as the
//! executor. Nothing here changes a plan, an offset inside a region, or a result: only the
//! regions' base addresses.
//!
//! Never: touches a device (pure functions of the knobs' text, tested without a GPU).

use crate::plan::{RegionKind, N_REGIONS};
use anyhow::{bail, ensure, Context, Result};

/// The allocation sequence of an executor's regions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Bytes allocated before the first region.
    pub pad_before: u64,
    /// Bytes allocated right after each region (by `RegionKind::index`), when it is allocated.
    pub pad_after: [u64; N_REGIONS],
    /// Every region once, in allocation order.
    pub order: Vec<RegionKind>,
}

impl Default for Placement {
    fn default() -> Self {
        Placement { pad_before: 0, pad_after: [0; N_REGIONS], order: RegionKind::ALL.to_vec() }
    }
}

fn region(name: &str, knob: &str) -> Result<RegionKind> {
    let name = name.trim();
    RegionKind::ALL.into_iter().find(|r| r.name() == name).with_context(|| {
        let names: Vec<&str> = RegionKind::ALL.iter().map(|r| r.name()).collect();
        format!("{knob}: `{name}` is not a region (one of {})", names.join(", "))
    })
}

fn mib(text: &str, knob: &str) -> Result<u64> {
    let n: u64 = text.trim().parse().with_context(|| format!("{knob}: `{}` is not a whole number of MiB", text.trim()))?;
    ensure!(n <= 1 << 20, "{knob}: {n} MiB is more than any GPU has");
    Ok(n << 20)
}

impl Placement {
    /// The placement the three knobs' values ask for (`None`: the knob is unset).
    pub fn parse(pad_mb: Option<&str>, pad_after: Option<&str>, order: Option<&str>) -> Result<Placement> {
        let mut p = Placement::default();
        if let Some(v) = pad_mb.filter(|v| !v.trim().is_empty()) {
            p.pad_before = mib(v, "KILN_ALLOC_PAD_MB")?;
        }
        if let Some(v) = pad_after.filter(|v| !v.trim().is_empty()) {
            for item in v.split(',') {
                let Some((name, n)) = item.split_once(':') else {
                    bail!("KILN_ALLOC_PAD_AFTER: `{}` is not <region>:<MiB>", item.trim());
                };
                p.pad_after[region(name, "KILN_ALLOC_PAD_AFTER")?.index()] = mib(n, "KILN_ALLOC_PAD_AFTER")?;
            }
        }
        if let Some(v) = order.filter(|v| !v.trim().is_empty()) {
            let mut first = Vec::new();
            for name in v.split(',') {
                let r = region(name, "KILN_ALLOC_ORDER")?;
                ensure!(!first.contains(&r), "KILN_ALLOC_ORDER: `{}` is named twice", r.name());
                first.push(r);
            }
            first.extend(RegionKind::ALL.into_iter().filter(|r| !first.contains(r)).collect::<Vec<_>>());
            p.order = first;
        }
        Ok(p)
    }

    /// The placement of this process's environment (see the module doc).
    pub fn from_env() -> Result<Placement> {
        let var = |k: &str| std::env::var(k).ok();
        Placement::parse(var("KILN_ALLOC_PAD_MB").as_deref(), var("KILN_ALLOC_PAD_AFTER").as_deref(), var("KILN_ALLOC_ORDER").as_deref())
    }

    pub fn is_default(&self) -> bool {
        *self == Placement::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_or_empty_knobs_are_the_default_layout() {
        assert!(Placement::parse(None, None, None).unwrap().is_default());
        assert!(Placement::parse(Some(""), Some(" "), Some("")).unwrap().is_default());
        assert!(Placement::parse(Some("0"), Some("state:0"), Some("weights")).unwrap().is_default());
        assert_eq!(Placement::default().order, RegionKind::ALL.to_vec());
    }

    #[test]
    fn pads_and_orders_parse() {
        let p = Placement::parse(Some("1024"), Some("weights:64, arena:2"), Some("step,output")).unwrap();
        assert_eq!(p.pad_before, 1024 << 20);
        let mut after = [0; N_REGIONS];
        after[RegionKind::Weights.index()] = 64 << 20;
        after[RegionKind::Arena.index()] = 2 << 20;
        assert_eq!(p.pad_after, after);
        use RegionKind::*;
        assert_eq!(p.order, vec![Step, Output, Weights, State, Arena, Ring]);
        assert!(!p.is_default());
    }

    #[test]
    fn malformed_knobs_are_errors_that_name_the_knob() {
        for (pad, after, order, what) in [
            (Some("64M"), None, None, "KILN_ALLOC_PAD_MB"),
            (Some("-1"), None, None, "KILN_ALLOC_PAD_MB"),
            (Some("99999999"), None, None, "more than any GPU"),
            (None, Some("weights"), None, "<region>:<MiB>"),
            (None, Some("kv:64"), None, "not a region"),
            (None, Some("state:x"), None, "KILN_ALLOC_PAD_AFTER"),
            (None, None, Some("arena,arena"), "named twice"),
            (None, None, Some("weights,cache"), "not a region"),
        ] {
            let e = Placement::parse(pad, after, order).unwrap_err();
            assert!(format!("{e:#}").contains(what), "{pad:?} {after:?} {order:?}: {e:#}");
        }
    }
}
