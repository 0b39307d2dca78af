//! The CPU reference executor: the oracle every GPU executor is checked against.
//!
//! Owns: host copies of every region of the plan, allocated once in [`CpuExecutor::new`] at
//! exactly `plan.region_bytes` each, and the reference semantics of every [`Kernel`].
//! Never: allocates a region after `new`, computes an address, or looks a buffer up by name
//! while running. Every operand is addressed only through its launch record's
//! `(region, offset, bytes)`, so a plan that overlaps two live buffers of different launches
//! corrupts the output here exactly as it would on a GPU; one that aliases a launch's output
//! with another of its operands (benign here, a race on a GPU) is refused. That is what makes
//! this executor a test of the plan.
//!
//! It trusts the plan's layout (proving it is `plan::check`'s job) but not blindly: every
//! operand is bounds-checked against its region, its byte length against the kernel's
//! parameters, and data-dependent rows (KV rows) against the cache; a violation is an
//! `Err` naming the launch, never a panic and never an access outside the operand.
//!
//! Numerics (the reference the CUDA kernels match):
//! - elements are read from their storage dtype (f32/f16/bf16 little-endian, i32/u32),
//!   all math is f32, and each result is rounded once to the destination dtype on store;
//! - reductions (dot products, sums of squares, softmax sums) accumulate sequentially in
//!   index order;
//! - RMSNorm follows Hugging Face: `inv = 1 / sqrt(sum(x^2) / dim + eps)`,
//!   `t = round(x * inv)` to the storage dtype of `x`, then `out = round(t * w)`. The
//!   intermediate rounding is a no-op for f32 and reproduces the rounding of `LlamaRMSNorm`'s
//!   `weight * x.to(input_dtype)` for bf16/f16; it is the same rule for every dtype;
//! - a norm fused into a linear (`FusedLinear`, `QkvLinear`, `QkvRope`, `QkvAttention`, `GatedLinear`) is the
//!   RMSNorm above for f16 x, and for f32 / bf16 x the same function with one rounding moved
//!   ([`NormOrder`]): `h = round(x * w)`, then each dot product of h times `inv`;
//! - RoPE angles are `scaled_position(p) * inv_freq(i)` in f32; their cosine and sine are
//!   taken in f64 and rounded to f32, so results do not depend on the platform's f32 libm;
//! - attention: scores `scale * q.k` in f32, softmax with the max subtracted, then
//!   `out = sum_j (e_j / sum) * v_j` in key order.
//!
//! Allocation while running: kernel math uses scratch vectors owned by the executor, which
//! grow to their largest use during the first step and are reused afterwards
//! (`sampling::sample_row` keeps a candidate list of its own).

use super::sampling::{argmax_key, argmax_key_token, is_greedy, sample_row};
use super::weights::fill_weight_region;
use super::{Executor, StepBlock};
use crate::ir::{DType, NormOrder, Phase, RopeSpec, RopeStyle};
use crate::lower::names;
use crate::model::WeightSource;
use crate::plan::{Access, BufArg, Kernel, Launch, Plan, RegionKind, N_REGIONS};
use anyhow::{bail, ensure, Context, Result};
use half::{bf16, f16};

/// Executes a plan's programs on host memory laid out exactly as the plan says.
pub struct CpuExecutor {
    plan: Plan,
    /// Host image of each region, indexed by `RegionKind::index()`.
    regions: [Vec<u8>; N_REGIONS],
    scratch: Scratch,
}

/// Reusable f32/i32 working storage of the kernels (see the module doc on allocation).
#[derive(Default)]
struct Scratch {
    /// The launch's result before it is rounded and stored.
    out: Vec<f32>,
    /// Decoded inputs: first operand, second operand, one row of something.
    a: Vec<f32>,
    b: Vec<f32>,
    row: Vec<f32>,
    /// Decoded integer inputs (positions, cache bases) and integer results (tokens).
    ints_a: Vec<i32>,
    ints_b: Vec<i32>,
    /// Weight-region spans (offset, bytes) of tile-packed twins (`lower::tiles`).
    tiled: Vec<(u64, u64)>,
}

impl Scratch {
    /// Whether operand `b` is (starts in) a tile-packed weight.
    fn tiled(&self, b: &BufArg) -> bool {
        b.region == RegionKind::Weights && self.tiled.iter().any(|&(o, n)| b.offset >= o && b.offset < o + n)
    }
}

impl CpuExecutor {
    /// Allocates every region at its planned size (zeroed) and converts the weights into the
    /// weight region at their planned offsets.
    pub fn new(plan: Plan, weights: &dyn WeightSource) -> Result<CpuExecutor> {
        let mut sizes = [0usize; N_REGIONS];
        for r in RegionKind::ALL {
            let bytes = plan.region_bytes[r.index()];
            sizes[r.index()] = usize::try_from(bytes)
                .with_context(|| format!("region {} needs {bytes} bytes, more than this host can address", r.name()))?;
        }
        let mut regions = sizes.map(|n| vec![0u8; n]);
        fill_weight_region(&plan, weights, &mut regions[RegionKind::Weights.index()])
            .with_context(|| format!("loading weights from {} for the CPU executor", weights.describe()))?;
        let tiled = plan
            .tensors
            .iter()
            .filter(|t| t.region == RegionKind::Weights && t.layout == crate::plan::Layout::GemvTiles)
            .map(|t| (t.offset, t.bytes))
            .collect();
        Ok(CpuExecutor { plan, regions, scratch: Scratch { tiled, ..Scratch::default() } })
    }

    /// Host image of region `r`, for comparing against a device launch by launch.
    pub fn region(&self, r: RegionKind) -> &[u8] {
        &self.regions[r.index()]
    }

    /// Runs launch `launch` of program `program` alone, on the regions as they are now.
    pub fn run_launch(&mut self, program: usize, launch: usize) -> Result<()> {
        let p = self
            .plan
            .programs
            .get(program)
            .with_context(|| format!("program {program} does not exist (the plan has {})", self.plan.programs.len()))?;
        let l = p
            .launches
            .get(launch)
            .with_context(|| format!("program {} has no launch {launch} ({} launches)", p.label(), p.launches.len()))?;
        execute(&mut self.regions, &mut self.scratch, l)
            .with_context(|| format!("launch {launch} `{}` ({}) of program {}", l.name, l.kernel.name(), p.label()))
    }
}

impl Executor for CpuExecutor {
    fn plan(&self) -> &Plan {
        &self.plan
    }

    fn run(&mut self, program: usize, step: &StepBlock) -> Result<()> {
        let n = self
            .plan
            .programs
            .get(program)
            .map(|p| p.launches.len())
            .with_context(|| format!("program {program} does not exist (the plan has {})", self.plan.programs.len()))?;
        let dst = &mut self.regions[RegionKind::Step.index()];
        ensure!(
            step.bytes.len() == dst.len(),
            "step block holds {} bytes but the plan's step region is {} bytes; build it with StepBlock::new(plan)",
            step.bytes.len(),
            dst.len()
        );
        dst.copy_from_slice(&step.bytes);
        if self.plan.programs[program].phase != Phase::DecodeLoop {
            for i in 0..n {
                self.run_launch(program, i)?;
            }
            return Ok(());
        }
        // A device loop: the body repeats until `advance` sets the done flag (word 2 of the
        // loop control), exactly as the GPU's conditional WHILE node does, checked after each
        // pass (all of an unrolled body's copies run). A budget of 0 runs nothing.
        let control = self.plan.tensor(names::LOOP_CONTROL).context("a loop program without loop control")?.offset as usize;
        let word = |regions: &[Vec<u8>; N_REGIONS], i: usize| -> u32 {
            let o = control + 4 * i;
            let b = &regions[RegionKind::Step.index()][o..o + 4];
            u32::from_le_bytes([b[0], b[1], b[2], b[3]])
        };
        let budget = word(&self.regions, 0);
        if budget == 0 {
            return Ok(());
        }
        // An unrolled body runs whole only for a budget that is a multiple of its copies; else
        // the first copy per pass (`ProgramPlan::loop_launches`), as the GPU executor does.
        let n = self.plan.programs[program].loop_launches(budget);
        while word(&self.regions, 2) == 0 {
            for i in 0..n {
                self.run_launch(program, i)?;
            }
        }
        Ok(())
    }

    fn read_tensor(&mut self, name: &str, bytes: usize) -> Result<Vec<u8>> {
        let t = self.plan.tensor(name).with_context(|| format!("the plan has no tensor `{name}`"))?;
        ensure!(bytes as u64 <= t.bytes, "asked for {bytes} bytes of `{name}`, which holds {} bytes", t.bytes);
        let o = t.offset as usize;
        let region = &self.regions[t.region.index()];
        let data = region.get(o..o + bytes).with_context(|| format!("`{name}` lies outside region {}", t.region.name()))?;
        Ok(data.to_vec())
    }

    fn name(&self) -> &'static str {
        "cpu"
    }
}

// ---------------------------------------------------------------------------------------------
// Element access. Everything goes through a `BufArg`'s byte range.

/// The bytes of operand `b`, bounds-checked against its region.
fn operand<'a>(regions: &'a [Vec<u8>; N_REGIONS], b: &BufArg) -> Result<&'a [u8]> {
    let (start, end) = byte_range(regions, b)?;
    Ok(&regions[b.region.index()][start..end])
}

