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
//!   default order (`RegionKind::ALL`: weights, state, step, output, arena, ring);
//! - `KILN_ALLOC_SINGLE=1`: one driver allocation holds every device region, in that order, each
//!   starting on a 2 MiB boundary ([`REGION_ALIGN`]), the `KILN_ALLOC_PAD_AFTER` pads as gaps
//!   between them (the layout rule "every buffer at a planned offset" taken to one base address;
//!   the ring stays host memory).
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
    /// One allocation for every device region ([`Placement::single_layout`]).
    pub single: bool,
}

/// Where each region starts inside the one allocation of `KILN_ALLOC_SINGLE=1`: the driver's
/// large-page size, so that no two regions share a page, as with one allocation each.
pub const REGION_ALIGN: u64 = 2 << 20;

impl Default for Placement {
    fn default() -> Self {
        Placement { pad_before: 0, pad_after: [0; N_REGIONS], order: RegionKind::ALL.to_vec(), single: false }
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
    /// The placement the knobs' values ask for (`None`: the knob is unset).
    pub fn parse(pad_mb: Option<&str>, pad_after: Option<&str>, order: Option<&str>, single: Option<&str>) -> Result<Placement> {
        let mut p = Placement::default();
        match single.map(str::trim) {
            None | Some("") | Some("0") => {}
            Some("1") => p.single = true,
            Some(other) => bail!("KILN_ALLOC_SINGLE: `{other}` is not 0 or 1"),
        }
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
        Placement::parse(
            var("KILN_ALLOC_PAD_MB").as_deref(),
            var("KILN_ALLOC_PAD_AFTER").as_deref(),
            var("KILN_ALLOC_ORDER").as_deref(),
            var("KILN_ALLOC_SINGLE").as_deref(),
        )
    }

    /// For `single`: each non-empty device region's offset inside the one allocation (`None`
    /// for empty regions and the ring, which is host memory), in [`Placement::order`], each on a
    /// [`REGION_ALIGN`] boundary and followed by its `pad_after` gap; and the allocation's size.
    pub fn single_layout(&self, region_bytes: &[u64; N_REGIONS]) -> ([Option<u64>; N_REGIONS], u64) {
        let mut offsets = [None; N_REGIONS];
        let mut top = 0u64;
        for &r in &self.order {
            let bytes = region_bytes[r.index()];
            if bytes == 0 || r == RegionKind::Ring {
                continue;
            }
            offsets[r.index()] = Some(top);
            top = (top + bytes + self.pad_after[r.index()]).div_ceil(REGION_ALIGN) * REGION_ALIGN;
        }
        (offsets, top)
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
        assert!(Placement::parse(None, None, None, None).unwrap().is_default());
        assert!(Placement::parse(Some(""), Some(" "), Some(""), Some("")).unwrap().is_default());
        assert!(Placement::parse(Some("0"), Some("state:0"), Some("weights"), Some("0")).unwrap().is_default());
        assert_eq!(Placement::default().order, RegionKind::ALL.to_vec());
    }

    #[test]
    fn pads_and_orders_parse() {
        let p = Placement::parse(Some("1024"), Some("weights:64, arena:2"), Some("step,output"), None).unwrap();
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
        for (pad, after, order, single, what) in [
            (Some("64M"), None, None, None, "KILN_ALLOC_PAD_MB"),
            (Some("-1"), None, None, None, "KILN_ALLOC_PAD_MB"),
            (Some("99999999"), None, None, None, "more than any GPU"),
            (None, Some("weights"), None, None, "<region>:<MiB>"),
            (None, Some("kv:64"), None, None, "not a region"),
            (None, Some("state:x"), None, None, "KILN_ALLOC_PAD_AFTER"),
            (None, None, Some("arena,arena"), None, "named twice"),
            (None, None, Some("weights,cache"), None, "not a region"),
            (None, None, None, Some("yes"), "KILN_ALLOC_SINGLE"),
        ] {
            let e = Placement::parse(pad, after, order, single).unwrap_err();
            assert!(format!("{e:#}").contains(what), "{pad:?} {after:?} {order:?} {single:?}: {e:#}");
        }
    }

    #[test]
    fn single_layout_aligns_regions_and_keeps_pads_as_gaps() {
        use RegionKind::*;
        let mut bytes = [0u64; N_REGIONS];
        bytes[Weights.index()] = 5 * REGION_ALIGN + 3;
        bytes[State.index()] = 100;
        bytes[Step.index()] = 4096;
        bytes[Arena.index()] = REGION_ALIGN;
        bytes[Ring.index()] = 2048;
        // Output is empty: no offset, no space.
        let p = Placement::parse(None, Some("state:64"), None, Some("1")).unwrap();
        assert!(p.single && !p.is_default());
        let (offsets, total) = p.single_layout(&bytes);
        let a = REGION_ALIGN;
        assert_eq!(offsets[Weights.index()], Some(0));
        assert_eq!(offsets[State.index()], Some(6 * a));
        // State's 100 bytes, its 64 MiB pad, then the next 2 MiB boundary.
        assert_eq!(offsets[Step.index()], Some(6 * a + (64 << 20) + a));
        assert_eq!(offsets[Output.index()], None);
        assert_eq!(offsets[Arena.index()], Some(6 * a + (64 << 20) + 2 * a));
        assert_eq!(offsets[Ring.index()], None, "the ring is host memory");
        assert_eq!(total, 6 * a + (64 << 20) + 3 * a);
        // Every region fits before the next one starts.
        for r in RegionKind::ALL {
            if let Some(o) = offsets[r.index()] {
                assert_eq!(o % a, 0);
                assert!(RegionKind::ALL
                    .iter()
                    .all(|q| q == &r || offsets[q.index()].is_none_or(|oq| oq >= o + bytes[r.index()] || oq + bytes[q.index()] <= o)));
            }
        }
        // Another order moves the regions, not their sizes.
        let p = Placement::parse(None, None, Some("arena,step"), Some("1")).unwrap();
        let (offsets, total) = p.single_layout(&bytes);
        assert_eq!(offsets[Arena.index()], Some(0));
        assert_eq!(offsets[Step.index()], Some(a));
        assert_eq!(offsets[Weights.index()], Some(2 * a));
        assert_eq!(total, 2 * a + 6 * a + a);
    }
}