fn operand_mut<'a>(regions: &'a mut [Vec<u8>; N_REGIONS], b: &BufArg) -> Result<&'a mut [u8]> {
    let (start, end) = byte_range(regions, b)?;
    Ok(&mut regions[b.region.index()][start..end])
}

fn byte_range(regions: &[Vec<u8>; N_REGIONS], b: &BufArg) -> Result<(usize, usize)> {
    let len = regions[b.region.index()].len() as u64;
    match b.offset.checked_add(b.bytes) {
        Some(end) if end <= len => Ok((b.offset as usize, end as usize)),
        _ => bail!("operand {}+{} ({} bytes) lies outside region {} ({len} bytes)", b.region.name(), b.offset, b.bytes, b.region.name()),
    }
}

/// Element `i` of float data `bytes` stored as `dtype`, as f32.
#[inline]
fn load(bytes: &[u8], dtype: DType, i: usize) -> f32 {
    match dtype {
        DType::F32 => f32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap()),
        DType::F16 => f16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]).to_f32(),
        DType::BF16 => bf16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]).to_f32(),
        // Operand dtypes are checked before any kernel reads them.
        DType::I32 | DType::U32 => unreachable!("integer operand read as float"),
    }
}

/// Decodes elements `[start, start + dst.len())` of float data into `dst`.
fn load_into(bytes: &[u8], dtype: DType, start: usize, dst: &mut [f32]) {
    match dtype {
        DType::F32 => {
            let src = &bytes[4 * start..4 * (start + dst.len())];
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(4)) {
                *d = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
            }
        }
        _ => {
            for (k, d) in dst.iter_mut().enumerate() {
                *d = load(bytes, dtype, start + k);
            }
        }
    }
}

/// Decodes all of float data `bytes` into `dst` (cleared first).
fn load_all(bytes: &[u8], dtype: DType, dst: &mut Vec<f32>) {
    dst.clear();
    dst.resize(bytes.len() / dtype.size(), 0.0);
    load_into(bytes, dtype, 0, dst);
}

/// Decodes i32 (or u32, bit for bit) data into `dst` (cleared first).
fn load_ints(bytes: &[u8], dst: &mut Vec<i32>) {
    dst.clear();
    dst.extend(bytes.chunks_exact(4).map(|s| i32::from_le_bytes([s[0], s[1], s[2], s[3]])));
}

/// Rounds `x` to `dtype` and back: what storing and reloading it would give.
#[inline]
fn round_to(dtype: DType, x: f32) -> f32 {
    match dtype {
        DType::F16 => f16::from_f32(x).to_f32(),
        DType::BF16 => bf16::from_f32(x).to_f32(),
        DType::F32 | DType::I32 | DType::U32 => x,
    }
}

/// Stores `vals` as `dtype` (round to nearest even) into `dst`, starting at element `start`.
fn store_into(dst: &mut [u8], dtype: DType, start: usize, vals: &[f32]) {
    match dtype {
        DType::F32 => {
            let d = &mut dst[4 * start..4 * (start + vals.len())];
            for (c, v) in d.chunks_exact_mut(4).zip(vals) {
                c.copy_from_slice(&v.to_le_bytes());
            }
        }
        DType::F16 => {
            let d = &mut dst[2 * start..2 * (start + vals.len())];
            for (c, v) in d.chunks_exact_mut(2).zip(vals) {
                c.copy_from_slice(&f16::from_f32(*v).to_le_bytes());
            }
        }
        DType::BF16 => {
            let d = &mut dst[2 * start..2 * (start + vals.len())];
            for (c, v) in d.chunks_exact_mut(2).zip(vals) {
                c.copy_from_slice(&bf16::from_f32(*v).to_le_bytes());
            }
        }
        DType::I32 | DType::U32 => unreachable!("float result stored into an integer operand"),
    }
}

/// Stores a whole float result into operand `b` (whose length was checked to match).
fn store(regions: &mut [Vec<u8>; N_REGIONS], b: &BufArg, vals: &[f32]) -> Result<()> {
    let dst = operand_mut(regions, b)?;
    debug_assert_eq!(dst.len(), vals.len() * b.dtype.size());
    store_into(dst, b.dtype, 0, vals);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Operand checks: arity, access, dtype and exact length, against the kernel's parameters.

/// Checks that `launch` has `reads` read operands followed by `writes` write operands, and
/// that no written operand shares a byte with another operand.
///
/// The overlap check is here because this executor reads all inputs before it stores the
/// result, so an output aliased onto its own input would compute correctly on the CPU while
/// a GPU kernel races on it: the one planner bug the CPU numerics could not otherwise see.
fn arity(launch: &Launch, reads: usize, writes: usize) -> Result<&[BufArg]> {
    let bufs = &launch.bufs;
    ensure!(
        bufs.len() == reads + writes,
        "{} takes {} operands ({reads} read, {writes} written), the launch has {}",
        launch.kernel.name(),
        reads + writes,
        bufs.len()
    );
    for (j, b) in bufs.iter().enumerate() {
        let want = if j < reads { Access::Read } else { Access::Write };
        ensure!(b.access == want, "operand {j} should be {want:?} but is {:?}", b.access);
    }
    for (j, w) in bufs.iter().enumerate().skip(reads) {
        for (k, o) in bufs.iter().enumerate() {
            let shared = k != j
                && w.region == o.region
                && w.offset < o.offset.saturating_add(o.bytes)
                && o.offset < w.offset.saturating_add(w.bytes);
            ensure!(
                !shared,
                "written operand {j} ({}+{}, {} bytes) overlaps operand {k} ({}+{}, {} bytes): the plan aliases this launch's output with another of its operands",
                w.region.name(),
                w.offset,
                w.bytes,
                o.region.name(),
                o.offset,
                o.bytes
            );
        }
    }
    Ok(bufs)
}

/// A float operand of exactly `elems` elements.
fn float_operand(b: &BufArg, what: &str, elems: usize) -> Result<()> {
    ensure!(b.dtype.is_float(), "operand `{what}` must be a float type, is {}", b.dtype);
    sized(b, what, elems)
}

/// An operand of dtype `dtype` and exactly `elems` elements.
fn typed_operand(b: &BufArg, what: &str, dtype: DType, elems: usize) -> Result<()> {
    ensure!(b.dtype == dtype, "operand `{what}` must be {dtype}, is {}", b.dtype);
    sized(b, what, elems)
}

fn sized(b: &BufArg, what: &str, elems: usize) -> Result<()> {
    let want = elems as u64 * b.dtype.size() as u64;
    ensure!(b.bytes == want, "operand `{what}` is {} bytes; the kernel's parameters need {elems} x {} = {want}", b.bytes, b.dtype);
    Ok(())
}

/// First KV row of token `t` (`cache_base`) checked to hold `pos + 1` rows of a
/// `kv_rows`-row cache.
fn kv_span(t: usize, pos: i32, cache_base: i32, kv_rows: u32) -> Result<usize> {
    let last = cache_base as i64 + pos as i64;
    ensure!(
        cache_base >= 0 && last < kv_rows as i64,
        "token {t} at position {pos} with cache_base {cache_base} addresses KV row {last}, outside the cache's {kv_rows} rows (0..{kv_rows})",
    );
    Ok(cache_base as usize)
}

/// The operands of an attention launch (q, k_cache, v_cache, positions, cache_base, then the one
/// operand it writes), checked, with q, the positions and the cache bases loaded into `s.a`,
/// `s.ints_a` and `s.ints_b`. The caller checks the written operand.
#[allow(clippy::too_many_arguments)]
fn attention_inputs<'l>(
    regions: &[Vec<u8>; N_REGIONS],
    s: &mut Scratch,
    launch: &'l Launch,
    rows: usize,
    heads: usize,
    kv_heads: usize,
    hd: usize,
    kv_rows: u32,
) -> Result<&'l [BufArg]> {
    let bufs = arity(launch, 5, 1)?;
    let [q, k_cache, v_cache, positions, cache_base, _] = bufs else { unreachable!() };
    ensure!(kv_heads > 0 && heads.is_multiple_of(kv_heads), "{heads} heads are not a multiple of {kv_heads} kv heads");
    let (qw, kvw) = (heads * hd, kv_heads * hd);
    float_operand(q, "q", rows * qw)?;
    float_operand(k_cache, "k_cache", kv_rows as usize * kvw)?;
    float_operand(v_cache, "v_cache", kv_rows as usize * kvw)?;
    typed_operand(positions, "positions", DType::I32, rows)?;
    typed_operand(cache_base, "cache_base", DType::I32, rows)?;
    load_all(operand(regions, q)?, q.dtype, &mut s.a);
    load_ints(operand(regions, positions)?, &mut s.ints_a);
    load_ints(operand(regions, cache_base)?, &mut s.ints_b);
    Ok(bufs)
}

// ---------------------------------------------------------------------------------------------
// Kernels.

fn execute(regions: &mut [Vec<u8>; N_REGIONS], s: &mut Scratch, launch: &Launch) -> Result<()> {
    match launch.kernel {
        Kernel::Gather { rows, dim, table_rows, .. } => {
            let (rows, dim, table_rows) = (rows as usize, dim as usize, table_rows as usize);
            let [table, indices, out] = arity(launch, 2, 1)? else { unreachable!() };
            float_operand(table, "table", table_rows * dim)?;
            typed_operand(indices, "indices", DType::I32, rows)?;
            float_operand(out, "out", rows * dim)?;
            let tb = operand(regions, table)?;
            load_ints(operand(regions, indices)?, &mut s.ints_a);
            s.out.clear();
            s.out.resize(rows * dim, 0.0);
            for (r, &i) in s.ints_a.iter().enumerate() {
                // An index outside the table gives a zero row (the Op's contract).
                if i >= 0 && (i as usize) < table_rows {
                    load_into(tb, table.dtype, i as usize * dim, &mut s.out[r * dim..(r + 1) * dim]);
                }
            }
            store(regions, out, &s.out)
        }
        Kernel::RmsNorm { rows, dim, eps, .. } => {
            let (rows, dim) = (rows as usize, dim as usize);
            let [x, weight, out] = arity(launch, 2, 1)? else { unreachable!() };
            float_operand(x, "x", rows * dim)?;
            float_operand(weight, "weight", dim)?;
            float_operand(out, "out", rows * dim)?;
            load_all(operand(regions, x)?, x.dtype, &mut s.a);
            load_all(operand(regions, weight)?, weight.dtype, &mut s.b);
            s.out.clear();
            s.out.resize(rows * dim, 0.0);
            rms_norm_rows(&s.a, &s.b, &mut s.out, dim, eps, x.dtype);
            store(regions, out, &s.out)
        }
        Kernel::AddRmsNorm { rows, dim, eps } => {
            let (rows, dim) = (rows as usize, dim as usize);
            let [a, b, weight, sum, out] = arity(launch, 3, 2)? else { unreachable!() };
            float_operand(a, "a", rows * dim)?;
            float_operand(b, "b", rows * dim)?;
            float_operand(weight, "weight", dim)?;
            float_operand(sum, "sum", rows * dim)?;
            float_operand(out, "out", rows * dim)?;
            load_all(operand(regions, a)?, a.dtype, &mut s.a);
            load_all(operand(regions, b)?, b.dtype, &mut s.b);
            // The sum as `Add` stores it; the norm reads it back rounded, as `RmsNorm` would.
            for (x, y) in s.a.iter_mut().zip(&s.b) {
                *x = round_to(sum.dtype, *x + y);
            }
            store(regions, sum, &s.a)?;
            load_all(operand(regions, weight)?, weight.dtype, &mut s.b);
            s.out.clear();
            s.out.resize(rows * dim, 0.0);
            rms_norm_rows(&s.a, &s.b, &mut s.out, dim, eps, sum.dtype);
            store(regions, out, &s.out)
        }
        Kernel::HeadRmsNorm { rows, heads, head_dim, eps } => {
            let (rows, heads, head_dim) = (rows as usize, heads as usize, head_dim as usize);
            let [x, weight, out] = arity(launch, 2, 1)? else { unreachable!() };
            float_operand(x, "x", rows * heads * head_dim)?;
            float_operand(weight, "weight", head_dim)?;
            float_operand(out, "out", rows * heads * head_dim)?;
            load_all(operand(regions, x)?, x.dtype, &mut s.a);
            load_all(operand(regions, weight)?, weight.dtype, &mut s.b);
            s.out.clear();
            s.out.resize(rows * heads * head_dim, 0.0);
            // Each head of each row is one "row" of length head_dim.
            rms_norm_rows(&s.a, &s.b, &mut s.out, head_dim, eps, x.dtype);
            store(regions, out, &s.out)
        }
        // A GEMM is a linear with a scratch workspace (the last operand) the CPU does not need.
        // An argmax linear's key (the last operand) takes each row's largest `argmax_key`.
        // A `NormedLinear` (`stats`) reads its `sumsq` operand after x and scales each row's sums.
        Kernel::Linear { rows, in_features, out_features, bias, .. } | Kernel::Gemm { rows, in_features, out_features, bias } => {
            let (rows, k, n) = (rows as usize, in_features as usize, out_features as usize);
            let gemm = launch.kernel.is_library();
            let key = matches!(launch.kernel, Kernel::Linear { argmax: true, .. });
            let stats = match launch.kernel {
                Kernel::Linear { stats, .. } => stats,
                _ => None,
            };
            let bufs = arity(launch, 2 + bias as usize + stats.is_some() as usize, 1 + gemm as usize + key as usize)?;
            let key_b = if key { Some(&bufs[bufs.len() - 1]) } else { None };
            let bufs = &bufs[..bufs.len() - gemm as usize - key as usize];
            let w_at = 1 + stats.is_some() as usize;
            let (x, weight, out) = (&bufs[0], &bufs[w_at], &bufs[bufs.len() - 1]);
            float_operand(x, "x", rows * k)?;
            float_operand(weight, "weight", n * k)?;
            float_operand(out, "out", rows * n)?;
            if bias {
                float_operand(&bufs[w_at + 1], "bias", n)?;
                load_all(operand(regions, &bufs[w_at + 1])?, bufs[w_at + 1].dtype, &mut s.b);
            }
            // Each row's inverse RMS (only for a `stats` linear; empty otherwise).
            let mut scale = Vec::new();
            if let Some(eps) = stats {
                ensure!(k % 8 == 0, "normed linear: {k} input features are not whole 8-feature groups");
                typed_operand(&bufs[1], "sumsq", DType::F32, rows * (k / 8))?;
                let mut sums = Vec::new();
                load_all(operand(regions, &bufs[1])?, DType::F32, &mut sums);
                scale = sums.chunks_exact(k / 8).map(|row| crate::ir::stats_inv(row, k, eps)).collect();
            }
            load_all(operand(regions, x)?, x.dtype, &mut s.a);
            let wb = operand(regions, weight)?;
            s.out.clear();
            s.out.resize(rows * n, 0.0);
            let tiled = s.tiled(weight);
            let (bias_v, out_v) = (&s.b, &mut s.out);
            gemv_each(&s.a, wb, weight.dtype, tiled, k, n, rows, &mut s.row, |r, col, acc| {
                let acc = if stats.is_some() { acc * scale[r] } else { acc };
                out_v[r * n + col] = if bias { acc + bias_v[col] } else { acc };
            });
            store(regions, out, &s.out)?;
            if let Some(kb) = key_b {
                typed_operand(out, "logits", DType::F32, rows * n)?;
                typed_operand(kb, "argmax key", DType::U32, rows * 2)?;
                // The logits as stored (f32: exactly `s.out`).
                let keys: Vec<u64> = (0..rows).map(|r| (0..n).map(|i| argmax_key(s.out[r * n + i], i as u32)).max().unwrap_or(0)).collect();
                let dst = operand_mut(regions, kb)?;
                for (c, k) in dst.chunks_exact_mut(8).zip(keys) {
                    let old = u64::from_le_bytes(c[..8].try_into().expect("8 bytes"));
                    c.copy_from_slice(&old.max(k).to_le_bytes());
                }
            }
            Ok(())
        }
        // The prefetch operand (`l2_prefetch` > 0) is a hint for the GPU's L2: nothing reads it here.
        // With `out_norm`, the stored output then gives the next norm's operands (`ir::OutNorm`).
        Kernel::FusedLinear { rows, in_features, out_features, norm, eps, bias, residual, l2_prefetch, out_norm } => {
            let (rows, k, n) = (rows as usize, in_features as usize, out_features as usize);
            let reads = 2 + norm as usize + bias as usize + residual as usize + out_norm as usize + (l2_prefetch > 0) as usize;
            let bufs = arity(launch, reads, 1 + out_norm as usize)?;
            let mut next = bufs.iter();
            let x = next.next().expect("arity checked");
            let norm_w = if norm { next.next() } else { None };
            let weight = next.next().expect("arity checked");
            let bias_b = if bias { next.next() } else { None };
            let residual_b = if residual { next.next() } else { None };
            let out_norm_w = if out_norm { next.next() } else { None };
            let out = &bufs[reads];
            float_operand(x, "x", rows * k)?;
            float_operand(weight, "weight", n * k)?;
            float_operand(out, "out", rows * n)?;
            let scale = load_linear_input(regions, s, x, norm_w, rows, k, eps)?;
            let bias_v = match bias_b {
                Some(b) => {
                    float_operand(b, "bias", n)?;
                    let mut v = Vec::new();
                    load_all(operand(regions, b)?, b.dtype, &mut v);
                    v
                }
                None => Vec::new(),
            };
            let residual_v = match residual_b {
                Some(b) => {
                    float_operand(b, "residual", rows * n)?;
                    let mut v = Vec::new();
                    load_all(operand(regions, b)?, b.dtype, &mut v);
                    v
                }
                None => Vec::new(),
            };
            let wb = operand(regions, weight)?;
            s.out.clear();
            s.out.resize(rows * n, 0.0);
            let tiled = s.tiled(weight);
            let out_v = &mut s.out;
            gemv_each(&s.a, wb, weight.dtype, tiled, k, n, rows, &mut s.row, |r, col, acc| {
                let acc = acc * scale[r];
                let acc = if bias { acc + bias_v[col] } else { acc };
                out_v[r * n + col] = if residual { residual_v[r * n + col] + round_to(out.dtype, acc) } else { acc };
            });
            match out_norm_w {
                Some(w) => store_out_norm(regions, &s.out, w, [out, &bufs[reads + 1]], rows, n),
                None => store(regions, out, &s.out),
            }
        }
        // Three `FusedLinear`s (no residual) over one normed x.
        Kernel::QkvLinear { rows, in_features, out_features, norm, eps, bias } => {
            let (rows, k) = (rows as usize, in_features as usize);
            let bufs = arity(launch, 4 + norm as usize + 3 * bias as usize, 3)?;
            let x = &bufs[0];
            float_operand(x, "x", rows * k)?;
            let scale = load_linear_input(regions, s, x, norm.then(|| &bufs[1]), rows, k, eps)?;
            let w0 = 1 + norm as usize;
            for i in 0..3 {
                let n = out_features[i] as usize;
                let (weight, out) = (&bufs[w0 + i], &bufs[bufs.len() - 3 + i]);
                float_operand(weight, "weight", n * k)?;
                float_operand(out, "out", rows * n)?;
                let bias_v = if bias {
                    let b = &bufs[w0 + 3 + i];
                    float_operand(b, "bias", n)?;
                    let mut v = Vec::new();
                    load_all(operand(regions, b)?, b.dtype, &mut v);
                    v
                } else {
                    Vec::new()
                };
                let wb = operand(regions, weight)?;
                s.out.clear();
                s.out.resize(rows * n, 0.0);
                let tiled = s.tiled(weight);
                let out_v = &mut s.out;
                gemv_each(&s.a, wb, weight.dtype, tiled, k, n, rows, &mut s.row, |r, col, acc| {
                    let acc = acc * scale[r];
                    out_v[r * n + col] = if bias { acc + bias_v[col] } else { acc };
                });
                store(regions, out, &s.out)?;
            }
            Ok(())
        }
        // The packed QKV's projections (FusedLinear's arithmetic over the three weights as one
        // matrix), rounded as it stores them, then RopeKvWrite's rotation and KV write.
        Kernel::QkvRope { rows, in_features, heads, kv_heads, head_dim, kv_rows, norm, eps, bias, rope, .. } => {
            let bufs = arity(launch, 4 + norm as usize + bias as usize, 3)?;
            let n = bufs.len();
            let (q_out, k_cache, v_cache) = (&bufs[n - 3], &bufs[n - 2], &bufs[n - 1]);
            let shape = QkvShape { rows: rows as usize, k: in_features as usize, heads, kv_heads, head_dim, kv_rows, norm, eps, bias };
            float_operand(q_out, "q_out", shape.rows * shape.qw())?;
            let parts = qkv_rope_parts(regions, s, &bufs[..n - 3], [k_cache, v_cache], shape, &rope, q_out.dtype)?;
            let step = (&s.ints_a[..shape.rows], &s.ints_b[..]);
            rope_write_kv(regions, &rope, head_dim as usize, parts, q_out.dtype, step, (Some(q_out), [k_cache, v_cache]))?;
            Ok(())
        }
        // QkvRope's arithmetic, its q rounded to the caches' dtype as QkvRope stores it, then
        // AttentionCluster's over that q: bit for bit the two launches.
        Kernel::QkvAttention {
            in_features,
            heads,
            kv_heads,
            head_dim,
            kv_rows,
            norm,
            eps,
            bias,
            rope,
            scale,
            split_len,
            min_split_len,
            ..
        } => {
            let bufs = arity(launch, 4 + norm as usize + bias as usize, 3)?;
            let n = bufs.len();
            let (k_cache, v_cache, out) = (&bufs[n - 3], &bufs[n - 2], &bufs[n - 1]);
            let shape = QkvShape { rows: 1, k: in_features as usize, heads, kv_heads, head_dim, kv_rows, norm, eps, bias };
            float_operand(out, "out", shape.qw())?;
            let dt = k_cache.dtype;
            let parts = qkv_rope_parts(regions, s, &bufs[..n - 3], [k_cache, v_cache], shape, &rope, dt)?;
            let step = (&s.ints_a[..1], &s.ints_b[..]);
            let q = rope_write_kv(regions, &rope, head_dim as usize, parts, dt, step, (None, [k_cache, v_cache]))?;
            s.a.clear();
            s.a.extend(q.iter().map(|&x| round_to(dt, x)));
            let c = ClusterAttention { rows: 1, heads, kv_heads, head_dim, scale, kv_rows, split_len, min_split_len };
            cluster_attention(regions, s, c, k_cache, v_cache, out)
        }
        Kernel::GatedLinear { rows, in_features, out_features, norm, eps } => {
            let (rows, k, n) = (rows as usize, in_features as usize, out_features as usize);
            let bufs = arity(launch, 3 + norm as usize, 1)?;
            let x = &bufs[0];
            let (gate, up, out) = (&bufs[1 + norm as usize], &bufs[2 + norm as usize], &bufs[3 + norm as usize]);
            float_operand(x, "x", rows * k)?;
            float_operand(gate, "gate", n * k)?;
            float_operand(up, "up", n * k)?;
            float_operand(out, "out", rows * n)?;
            let scale = load_linear_input(regions, s, x, norm.then(|| &bufs[1]), rows, k, eps)?;
            let (gb, ub) = (operand(regions, gate)?, operand(regions, up)?);
            s.out.clear();
            s.out.resize(rows * n, 0.0);
            let mut grow = vec![0.0f32; k];
            s.row.clear();
            s.row.resize(k, 0.0);
            let (gt, ut) = (s.tiled(gate), s.tiled(up));
            for col in 0..n {
                load_row(gb, gate.dtype, gt, col, k, &mut grow);
                load_row(ub, up.dtype, ut, col, k, &mut s.row);
                for (r, &c) in scale.iter().enumerate() {
                    let (mut ag, mut au) = (0.0f32, 0.0f32);
                    for ((xv, gv), uv) in s.a[r * k..(r + 1) * k].iter().zip(&grow).zip(&s.row) {
                        ag += xv * gv;
                        au += xv * uv;
                    }
                    let (g, u) = (round_to(out.dtype, ag * c), round_to(out.dtype, au * c));
                    s.out[r * n + col] = g / (1.0 + (-g).exp()) * u;
                }
            }
            store(regions, out, &s.out)
        }
        Kernel::Rope { rows, heads, head_dim, rope } => {
            let (rows, heads, head_dim) = (rows as usize, heads as usize, head_dim as usize);
            let [x, positions, out] = arity(launch, 2, 1)? else { unreachable!() };
            let width = heads * head_dim;
            float_operand(x, "x", rows * width)?;
            typed_operand(positions, "positions", DType::I32, rows)?;
            float_operand(out, "out", rows * width)?;
            let rotary = rope.rotary_dim as usize;
            ensure!(rotary.is_multiple_of(2) && rotary <= head_dim, "rotary_dim {rotary} must be even and at most head_dim {head_dim}");
            load_all(operand(regions, x)?, x.dtype, &mut s.a);
            load_ints(operand(regions, positions)?, &mut s.ints_a);
            s.b.clear();
            s.b.extend((0..rotary / 2).map(|i| rope.inv_freq(i)));
            s.out.clear();
            s.out.extend_from_slice(&s.a);
            rotate_rows(&mut s.out, width, head_dim, &s.b, &rope, &s.ints_a);
            store(regions, out, &s.out)
        }
        Kernel::KvWrite { rows, kv_dim, kv_rows } => {
            let (rows, kv_dim) = (rows as usize, kv_dim as usize);
            let [k, v, positions, cache_base, k_cache, v_cache] = arity(launch, 4, 2)? else { unreachable!() };
            float_operand(k, "k", rows * kv_dim)?;
            float_operand(v, "v", rows * kv_dim)?;
            typed_operand(positions, "positions", DType::I32, rows)?;
            typed_operand(cache_base, "cache_base", DType::I32, rows)?;
            float_operand(k_cache, "k_cache", kv_rows as usize * kv_dim)?;
            float_operand(v_cache, "v_cache", kv_rows as usize * kv_dim)?;
            load_all(operand(regions, k)?, k.dtype, &mut s.a);
            load_all(operand(regions, v)?, v.dtype, &mut s.b);
            load_ints(operand(regions, positions)?, &mut s.ints_a);
            load_ints(operand(regions, cache_base)?, &mut s.ints_b);
            // Check every row first, so a bad step writes nothing.
            check_kv_rows(&s.ints_a[..rows], &s.ints_b, kv_rows)?;
            write_kv_rows(regions, [(k_cache, &s.a), (v_cache, &s.b)], &s.ints_a[..rows], &s.ints_b, kv_dim)
        }
        // `Rope` of q and of k, then `KvWrite` of the rotated k (rounded to storage, as `Rope` stores it).
        Kernel::RopeKvWrite { rows, heads, kv_heads, head_dim, kv_rows, rope, packed } => {
            let (rows, hd) = (rows as usize, head_dim as usize);
            let (qw, kvw) = (heads as usize * hd, kv_heads as usize * hd);
            let bufs = arity(launch, if packed { 3 } else { 5 }, 3)?;
            let (inputs, rest) = bufs.split_at(bufs.len() - 5);
            let [positions, cache_base, q_out, k_cache, v_cache] = rest else { unreachable!("arity checked") };
            typed_operand(positions, "positions", DType::I32, rows)?;
            typed_operand(cache_base, "cache_base", DType::I32, rows)?;
            float_operand(q_out, "q_out", rows * qw)?;
            float_operand(k_cache, "k_cache", kv_rows as usize * kvw)?;
            float_operand(v_cache, "v_cache", kv_rows as usize * kvw)?;
            let rotary = rope.rotary_dim as usize;
            ensure!(rotary.is_multiple_of(2) && rotary <= hd, "rotary_dim {rotary} must be even and at most head_dim {hd}");
            load_ints(operand(regions, positions)?, &mut s.ints_a);
            load_ints(operand(regions, cache_base)?, &mut s.ints_b);
            check_kv_rows(&s.ints_a[..rows], &s.ints_b, kv_rows)?;
            // q, k, v: three operands, or column ranges of one packed qkv (rows q | k | v), which
            // is decoded once into s.row. q into s.a (rotated, stored), then k into s.a, v into s.out.
            let w = qw + 2 * kvw;
            if let [qkv] = inputs {
                float_operand(qkv, "qkv", rows * w)?;
                load_all(operand(regions, qkv)?, qkv.dtype, &mut s.row);
            } else {
                for (x, what, n) in [(&inputs[0], "q", qw), (&inputs[1], "k", kvw), (&inputs[2], "v", kvw)] {
                    float_operand(x, what, rows * n)?;
                }
            }
            let mut parts: [Vec<f32>; 3] = Default::default();
            for (i, (lo, n)) in [(0, qw), (qw, kvw), (qw + kvw, kvw)].into_iter().enumerate() {
                qkv_part(regions, inputs, &s.row, rows, w, (i, lo, n), &mut parts[i])?;
            }
            let kv_dtype = inputs[if packed { 0 } else { 1 }].dtype;
            let step = (&s.ints_a[..rows], &s.ints_b[..]);
            rope_write_kv(regions, &rope, hd, parts, kv_dtype, step, (Some(q_out), [k_cache, v_cache]))?;
            Ok(())
        }
        // The tensor-core prefill kernel has the semantics of `Attention`.
        Kernel::Attention { rows, heads, kv_heads, head_dim, scale, kv_rows }
        | Kernel::AttentionPrefill { rows, heads, kv_heads, head_dim, scale, kv_rows } => {
            let (rows, heads, kv_heads, hd) = (rows as usize, heads as usize, kv_heads as usize, head_dim as usize);
            let [_, k_cache, v_cache, _, _, out] = attention_inputs(regions, s, launch, rows, heads, kv_heads, hd, kv_rows)? else {
                unreachable!()
            };
            let (qw, kvw) = (heads * hd, kv_heads * hd);
            float_operand(out, "out", rows * qw)?;
            let group = heads / kv_heads;
            let (kb, vb) = (operand(regions, k_cache)?, operand(regions, v_cache)?);
            s.out.clear();
            s.out.resize(rows * qw, 0.0);
            s.row.clear();
            s.row.resize(hd, 0.0);
            for t in 0..rows {
                let pos = s.ints_a[t];
                if pos < 0 {
                    continue; // padding attends to nothing: a zero row
                }
                let base = kv_span(t, pos, s.ints_b[t], kv_rows)?;
                let n_keys = pos as usize + 1;
                for h in 0..heads {
                    let g = h / group;
                    let qh = &s.a[t * qw + h * hd..t * qw + (h + 1) * hd];
                    // Scores, then a max-subtracted softmax, all f32.
                    s.b.clear();
                    let mut max = f32::NEG_INFINITY;
                    for j in 0..n_keys {
                        load_into(kb, k_cache.dtype, (base + j) * kvw + g * hd, &mut s.row);
                        let mut dot = 0.0f32;
                        for (a, b) in qh.iter().zip(&s.row) {
                            dot += a * b;
                        }
                        let score = scale * dot;
                        max = max.max(score);
                        s.b.push(score);
                    }
                    let mut sum = 0.0f32;
                    for e in s.b.iter_mut() {
                        *e = (*e - max).exp();
                        sum += *e;
                    }
                    let oh = &mut s.out[t * qw + h * hd..t * qw + (h + 1) * hd];
                    for (j, &e) in s.b.iter().enumerate() {
                        let p = e / sum;
                        load_into(vb, v_cache.dtype, (base + j) * kvw + g * hd, &mut s.row);
                        for (o, v) in oh.iter_mut().zip(&s.row) {
                            *o += p * v;
                        }
                    }
                }
            }
            store(regions, out, &s.out)
        }
        Kernel::AttentionSplit { rows, heads, kv_heads, head_dim, scale, kv_rows, splits, split_len, min_split_len, .. } => {
            let (rows, heads, kv_heads, hd) = (rows as usize, heads as usize, kv_heads as usize, head_dim as usize);
            let (splits_u, planned_len) = (splits, split_len);
            let (splits, split_len) = (splits as usize, split_len as usize);
            let [_, k_cache, v_cache, _, _, workspace] = attention_inputs(regions, s, launch, rows, heads, kv_heads, hd, kv_rows)? else {
                unreachable!()
            };
            ensure!(split_len > 0 && splits > 0, "attention split of zero length");
            let (qw, kvw, slot) = (heads * hd, kv_heads * hd, hd + 2);
            typed_operand(workspace, "workspace", DType::F32, rows * heads * splits * slot)?;
            let group = heads / kv_heads;
            s.row.clear();
            s.row.resize(hd, 0.0);
            // Partial states are computed first, then written, so the workspace write is the
            // only mutable borrow.
            let mut partials: Vec<(usize, Vec<f32>)> = Vec::new();
            {
                let (kb, vb) = (operand(regions, k_cache)?, operand(regions, v_cache)?);
                for t in 0..rows {
                    let pos = s.ints_a[t];
                    if pos < 0 {
                        continue;
                    }
                    let base = kv_span(t, pos, s.ints_b[t], kv_rows)?;
                    let n_keys = pos as usize + 1;
                    ensure!(n_keys <= splits * split_len, "position {pos} is beyond the {splits} x {split_len} attention splits");
                    let split_len = crate::plan::live_split_len(pos, splits_u, planned_len, min_split_len) as usize;
                    for h in 0..heads {
                        let g = h / group;
                        let qh = &s.a[t * qw + h * hd..t * qw + (h + 1) * hd];
                        for sp in 0..splits {
                            let (lo, hi) = (sp * split_len, ((sp + 1) * split_len).min(n_keys));
                            if lo >= hi {
                                break; // inactive splits write nothing
                            }
                            let state = split_state(
                                SplitRead { kb, kdt: k_cache.dtype, vb, vdt: v_cache.dtype, kvw, hd },
                                qh,
                                base,
                                g,
                                lo,
                                hi,
                                scale,
                                &mut s.row,
                                &mut s.b,
                            );
                            partials.push((((t * heads + h) * splits + sp) * slot, state));
                        }
                    }
                }
            }
            let dst = operand_mut(regions, workspace)?;
            for (at, state) in &partials {
                store_into(dst, DType::F32, *at, state);
            }
            Ok(())
        }
        Kernel::AttentionCluster { rows, heads, kv_heads, head_dim, scale, kv_rows, split_len, min_split_len, .. } => {
            let (r, h, kvh, hd) = (rows as usize, heads as usize, kv_heads as usize, head_dim as usize);
            let [_, k_cache, v_cache, _, _, out] = attention_inputs(regions, s, launch, r, h, kvh, hd, kv_rows)? else { unreachable!() };
            let c = ClusterAttention { rows, heads, kv_heads, head_dim, scale, kv_rows, split_len, min_split_len };
            cluster_attention(regions, s, c, k_cache, v_cache, out)
        }
        Kernel::AttentionMerge { rows, heads, head_dim, splits, split_len, min_split_len, .. } => {
            let (splits_u, planned_len) = (splits, split_len);
            let (rows, heads, hd, splits) = (rows as usize, heads as usize, head_dim as usize, splits as usize);
            let [workspace, positions, out] = arity(launch, 2, 1)? else { unreachable!() };
            let slot = hd + 2;
            typed_operand(workspace, "workspace", DType::F32, rows * heads * splits * slot)?;
            typed_operand(positions, "positions", DType::I32, rows)?;
            float_operand(out, "out", rows * heads * hd)?;
            load_all(operand(regions, workspace)?, DType::F32, &mut s.a);
            load_ints(operand(regions, positions)?, &mut s.ints_a);
            s.out.clear();
            s.out.resize(rows * heads * hd, 0.0);
            for t in 0..rows {
                let pos = s.ints_a[t];
                if pos < 0 {
                    continue;
                }
                let split_len = crate::plan::live_split_len(pos, splits_u, planned_len, min_split_len) as usize;
                let active = (pos as usize / split_len + 1).min(splits);
                for h in 0..heads {
                    let ws = &s.a;
                    let states = (0..active).map(|sp| &ws[((t * heads + h) * splits + sp) * slot..][..slot]);
                    merge_split_states(states, hd, &mut s.out[(t * heads + h) * hd..][..hd]);
                }
            }
            store(regions, out, &s.out)
        }
        Kernel::Advance { rows, burst, stop_ids } => {
            let [tokens, stops, token_ids, positions, counter, control, ring] = arity(launch, 2, 5)? else { unreachable!() };
            advance(
                regions,
                rows as usize,
                burst as usize,
                stop_ids as usize,
                [tokens, stops, token_ids, positions, counter, control, ring],
            )
        }
        Kernel::SwiGlu { n } => {
            let n = n as usize;
            let [gate, up, out] = arity(launch, 2, 1)? else { unreachable!() };
            float_operand(gate, "gate", n)?;
            float_operand(up, "up", n)?;
            float_operand(out, "out", n)?;
            load_all(operand(regions, gate)?, gate.dtype, &mut s.a);
            load_all(operand(regions, up)?, up.dtype, &mut s.b);
            s.out.clear();
            s.out.extend(s.a.iter().zip(&s.b).map(|(&g, &u)| g / (1.0 + (-g).exp()) * u));
            store(regions, out, &s.out)
        }
        Kernel::Add { n } => {
            let n = n as usize;
            let [a, b, out] = arity(launch, 2, 1)? else { unreachable!() };
            float_operand(a, "a", n)?;
            float_operand(b, "b", n)?;
            float_operand(out, "out", n)?;
            load_all(operand(regions, a)?, a.dtype, &mut s.a);
            load_all(operand(regions, b)?, b.dtype, &mut s.b);
            s.out.clear();
            s.out.extend(s.a.iter().zip(&s.b).map(|(x, y)| x + y));
            store(regions, out, &s.out)
        }
        Kernel::Sample { rows, vocab } => {
            let [logits, temperature, top_k, top_p, seed, counter, out] = arity(launch, 6, 1)? else { unreachable!() };
            sample(regions, s, rows as usize, vocab as usize, [logits, temperature, top_k, top_p, seed, counter, out])
        }
        // Word for word the two kernels: the draw reads the counter before the advance moves it.
        // With the argmax key: a greedy row's token from the key (kernels/sample.cu's greedy path),
        // and the key zeroed for the next step's `LinearArgmax`.
        Kernel::SampleAdvance { vocab, burst, stop_ids, argmax } => {
            let bufs = arity(launch, 6, 6 + argmax as usize)?;
            let [logits, temperature, top_k, top_p, seed, stops, out, token_ids, positions, counter, control, ring] = &bufs[..12] else {
                unreachable!()
            };
            // The key's token for a greedy row (None: scan), the key zeroed either way.
            let mut keyed = None;
            if let Some(kb) = bufs.get(12) {
                typed_operand(temperature, "temperature", DType::F32, 1)?;
                typed_operand(kb, "argmax key", DType::U32, 2)?;
                let t = f32::from_le_bytes(operand(regions, temperature)?[..4].try_into().expect("4 bytes"));
                let key = u64::from_le_bytes(operand(regions, kb)?[..8].try_into().expect("8 bytes"));
                keyed = is_greedy(t).then(|| argmax_key_token(key, vocab as usize));
                operand_mut(regions, kb)?.fill(0);
            }
            match keyed {
                Some(token) => {
                    typed_operand(out, "out", DType::I32, 1)?;
                    operand_mut(regions, out)?.copy_from_slice(&(token as i32).to_le_bytes());
                }
                None => sample(regions, s, 1, vocab as usize, [logits, temperature, top_k, top_p, seed, counter, out])?,
            }
            advance(regions, 1, burst as usize, stop_ids as usize, [out, stops, token_ids, positions, counter, control, ring])
        }
    }
}

/// `Kernel::Advance` (kernels/advance.cu): bufs tokens, stop_ids, token_ids, positions, counter,
/// control, ring.
fn advance(regions: &mut [Vec<u8>; N_REGIONS], rows: usize, burst: usize, n_stop: usize, bufs: [&BufArg; 7]) -> Result<()> {
    let [tokens, stops, token_ids, positions, counter, control, ring] = bufs;
    typed_operand(tokens, "tokens", DType::I32, rows)?;
    typed_operand(stops, "stop_ids", DType::I32, n_stop)?;
    typed_operand(token_ids, "token_ids", DType::I32, rows)?;
    typed_operand(positions, "positions", DType::I32, rows)?;
    typed_operand(counter, "counter", DType::U32, rows)?;
    typed_operand(control, "control", DType::U32, 4 + rows)?;
    typed_operand(ring, "ring", DType::I32, burst * rows)?;
    let ints = |b: &[u8]| -> Vec<i32> { b.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect() };
    let sampled = ints(operand(regions, tokens)?);
    let stop_list = ints(operand(regions, stops)?);
    let mut pos = ints(operand(regions, positions)?);
    let mut ctr: Vec<u32> = ints(operand(regions, counter)?).into_iter().map(|x| x as u32).collect();
    let mut ctl: Vec<u32> = ints(operand(regions, control)?).into_iter().map(|x| x as u32).collect();
    let (budget, produced, max_position) = (ctl[0] as usize, ctl[1] as usize, ctl[3] as i64);
    if ctl[2] != 0 {
        return Ok(()); // already done: changes nothing (kernels/advance.cu)
    }
    let mut ring_writes = Vec::new();
    let mut ids = ints(operand(regions, token_ids)?);
    let mut past_end = false;
    for r in 0..rows {
        if pos[r] < 0 {
            ctl[4 + r] = 1; // padding rows count as finished
            continue;
        }
        let t = sampled[r];
        if produced < burst {
            ring_writes.push((produced * rows + r, t));
        }
        ids[r] = t;
        let at_end = (pos[r] + 1) as i64 >= max_position;
        pos[r] = if at_end { -1 } else { pos[r] + 1 };
        ctr[r] = ctr[r].wrapping_add(1);
        if stop_list.iter().any(|&s| s >= 0 && s == t) {
            ctl[4 + r] = 1;
        }
        past_end |= at_end;
    }
    let produced = produced + 1;
    ctl[1] = produced as u32;
    let all_finished = (0..rows).all(|r| ctl[4 + r] != 0);
    if produced >= budget || produced >= burst || all_finished || past_end {
        ctl[2] = 1;
    }
    let to_bytes = |v: &[i32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    operand_mut(regions, token_ids)?.copy_from_slice(&to_bytes(&ids));
    operand_mut(regions, positions)?.copy_from_slice(&to_bytes(&pos));
    operand_mut(regions, counter)?.copy_from_slice(&ctr.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>());
    operand_mut(regions, control)?.copy_from_slice(&ctl.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>());
    let ring_bytes = operand_mut(regions, ring)?;
    for (i, t) in ring_writes {
        ring_bytes[4 * i..4 * i + 4].copy_from_slice(&t.to_le_bytes());
    }
    Ok(())
}

/// `Kernel::Sample` (kernels/sample.cu): bufs logits, temperature, top_k, top_p, seed, counter, out.
fn sample(regions: &mut [Vec<u8>; N_REGIONS], s: &mut Scratch, rows: usize, vocab: usize, bufs: [&BufArg; 7]) -> Result<()> {
    let [logits, temperature, top_k, top_p, seed, counter, out] = bufs;
    float_operand(logits, "logits", rows * vocab)?;
    typed_operand(temperature, "temperature", DType::F32, rows)?;
    typed_operand(top_k, "top_k", DType::I32, rows)?;
    typed_operand(top_p, "top_p", DType::F32, rows)?;
    typed_operand(seed, "seed", DType::U32, rows)?;
    typed_operand(counter, "counter", DType::U32, rows)?;
    typed_operand(out, "out", DType::I32, rows)?;
    let lb = operand(regions, logits)?;
    let (tb, kb, pb) = (operand(regions, temperature)?, operand(regions, top_k)?, operand(regions, top_p)?);
    let (sb, cb) = (operand(regions, seed)?, operand(regions, counter)?);
    let word = |b: &[u8], r: usize| [b[4 * r], b[4 * r + 1], b[4 * r + 2], b[4 * r + 3]];
    s.row.clear();
    s.row.resize(vocab, 0.0);
    s.ints_a.clear();
    for r in 0..rows {
        load_into(lb, logits.dtype, r * vocab, &mut s.row);
        let token = sample_row(
            &s.row,
            f32::from_le_bytes(word(tb, r)),
            i32::from_le_bytes(word(kb, r)),
            f32::from_le_bytes(word(pb, r)),
            u32::from_le_bytes(word(sb, r)),
            u32::from_le_bytes(word(cb, r)),
        );
        s.ints_a.push(token as i32);
    }
    let dst = operand_mut(regions, out)?;
    for (c, t) in dst.chunks_exact_mut(4).zip(&s.ints_a) {
        c.copy_from_slice(&t.to_le_bytes());
    }
    Ok(())
}

/// A linear's output `o` (`rows x n`, before its rounding to `out`'s dtype) stored with an
/// `ir::OutNorm`: `out = dt(dt(o) * w)` and each row's squares of `dt(o)` per 8 features in the
/// pairwise order of `ir::group_sumsq`.
fn store_out_norm(
    regions: &mut [Vec<u8>; N_REGIONS],
    o: &[f32],
    w: &BufArg,
    [normed, sumsq]: [&BufArg; 2],
    rows: usize,
    n: usize,
) -> Result<()> {
    let dtype = normed.dtype;
    ensure!(n.is_multiple_of(8), "out_norm: {n} output features are not whole 8-feature groups");
    float_operand(w, "out-norm weight", n)?;
    float_operand(normed, "normed", rows * n)?;
    typed_operand(sumsq, "sumsq", DType::F32, rows * (n / 8))?;
    let mut wv = Vec::new();
    load_all(operand(regions, w)?, w.dtype, &mut wv);
    let stored: Vec<f32> = o.iter().map(|&v| round_to(dtype, v)).collect();
    let h: Vec<f32> = stored.iter().enumerate().map(|(i, &v)| round_to(normed.dtype, v * wv[i % n])).collect();
    let sums: Vec<f32> = stored.chunks_exact(8).map(|g| crate::ir::group_sumsq(g.try_into().expect("chunks of 8"))).collect();
    store(regions, normed, &h)?;
    store(regions, sumsq, &sums)
}

/// The input a fused linear multiplies, into `s.a`, and the factor of each row's sums (returned,
/// `rows` long): x (`rows x k`) and 1 without a norm weight. With one, by [`NormOrder::of`] x's
/// dtype: before the dot product (f16), exactly what `RmsNorm` would have stored for the linear
/// to read (normed, rounded to x's dtype) and 1; after it (f32, bf16), `x * norm_w` rounded to
/// x's dtype and the row's inverse RMS, `1 / sqrt(sum x^2 / k + eps)` (sum in index order).
fn load_linear_input(
    regions: &[Vec<u8>; N_REGIONS],
    s: &mut Scratch,
    x: &BufArg,
    norm_w: Option<&BufArg>,
    rows: usize,
    k: usize,
    eps: f32,
) -> Result<Vec<f32>> {
    load_all(operand(regions, x)?, x.dtype, &mut s.a);
    let mut scale = vec![1.0f32; rows];
    if let Some(nw) = norm_w {
        float_operand(nw, "norm weight", k)?;
        load_all(operand(regions, nw)?, nw.dtype, &mut s.b);
        match NormOrder::of(x.dtype) {
            NormOrder::BeforeDot => {
                let mut h = vec![0.0f32; rows * k];
                rms_norm_rows(&s.a, &s.b, &mut h, k, eps, x.dtype);
                s.a.clear();
                s.a.extend(h.iter().map(|&v| round_to(x.dtype, v)));
            }
            NormOrder::AfterDot => {
                for (r, xr) in s.a.chunks_exact_mut(k).enumerate().take(rows) {
                    let mut sum_sq = 0.0f32;
                    for v in xr.iter() {
                        sum_sq += v * v;
                    }
                    scale[r] = 1.0 / (sum_sq / k as f32 + eps).sqrt();
                    for (v, wv) in xr.iter_mut().zip(&s.b) {
                        *v = round_to(x.dtype, *v * wv);
                    }
                }
            }
        }
    }
    Ok(scale)
}

/// `RopeKvWrite` once its inputs are decoded (`[q, k, v]`, rows of `heads * head_dim` and
/// `kv_heads * head_dim` from `q_out` and `k_cache`): q rotated into `q_out`; k rotated and
/// rounded to `kv_dtype` (as `Rope` stores it before `KvWrite` copies it), then k and v written
/// to cache row `cache_base[t] + positions[t]` of every non-padding token (`step`, rows checked).
/// The shape of a packed QKV projection (`QkvRope`, `QkvAttention`).
#[derive(Clone, Copy)]
struct QkvShape {
    rows: usize,
    k: usize,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    kv_rows: u32,
    norm: bool,
    eps: f32,
    bias: bool,
}

impl QkvShape {
    fn qw(&self) -> usize {
        (self.heads * self.head_dim) as usize
    }
    fn kvw(&self) -> usize {
        (self.kv_heads * self.head_dim) as usize
    }
}

/// The q, k, v projections of a packed QKV launch (`QkvRope`'s and `QkvAttention`'s operands
/// before their three written ones: x, `[norm weight]`, weight, `[bias]`, positions, cache_base),
/// each rounded to `dt` as `QkvRope` stores them, before RoPE; the positions and cache bases
/// loaded into `s.ints_a` / `s.ints_b` and checked against the caches.
fn qkv_rope_parts(
    regions: &[Vec<u8>; N_REGIONS],
    s: &mut Scratch,
    bufs: &[BufArg],
    [k_cache, v_cache]: [&BufArg; 2],
    shape: QkvShape,
    rope: &RopeSpec,
    dt: DType,
) -> Result<[Vec<f32>; 3]> {
    let QkvShape { rows, k, kv_rows, norm, eps, bias, head_dim, .. } = shape;
    let (qw, kvw, hd) = (shape.qw(), shape.kvw(), head_dim as usize);
    let width = qw + 2 * kvw;
    let n = bufs.len();
    let (x, weight, positions, cache_base) = (&bufs[0], &bufs[1 + norm as usize], &bufs[n - 2], &bufs[n - 1]);
    float_operand(x, "x", rows * k)?;
    float_operand(weight, "weight", width * k)?;
    typed_operand(positions, "positions", DType::I32, rows)?;
    typed_operand(cache_base, "cache_base", DType::I32, rows)?;
    float_operand(k_cache, "k_cache", kv_rows as usize * kvw)?;
    float_operand(v_cache, "v_cache", kv_rows as usize * kvw)?;
    ensure!(rope.rotary_dim as usize == hd, "qkv_rope needs rotary_dim {} == head_dim {hd}", rope.rotary_dim);
    load_ints(operand(regions, positions)?, &mut s.ints_a);
    load_ints(operand(regions, cache_base)?, &mut s.ints_b);
    check_kv_rows(&s.ints_a[..rows], &s.ints_b, kv_rows)?;
    let scale = load_linear_input(regions, s, x, norm.then(|| &bufs[1]), rows, k, eps)?;
    let bias_v = if bias {
        let b = &bufs[2 + norm as usize];
        float_operand(b, "bias", width)?;
        let mut v = Vec::new();
        load_all(operand(regions, b)?, b.dtype, &mut v);
        v
    } else {
        Vec::new()
    };
    let mut packed = vec![0.0f32; rows * width];
    let tiled = s.tiled(weight);
    gemv_each(&s.a, operand(regions, weight)?, weight.dtype, tiled, k, width, rows, &mut s.row, |r, col, acc| {
        let acc = acc * scale[r];
        packed[r * width + col] = round_to(dt, if bias { acc + bias_v[col] } else { acc });
    });
    let part =
        |lo: usize, n: usize| -> Vec<f32> { (0..rows).flat_map(|r| packed[r * width + lo..r * width + lo + n].iter().copied()).collect() };
    Ok([part(0, qw), part(qw, kvw), part(qw + kvw, kvw)])
}

/// RoPE of q and k, then the KV write of the rotated k (rounded to `kv_dtype`) and v; q stored to
/// `q_out` where there is one. Returns the rotated q (not rounded).
fn rope_write_kv(
    regions: &mut [Vec<u8>; N_REGIONS],
    rope: &RopeSpec,
    head_dim: usize,
    [mut q, mut k, v]: [Vec<f32>; 3],
    kv_dtype: DType,
    (positions, cache_base): (&[i32], &[i32]),
    (q_out, [k_cache, v_cache]): (Option<&BufArg>, [&BufArg; 2]),
) -> Result<Vec<f32>> {
    let rows = positions.len().max(1);
    let (qw, kvw) = (q.len() / rows, k.len() / rows);
    let inv_freq: Vec<f32> = (0..rope.rotary_dim as usize / 2).map(|i| rope.inv_freq(i)).collect();
    rotate_rows(&mut q, qw, head_dim, &inv_freq, rope, positions);
    if let Some(q_out) = q_out {
        store(regions, q_out, &q)?;
    }
    rotate_rows(&mut k, kvw, head_dim, &inv_freq, rope, positions);
    for x in k.iter_mut() {
        *x = round_to(kv_dtype, *x);
    }
    write_kv_rows(regions, [(k_cache, &k), (v_cache, &v)], positions, cache_base, kvw)?;
    Ok(q)
}

/// The parameters of `AttentionCluster`'s arithmetic (also `QkvAttention`'s second half).
#[derive(Clone, Copy)]
struct ClusterAttention {
    rows: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    scale: f32,
    kv_rows: u32,
    split_len: u32,
    min_split_len: u32,
}

/// `AttentionCluster`'s arithmetic with q in `s.a`, the positions in `s.ints_a` and the cache bases
/// in `s.ints_b`: the splits of AttentionSplit (ATTENTION_CLUSTER_SPLITS of them), then the merge
/// of AttentionMerge's reference (the chunking of heads over blocks changes no arithmetic).
fn cluster_attention(
    regions: &mut [Vec<u8>; N_REGIONS],
    s: &mut Scratch,
    c: ClusterAttention,
    k_cache: &BufArg,
    v_cache: &BufArg,
    out: &BufArg,
) -> Result<()> {
    let ClusterAttention { rows, heads, kv_heads, head_dim, scale, kv_rows, split_len, min_split_len } = c;
    let splits_u = crate::plan::ATTENTION_CLUSTER_SPLITS;
    let (rows, heads, kv_heads, hd, splits) = (rows as usize, heads as usize, kv_heads as usize, head_dim as usize, splits_u as usize);
    ensure!(split_len > 0, "attention split of zero length");
    ensure!(kv_heads > 0 && heads.is_multiple_of(kv_heads), "{heads} heads are not a multiple of {kv_heads} kv heads");
    let (qw, kvw) = (heads * hd, kv_heads * hd);
    float_operand(out, "out", rows * qw)?;
    let group = heads / kv_heads;
    s.row.clear();
    s.row.resize(hd, 0.0);
    s.out.clear();
    s.out.resize(rows * qw, 0.0);
    let (kb, vb) = (operand(regions, k_cache)?, operand(regions, v_cache)?);
    for t in 0..rows {
        let pos = s.ints_a[t];
        if pos < 0 {
            continue;
        }
        let base = kv_span(t, pos, s.ints_b[t], kv_rows)?;
        let n_keys = pos as usize + 1;
        ensure!(n_keys <= splits * split_len as usize, "position {pos} is beyond the {splits} x {split_len} attention splits");
        let live = crate::plan::live_split_len(pos, splits_u, split_len, min_split_len) as usize;
        let active = (pos as usize / live + 1).min(splits);
        for h in 0..heads {
            let g = h / group;
            let qh = &s.a[t * qw + h * hd..t * qw + (h + 1) * hd];
            let states: Vec<Vec<f32>> = (0..active)
                .map(|sp| {
                    let (lo, hi) = (sp * live, ((sp + 1) * live).min(n_keys));
                    let c = SplitRead { kb, kdt: k_cache.dtype, vb, vdt: v_cache.dtype, kvw, hd };
                    split_state(c, qh, base, g, lo, hi, scale, &mut s.row, &mut s.b)
                })
                .collect();
            merge_split_states(states.iter().map(Vec::as_slice), hd, &mut s.out[(t * heads + h) * hd..][..hd]);
        }
    }
    store(regions, out, &s.out)
}

/// RMSNorm of each consecutive `dim`-long row of `x` with weight `w` (see the module doc for
/// the rounding of the normalized value to `x_dtype` before the weight multiply).
/// Calls `f(row, col, acc)` with `acc = x[row] · weight[col]`, summed in index order in f32;
/// each weight row is decoded once (weight-row outer loop; a tile-packed one through
/// `lower::tiles::tile_index`). `scratch` holds one decoded row.
#[allow(clippy::too_many_arguments)]
fn gemv_each(
    x: &[f32],
    wb: &[u8],
    wdtype: DType,
    tiled: bool,
    k: usize,
    n: usize,
    rows: usize,
    scratch: &mut Vec<f32>,
    mut f: impl FnMut(usize, usize, f32),
) {
    scratch.clear();
    scratch.resize(k, 0.0);
    for col in 0..n {
        load_row(wb, wdtype, tiled, col, k, scratch);
        for r in 0..rows {
            let mut acc = 0.0f32;
            for (xv, wv) in x[r * k..(r + 1) * k].iter().zip(scratch.iter()) {
                acc += xv * wv;
            }
            f(r, col, acc);
        }
    }
}

/// Row `col` of a `[N, k]` weight, row-major or tile-packed (`lower::tiles`).
fn load_row(wb: &[u8], dtype: DType, tiled: bool, col: usize, k: usize, dst: &mut [f32]) {
    if tiled {
        for (kk, d) in dst.iter_mut().enumerate().take(k) {
            *d = load(wb, dtype, crate::lower::tiles::tile_index(col, kk, k));
        }
    } else {
        load_into(wb, dtype, col * k, dst);
    }
}

fn rms_norm_rows(x: &[f32], w: &[f32], out: &mut [f32], dim: usize, eps: f32, x_dtype: DType) {
    for (xr, or) in x.chunks_exact(dim).zip(out.chunks_exact_mut(dim)) {
        let mut sum_sq = 0.0f32;
        for v in xr {
            sum_sq += v * v;
        }
        let inv = 1.0 / (sum_sq / dim as f32 + eps).sqrt();
        for ((o, v), wv) in or.iter_mut().zip(xr).zip(w) {
            *o = round_to(x_dtype, v * inv) * wv;
        }
    }
}

/// Rotates every head (`head_dim` wide) of every non-padding row (`positions[r] >= 0`) of
/// `vals`, rows of `width`; padding rows and elements past rotary_dim stay unchanged.
/// Part `i` (0 q, 1 k, 2 v) of a RoPE launch's inputs into `dst`: operand `i`, or, when the
/// launch has one packed qkv operand, already decoded into `packed` (rows of `w`: q | k | v),
/// its `n` columns from `lo`.
fn qkv_part(
    regions: &[Vec<u8>; N_REGIONS],
    inputs: &[BufArg],
    packed: &[f32],
    rows: usize,
    w: usize,
    (i, lo, n): (usize, usize, usize),
    dst: &mut Vec<f32>,
) -> Result<()> {
    if let [_] = inputs {
        dst.clear();
        dst.extend((0..rows).flat_map(|r| packed[r * w + lo..r * w + lo + n].iter().copied()));
    } else {
        load_all(operand(regions, &inputs[i])?, inputs[i].dtype, dst);
    }
    Ok(())
}

fn rotate_rows(vals: &mut [f32], width: usize, head_dim: usize, inv_freq: &[f32], rope: &RopeSpec, positions: &[i32]) {
    for (r, &pos) in positions.iter().enumerate() {
        if pos < 0 {
            continue;
        }
        for h in 0..width / head_dim {
            let head = r * width + h * head_dim;
            rotate_head(&mut vals[head..head + head_dim], inv_freq, rope, pos);
        }
    }
}

/// Checks the cache row of every non-padding token before anything is written, so a bad step
/// writes nothing.
fn check_kv_rows(positions: &[i32], cache_base: &[i32], kv_rows: u32) -> Result<()> {
    for (t, &pos) in positions.iter().enumerate() {
        if pos >= 0 {
            kv_span(t, pos, cache_base[t], kv_rows)?;
        }
    }
    Ok(())
}

/// Writes token `t`'s row of each `(cache, rows)` pair to cache row `cache_base[t] +
/// positions[t]` (padding tokens write nothing); rows are `kv_dim` wide. Rows checked by
/// [`check_kv_rows`].
fn write_kv_rows(
    regions: &mut [Vec<u8>; N_REGIONS],
    caches: [(&BufArg, &Vec<f32>); 2],
    positions: &[i32],
    cache_base: &[i32],
    kv_dim: usize,
) -> Result<()> {
    for (cache, src) in caches {
        let dst = operand_mut(regions, cache)?;
        for (t, &pos) in positions.iter().enumerate() {
            if pos >= 0 {
                let row = cache_base[t] as usize + pos as usize;
                store_into(dst, cache.dtype, row * kv_dim, &src[t * kv_dim..(t + 1) * kv_dim]);
            }
        }
    }
    Ok(())
}

/// Rotates one head in place at position `pos`; `inv_freq[i]` is the frequency of pair `i`.
fn rotate_head(head: &mut [f32], inv_freq: &[f32], rope: &RopeSpec, pos: i32) {
    let half = inv_freq.len();
    let p = rope.scaled_position(pos);
    for (i, &f) in inv_freq.iter().enumerate() {
        let angle = p * f;
        let (sin, cos) = (angle as f64).sin_cos();
        let (sin, cos) = (sin as f32, cos as f32);
        let (ia, ib) = match rope.style {
            RopeStyle::Interleaved => (2 * i, 2 * i + 1),
            RopeStyle::HalfSplit => (i, i + half),
        };
        let (a, b) = (head[ia], head[ib]);
        head[ia] = a * cos - b * sin;
        head[ib] = a * sin + b * cos;
    }
}

/// The K / V caches one decode attention split reads.
struct SplitRead<'a> {
    kb: &'a [u8],
    kdt: DType,
    vb: &'a [u8],
    vdt: DType,
    kvw: usize,
    hd: usize,
}

/// The merge of `AttentionMerge` (and of `AttentionCluster`'s clusters): the active splits'
/// (acc, m, l) states, each `hd + 2` floats, weighted by exp(m - max m) in split order, into `o`.
fn merge_split_states<'a>(states: impl Iterator<Item = &'a [f32]> + Clone, hd: usize, o: &mut [f32]) {
    let big_m = states.clone().map(|st| st[hd]).fold(f32::NEG_INFINITY, f32::max);
    let mut denom = 0.0f32;
    for st in states {
        let w = (st[hd] - big_m).exp();
        denom += w * st[hd + 1];
        for (oi, acc) in o.iter_mut().zip(&st[..hd]) {
            *oi += w * acc;
        }
    }
    for oi in o.iter_mut() {
        *oi /= denom;
    }
}

/// One split's state `(acc[0..hd], m, l)` of query head `qh` over cache rows `base + lo..base + hi`
/// of kv head `g` (the arithmetic of `Kernel::AttentionSplit`, shared by `AttentionCluster`).
#[allow(clippy::too_many_arguments)]
fn split_state(
    c: SplitRead,
    qh: &[f32],
    base: usize,
    g: usize,
    lo: usize,
    hi: usize,
    scale: f32,
    row: &mut [f32],
    scores: &mut Vec<f32>,
) -> Vec<f32> {
    let SplitRead { kb, kdt, vb, vdt, kvw, hd } = c;
    scores.clear();
    let mut m = f32::NEG_INFINITY;
    for j in lo..hi {
        load_into(kb, kdt, (base + j) * kvw + g * hd, row);
        let mut dot = 0.0f32;
        for (a, b) in qh.iter().zip(row.iter()) {
            dot += a * b;
        }
        let score = scale * dot;
        m = m.max(score);
        scores.push(score);
    }
    let mut state = vec![0.0f32; hd + 2];
    let mut l = 0.0f32;
    for (j, &score) in (lo..hi).zip(scores.iter()) {
        let e = (score - m).exp();
        l += e;
        load_into(vb, vdt, (base + j) * kvw + g * hd, row);
        for (acc, v) in state[..hd].iter_mut().zip(row.iter()) {
            *acc += e * v;
        }
    }
    state[hd] = m;
    state[hd + 1] = l;
    state
}
