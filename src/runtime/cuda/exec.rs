//! The CUDA executor of a plan, eager or graph. `load` does everything that allocates or
//! decides: one device allocation per non-empty region (in the order, and with the padding, that
//! the measurement knobs of [`super::placement`] ask for; unset, `RegionKind::ALL`'s order and no
//! padding; with `KILN_ALLOC_SINGLE=1` one allocation holding them all), weights uploaded once
//! through pinned staging buffers, kernels compiled and loaded, one parameter blob per launch
//! (pointers = region base + planned offset, then the kernel's scalars, per `abi`), the pinned
//! step block and output mirror, and in graph mode one instantiated graph per program.
//!
//! `run` then only copies the step bytes into the pinned step block and either launches the
//! program's graph (one driver call) or, in eager mode, the same records one by one with the
//! same parameter blobs, and waits once. The two modes must give bit-identical results.
//!
//! Device loops (`loop.b{B}`): the ring region is mapped pinned host memory. In graph mode one
//! graph launch runs the whole burst (a conditional WHILE node, see `graph`); [`Executor::start`]
//! returns right after it, the host reads tokens from the ring as `advance` writes them
//! ([`Executor::poll_ring`], plain volatile reads), asks whether the loop is over with an event
//! query ([`Executor::finished`], not a sync), and only [`Executor::wait`] before the loop was
//! seen finished blocks (counted in `loop_syncs`). In eager mode (the debug path) the host
//! launches the body step by step and reads the done flag after each.
//!
//! Library launches (`Kernel::Gemm`, prefill GEMMs): cuBLASLt calls prepared at load (`blaslt`),
//! each run once and then recorded into a child graph node of its program's graph (the only
//! stream captures, all during `load`); eager mode calls cuBLASLt on the stream.
//!
//! Never, after `load`: allocates (device or pinned), uploads from pageable memory, captures a
//! stream, or computes an address. [`Counters`] prove it.

use super::abi;
use super::blaslt::{self, Blas, GemmCall};
use super::counters::{Counters, Snapshot};
use super::driver::{self, call, CUfunction, Device, DeviceBuffer, Event, MappedBuffer, Module, PinnedBuffer, Stream};
use super::graph::{self, CopyEnds, ProgramGraph};
use super::placement::Placement;
use crate::ir::Phase;
use crate::lower::names;
use crate::model::WeightSource;
use crate::plan::planner::fmt_bytes;
use crate::plan::{Access, BufArg, Kernel, Plan, ProgramPlan, RegionKind};
use crate::runtime::weights::{convert_tensor, weight_tensors};
use crate::runtime::{Executor, StepBlock};
use anyhow::{bail, ensure, Context, Result};
use cudarc::driver::sys;
use std::collections::BTreeMap;
use std::ffi::c_void;

/// How `run` executes a program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Each launch record with `cuLaunchKernel`, in plan order, on one stream.
    Eager,
    /// One CUDA graph per program, built at load from the launch records and their deps.
    Graph,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Eager => "cuda-eager",
            Mode::Graph => "cuda-graph",
        }
    }
}

/// Parameter values of one launch, one 8-byte slot each, in the kernel's parameter order:
/// operand pointers (with the null bias slot of a bias-less linear), then the scalars as their
/// 4 little-endian bytes in the low half of the slot, then a by-value parameter's bytes in as many
/// slots as it needs (`abi::by_value_slots`: the rotating kernels' inverse frequencies; the driver reads it
/// from its first slot's pointer, the slots after it are contiguous); `advance` (and `sample_advance`) then takes the device loop's
/// conditional handle (`unsigned long long`), 0 here: the graph of a loop puts the real handle
/// into its own copy of the blob. Pure; the ABI test checks it.
pub fn param_slots(kernel: &Kernel, bufs: &[BufArg], region_base: &[u64; crate::plan::N_REGIONS]) -> Vec<u64> {
    let mut slots = abi::pointers(kernel, bufs, region_base);
    debug_assert_eq!(slots.len(), abi::pointer_slots(kernel, bufs));
    for s in abi::scalars(kernel) {
        slots.push(u32::from_le_bytes(s.to_le_bytes()) as u64);
    }
    slots.extend(abi::by_value_slots(kernel));
    if let Kernel::Advance { .. } | Kernel::SampleAdvance { .. } = kernel {
        slots.push(0);
    }
    slots
}

/// A launch's kernel arguments as `cuLaunchKernel` and kernel nodes take them: an array of
/// pointers, each to one parameter's value. Built once at load; the heap storage never moves,
/// so the pointers stay valid for the executor's life.
pub struct LaunchParams {
    slots: Box<[u64]>,
    ptrs: Box<[*mut c_void]>,
}

impl LaunchParams {
    pub fn new(slots: Vec<u64>) -> LaunchParams {
        let mut slots = slots.into_boxed_slice();
        let ptrs = slots.iter_mut().map(|s| s as *mut u64 as *mut c_void).collect::<Vec<_>>().into_boxed_slice();
        LaunchParams { slots, ptrs }
    }
    pub fn slots(&self) -> &[u64] {
        &self.slots
    }
    /// The `void**` the driver reads (it never writes through it).
    pub fn arg_ptrs(&self) -> *mut *mut c_void {
        self.ptrs.as_ptr() as *mut *mut c_void
    }
}

/// Bytes `[offset, offset + bytes)` of a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub offset: u64,
    pub bytes: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutputCopy {
    pub span: Span,
    /// The launch that writes it; the copy runs after it.
    pub writer: u32,
}

/// What a program reads from the step block and writes to the output region: the transfers
/// around its launches.
#[derive(Clone, Debug, PartialEq)]
pub struct ProgramIo {
    /// The one span of the step region covering every step field the program reads.
    pub step: Option<Span>,
    /// Launches that read the step region (they wait for the step copy).
    pub step_readers: Vec<u32>,
    pub outputs: Vec<OutputCopy>,
}

impl ProgramIo {
    pub fn of(p: &ProgramPlan) -> ProgramIo {
        let (mut lo, mut hi) = (u64::MAX, 0u64);
        let mut step_readers = Vec::new();
        let mut outs: BTreeMap<(u64, u64), u32> = BTreeMap::new();
        for (i, l) in p.launches.iter().enumerate() {
            let mut reads_step = false;
            for b in &l.bufs {
                match (b.region, b.access) {
                    (RegionKind::Step, _) => {
                        reads_step = true;
                        lo = lo.min(b.offset);
                        hi = hi.max(b.offset + b.bytes);
                    }
                    (RegionKind::Output, Access::Write) => {
                        outs.insert((b.offset, b.bytes), i as u32);
                    }
                    _ => {}
                }
            }
            if reads_step {
                step_readers.push(i as u32);
            }
        }
        ProgramIo {
            step: (hi > lo).then_some(Span { offset: lo, bytes: hi - lo }),
            step_readers,
            outputs: outs.into_iter().map(|((offset, bytes), writer)| OutputCopy { span: Span { offset, bytes }, writer }).collect(),
        }
    }
}

/// A device loop launched and not yet waited for.
#[derive(Clone, Copy, Debug)]
struct InFlight {
    /// The host has seen it finish (event query, or eager mode, which runs synchronously).
    observed: bool,
}

/// Executes a plan on one NVIDIA GPU. Fields drop in declaration order: graphs and module
/// before the memory they point at, the device (its context) last.
pub struct CudaExecutor {
    graphs: Vec<ProgramGraph>,
    /// Per program: for an unrolled device loop, the graph whose WHILE body is its first copy
    /// alone, launched for budgets that are not a multiple of the copies
    /// (`ProgramPlan::loop_launches`); None otherwise.
    first_copy: Vec<Option<ProgramGraph>>,
    /// `gemms[program][launch]`: the cuBLASLt call of each `Kernel::Gemm` launch.
    gemms: Vec<Vec<Option<GemmCall>>>,
    blas: Option<Blas>,
    params: Vec<Vec<LaunchParams>>,
    funcs: Vec<Vec<CUfunction>>,
    io: Vec<ProgramIo>,
    _module: Module,
    step_host: PinnedBuffer,
    output_host: PinnedBuffer,
    /// Owns the device memory `region_base` points into.
    _regions: Vec<Option<DeviceBuffer>>,
    /// The ring region (device loops' tokens): mapped pinned host memory, when the plan has one.
    ring: Option<MappedBuffer>,
    region_base: [u64; crate::plan::N_REGIONS],
    /// Recorded after each device-loop launch; queried, never waited on while streaming.
    loop_done: Event,
    in_flight: Option<InFlight>,
    stream: Stream,
    device: Device,
    counters: Counters,
    mode: Mode,
    plan: Plan,
    load_seconds: f64,
    /// Seconds `load` spent building and instantiating the graphs (GEMM recording included).
    graph_seconds: f64,
    pdl: PdlReport,
    clusters: Vec<ClusterFit>,
}

/// Programmatic dependent launch in this executor's graphs.
#[derive(Clone, Debug, Default)]
pub struct PdlReport {
    /// Asked for: graph mode on sm_90+ unless `KILN_PDL=0`.
    pub wanted: bool,
    /// Programmatic edges in all graphs.
    pub programmatic_edges: usize,
    /// Programs whose graph the driver refused with programmatic edges (built without).
    pub refused: Vec<String>,
}

/// A thread-block-cluster launch against the clusters of its kernel the GPU holds at once
/// (`cuOccupancyMaxActiveClusters`): the planner assumes its cluster attention fits in one wave
/// (`plan::planner::ATTENTION_CLUSTER_WAVE`); this is the device's own count, one per distinct
/// (symbol, grid).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterFit {
    pub symbol: String,
    /// Programs that launch it with this grid (`decode.b1`, ...).
    pub programs: Vec<String>,
    pub clusters: u32,
    pub max_active: u32,
}

impl ClusterFit {
    pub fn describe(&self) -> String {
        format!(
            "{} in {}: {} clusters, {} resident at once{}",
            self.symbol,
            self.programs.join(", "),
            self.clusters,
            self.max_active,
            if self.clusters > self.max_active { " (more than one wave)" } else { "" }
        )
    }
}

/// The cluster launches of `plan` on this device (sm_90+; empty before).
fn cluster_fits(counters: &Counters, device: &Device, plan: &Plan, funcs: &[Vec<CUfunction>]) -> Vec<ClusterFit> {
    let mut fits: Vec<(ClusterFit, [u32; 3])> = Vec::new();
    if device.compute_capability.0 < 9 {
        return Vec::new();
    }
    for (pi, p) in plan.programs.iter().enumerate() {
        for (li, l) in p.launches.iter().enumerate() {
            let Some(size) = crate::plan::geometry::cluster_blocks(l) else { continue };
            let symbol = abi::launch_symbol(l);
            if let Some((f, _)) = fits.iter_mut().find(|(f, g)| f.symbol == symbol && *g == l.grid) {
                if !f.programs.contains(&p.label()) {
                    f.programs.push(p.label());
                }
                continue;
            }
            let config = sys::CUlaunchConfig {
                gridDimX: l.grid[0],
                gridDimY: l.grid[1],
                gridDimZ: l.grid[2],
                blockDimX: l.block[0],
                blockDimY: l.block[1],
                blockDimZ: l.block[2],
                sharedMemBytes: l.shared_bytes,
                hStream: std::ptr::null_mut(),
                attrs: std::ptr::null_mut(),
                numAttrs: 0,
            };
            let mut max_active: std::ffi::c_int = 0;
            // SAFETY: `funcs[pi][li]` is a live function of the loaded module; `config` outlives the call.
            let asked = call(counters, "cuOccupancyMaxActiveClusters", unsafe {
                sys::cuOccupancyMaxActiveClusters(&mut max_active, funcs[pi][li], &config)
            });
            // Only a report: a driver that cannot answer costs the line, not the load.
            if let Err(e) = asked {
                tracing::warn!("could not ask the driver how many clusters of `{symbol}` fit: {e:#}");
                continue;
            }
            let clusters = l.grid.iter().product::<u32>() / size;
            let fit = ClusterFit { symbol, programs: vec![p.label()], clusters, max_active: max_active.max(0) as u32 };
            if fit.clusters > fit.max_active {
                tracing::warn!("{}: this launch runs in more than one wave of clusters", fit.describe());
            }
            fits.push((fit, l.grid));
        }
    }
    fits.into_iter().map(|(f, _)| f).collect()
}

/// The compiled kernels for this device: the kernels helper's NVRTC module, disk-cached by
/// (source hash, arch, NVRTC version, options). Every symbol the plan needs must be in it.
fn compile_kernels(device: &Device, plan: &Plan) -> Result<Vec<u8>> {
    let (major, minor) = device.compute_capability;
    if major < 9 {
        if let Some(l) = plan
            .programs
            .iter()
            .flat_map(|p| &p.launches)
            .find(|l| matches!(l.kernel, Kernel::AttentionCluster { .. } | Kernel::QkvAttention { .. }))
        {
            bail!(
                "launch {} of this plan is a thread-block cluster (decode attention in one launch), which needs sm_90 or newer; \
                 {} is sm_{major}{minor}: re-plan with KILN_ATTN_CLUSTER=0",
                l.name,
                device.name
            );
        }
    }
    // A launch of fewer blocks than tiles needs kernels that walk (KILN_GEMV_WALK, kernels/linear.cu).
    let walk = crate::plan::geometry::gemv_walk_define();
    for l in plan.programs.iter().flat_map(|p| &p.launches) {
        let walked = crate::plan::geometry::gemv_tiles(&l.kernel).is_some_and(|tiles| l.grid[0] < tiles);
        if walked && walk & crate::plan::geometry::gemv_walk_bit(&l.kernel, l.occupancy) == 0 {
            bail!(
                "launch {} of this plan walks its GEMV tiles ({} blocks), which the kernels of this process do not \
                 (KILN_GEMV_WALK={:?}): re-plan in this environment, or load it without that knob",
                l.name,
                l.grid[0],
                std::env::var("KILN_GEMV_WALK").unwrap_or_default()
            );
        }
    }
    let arch = super::nvrtc::arch_for_compute_capability(major, minor);
    let compiled = super::nvrtc::load_or_compile(&arch, plan.gemv_tiles())
        .with_context(|| format!("compiling the CUDA kernels for {} ({arch})", device.name))?;
    if let Ok(have) = super::nvrtc::cubin_kernel_names(&compiled.cubin) {
        let missing: Vec<String> = abi::symbols(plan).into_iter().filter(|s| !have.contains(s)).collect();
        if !missing.is_empty() {
            bail!(
                "the compiled kernels lack {} symbol(s) this plan launches: {} (kernel ABI: src/runtime/cuda/abi.rs)",
                missing.len(),
                missing.join(", ")
            );
        }
    }
    Ok(compiled.cubin)
}

/// The GPU [`CudaExecutor::load`] uses: `KILN_CUDA_DEVICE`, else 0.
pub fn ordinal_from_env() -> Result<i32> {
    match std::env::var("KILN_CUDA_DEVICE") {
        Ok(s) => s.parse::<i32>().with_context(|| format!("KILN_CUDA_DEVICE=`{s}` is not a GPU number")),
        Err(_) => Ok(0),
    }
}

/// Device bytes free on the GPU [`CudaExecutor::load`] would use, as its context sees them.
pub fn free_memory() -> Result<u64> {
    let counters = Counters::default();
    let device = Device::open(ordinal_from_env()?, &counters)?;
    Ok(device.mem_info(&counters)?.0)
}

impl CudaExecutor {
    /// Loads `plan` onto GPU 0 (or `KILN_CUDA_DEVICE`). See the module doc for what happens.
    pub fn load(plan: Plan, weights: &dyn WeightSource, mode: Mode) -> Result<CudaExecutor> {
        Self::load_on(plan, weights, mode, ordinal_from_env()?)
    }

    pub fn load_on(plan: Plan, weights: &dyn WeightSource, mode: Mode, ordinal: i32) -> Result<CudaExecutor> {
        let t0 = std::time::Instant::now();
        let counters = Counters::default();
        let device = Device::open(ordinal, &counters)?;
        let (free, _total) = device.mem_info(&counters)?;
        let placement = Placement::from_env()?;
        let pad_bytes = placement.pad_before + placement.pad_after.iter().sum::<u64>();
        ensure!(
            pad_bytes == 0 || plan.total_bytes() + pad_bytes <= free,
            "the placement knobs (KILN_ALLOC_PAD_MB / KILN_ALLOC_PAD_AFTER) ask for {} of pads beside the plan's {}, \
             more than the GPU's {} free: use smaller pads",
            fmt_bytes(pad_bytes),
            fmt_bytes(plan.total_bytes()),
            fmt_bytes(free)
        );
        let need = plan.total_bytes();
        if need > free {
            bail!(
                "the plan needs {} ({}) but the GPU has {} free ({}); lower --max-context / buckets / use bf16{}",
                fmt_bytes(need),
                crate::plan::dump::region_summary(&plan),
                fmt_bytes(free),
                device.describe(),
                crate::plan::dump::tiles_hint(&plan)
            );
        }
        let stream = Stream::new(&counters)?;

        // One allocation per non-empty region, in the placement's order with its pads (the default:
        // `RegionKind::ALL`, none); the ring is host memory the device writes.
        let mut regions: Vec<Option<DeviceBuffer>> = (0..crate::plan::N_REGIONS).map(|_| None).collect();
        let mut pads: Vec<DeviceBuffer> = Vec::new();
        if placement.pad_before > 0 {
            pads.push(DeviceBuffer::alloc(&counters, placement.pad_before, "placement pad")?);
        }
        let mut ring = None;
        let mut region_base = [0u64; crate::plan::N_REGIONS];
        // KILN_ALLOC_SINGLE=1: every device region inside one allocation at its layout offset.
        let single = if placement.single {
            let (offsets, total) = placement.single_layout(&plan.region_bytes);
            ensure!(
                total <= free,
                "KILN_ALLOC_SINGLE=1 needs one allocation of {} (the regions on 2 MiB boundaries, with their pads), more than the GPU's {} free",
                fmt_bytes(total),
                fmt_bytes(free)
            );
            let buf = DeviceBuffer::alloc(&counters, total, "regions (one allocation)")?;
            let base = buf.ptr;
            pads.push(buf);
            Some((offsets, base))
        } else {
            None
        };
        for &r in &placement.order {
            let bytes = plan.region_bytes[r.index()];
            if bytes == 0 {
                continue;
            }
            if r == RegionKind::Ring {
                let mut buf = MappedBuffer::alloc(&counters, bytes as usize, r.name())?;
                buf.fill_words(0, bytes as usize / 4, RING_EMPTY);
                region_base[r.index()] = buf.device_ptr;
                ring = Some(buf);
            } else {
                let base = match single {
                    Some((offsets, base)) => match offsets[r.index()] {
                        Some(offset) => base + offset,
                        None => bail!("internal: the single-allocation layout has no offset for the non-empty region {}", r.name()),
                    },
                    None => {
                        let buf = DeviceBuffer::alloc(&counters, bytes, r.name())?;
                        let ptr = buf.ptr;
                        regions[r.index()] = Some(buf);
                        ptr
                    }
                };
                region_base[r.index()] = base;
                if r != RegionKind::Weights {
                    // Deterministic start: the KV cache, step block, outputs and arena begin zeroed.
                    call(&counters, "cuMemsetD8Async", unsafe { sys::cuMemsetD8Async(base, 0, bytes as usize, stream.0) })?;
                }
            }
            // In one allocation a device region's pad is a gap of its layout already.
            if (single.is_none() || r == RegionKind::Ring) && placement.pad_after[r.index()] > 0 {
                pads.push(DeviceBuffer::alloc(&counters, placement.pad_after[r.index()], "placement pad")?);
            }
        }
        if !placement.is_default() {
            let bases: Vec<String> = RegionKind::ALL.iter().map(|r| format!("{} {:#x}", r.name(), region_base[r.index()])).collect();
            eprintln!("placement knobs set: region bases {}", bases.join(", "));
        }
        // The pads live as long as the regions.
        regions.extend(pads.into_iter().map(Some));

        // Kernels: one function per symbol the plan uses.
        let image = compile_kernels(&device, &plan)?;
        let module = Module::load(&counters, &image)?;
        let mut by_symbol: BTreeMap<String, CUfunction> = BTreeMap::new();
        let mut max_shared: BTreeMap<String, u32> = BTreeMap::new();
        for p in &plan.programs {
            for l in p.launches.iter().filter(|l| !l.kernel.is_library()) {
                let s = abi::launch_symbol(l);
                let m = max_shared.entry(s).or_insert(0);
                *m = (*m).max(l.shared_bytes);
            }
        }
        for s in abi::symbols(&plan) {
            let f = module.function(&counters, &s)?;
            let shared = max_shared.get(&s).copied().unwrap_or(0);
            // Static and dynamic shared memory together past 48 KiB need the opt-in, so any
            // dynamic shared memory asks for it (a kernel's static part may be most of 48 KiB).
            if shared > 0 {
                driver::set_max_dynamic_shared(&counters, f, shared)
                    .with_context(|| format!("`{s}` needs {shared} bytes of shared memory"))?;
            }
            by_symbol.insert(s, f);
        }
        // Library launches have no function (null); `gemms` holds their calls.
        let funcs: Vec<Vec<CUfunction>> = plan
            .programs
            .iter()
            .map(|p| {
                p.launches
                    .iter()
                    .map(|l| if l.kernel.is_library() { std::ptr::null_mut() } else { by_symbol[&abi::launch_symbol(l)] })
                    .collect()
            })
            .collect();
        let clusters = cluster_fits(&counters, &device, &plan, &funcs);
        let has_library = plan.programs.iter().any(|p| p.launches.iter().any(|l| l.kernel.is_library()));
        let blas = if has_library { Some(Blas::new()?) } else { None };
        let gemms = match &blas {
            Some(b) => blaslt::prepare(b, &plan, &region_base, &counters, &stream)?,
            None => plan.programs.iter().map(|p| p.launches.iter().map(|_| None).collect()).collect(),
        };

        upload_weights(&plan, weights, &counters, &stream, region_base[RegionKind::Weights.index()])?;

        let params: Vec<Vec<LaunchParams>> = plan
            .programs
            .iter()
            .map(|p| p.launches.iter().map(|l| LaunchParams::new(param_slots(&l.kernel, &l.bufs, &region_base))).collect())
            .collect();
        let io: Vec<ProgramIo> = plan.programs.iter().map(ProgramIo::of).collect();
        let mut step_host = PinnedBuffer::alloc(&counters, plan.region_bytes[RegionKind::Step.index()] as usize)?;
        let mut output_host = PinnedBuffer::alloc(&counters, plan.region_bytes[RegionKind::Output.index()] as usize)?;

        // Each GEMM runs once before anything is recorded (cuBLASLt loads its kernels on first
        // use); it reads weights and scratch and writes only arena scratch or outputs that
        // every run rewrites.
        if let Some(b) = &blas {
            for c in gemms.iter().flatten().flatten() {
                c.enqueue(b, &counters, stream.0).context("warming up a cuBLASLt GEMM")?;
            }
        }
        let t_graphs = std::time::Instant::now();
        let mut graphs = Vec::new();
        let mut first_copy = Vec::new();
        // Programmatic dependent launch on Hopper and later (kernels/common.cuh), unless KILN_PDL=0.
        let pdl_wanted = device.compute_capability.0 >= 9 && std::env::var("KILN_PDL").map_or(true, |v| v != "0");
        let mut pdl_refused = Vec::new();
        if mode == Mode::Graph {
            let capture_stream = Stream::new(&counters)?;
            let ends = CopyEnds {
                step_host: step_host.as_mut_slice().as_mut_ptr(),
                step_device: region_base[RegionKind::Step.index()],
                output_host: output_host.as_mut_slice().as_mut_ptr(),
                output_device: region_base[RegionKind::Output.index()],
            };
            for (pi, p) in plan.programs.iter().enumerate() {
                // Each GEMM recorded into a graph of its own, added as a child graph node.
                let mut library: Vec<Option<graph::OwnedGraph>> = Vec::with_capacity(p.launches.len());
                for c in &gemms[pi] {
                    library.push(match (c, &blas) {
                        (Some(c), Some(b)) => Some(graph::OwnedGraph(c.capture(b, &counters, capture_stream.0)?)),
                        _ => None,
                    });
                }
                let mut parts = graph::ProgramParts {
                    label: p.label(),
                    launches: &p.launches,
                    deps: &p.deps,
                    funcs: &funcs[pi],
                    params: &params[pi],
                    library: &library,
                    pdl: pdl_wanted,
                    io: &io[pi],
                };
                // SAFETY: the context is current (Device::open), `funcs` come from `module`, and
                // the pinned buffers and regions behind `ends` move into `Self` and are dropped
                // after `graphs` (field order).
                let build = |parts: &graph::ProgramParts| {
                    if p.phase == Phase::DecodeLoop {
                        unsafe { graph::build_loop(&counters, device.ctx, parts, &ends) }
                    } else {
                        unsafe { graph::build(&counters, device.ctx, parts, &ends) }
                    }
                };
                // A driver that refuses programmatic edges (in a loop body, say) gets the
                // program with full edges only: slower, the same results.
                let built = match build(&parts) {
                    Err(e) if parts.pdl => {
                        pdl_refused.push(format!("{}: {e:#}", p.label()));
                        parts.pdl = false;
                        build(&parts)?
                    }
                    r => r?,
                };
                graphs.push(built);
                // An unrolled loop's first copy: a prefix of its launches, whose dependencies
                // stay among them (edges only go forward and no copy reaches back).
                let first = p.loop_launches(1);
                first_copy.push(if first < p.launches.len() {
                    let deps: Vec<(u32, u32)> = p.deps.iter().copied().filter(|&(_, b)| (b as usize) < first).collect();
                    let prefix = graph::ProgramParts {
                        label: format!("{} (first copy)", p.label()),
                        launches: &p.launches[..first],
                        deps: &deps,
                        funcs: &funcs[pi][..first],
                        params: &params[pi][..first],
                        library: &library[..first],
                        ..parts
                    };
                    Some(build(&prefix)?)
                } else {
                    None
                });
            }
        }
        let graph_seconds = t_graphs.elapsed().as_secs_f64();
        let loop_done = Event::new(&counters)?;
        stream.sync(&counters).context("finishing the upload")?;
        counters.mark_loaded();
        let programmatic_edges = graphs.iter().chain(first_copy.iter().flatten()).map(|g| g.programmatic_edges).sum();
        Ok(CudaExecutor {
            graphs,
            first_copy,
            pdl: PdlReport { wanted: pdl_wanted && mode == Mode::Graph, programmatic_edges, refused: pdl_refused },
            clusters,
            gemms,
            blas,
            graph_seconds,
            params,
            funcs,
            io,
            _module: module,
            step_host,
            output_host,
            _regions: regions,
            ring,
            region_base,
            loop_done,
            in_flight: None,
            stream,
            device,
            counters,
            mode,
            plan,
            load_seconds: t0.elapsed().as_secs_f64(),
        })
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }
    pub fn device(&self) -> &Device {
        &self.device
    }
    pub fn load_seconds(&self) -> f64 {
        self.load_seconds
    }
    /// Seconds of `load` spent building and instantiating every program's graph (0 in eager
    /// mode).
    pub fn graph_seconds(&self) -> f64 {
        self.graph_seconds
    }
    /// Graphs built at load (one per program in graph mode).
    pub fn graph_count(&self) -> usize {
        self.graphs.len()
    }
    /// Programmatic dependent launch in the graphs: asked for, edges, programs refused.
    pub fn pdl(&self) -> &PdlReport {
        &self.pdl
    }
    /// The plan's thread-block-cluster launches against what the GPU holds at once.
    pub fn cluster_fits(&self) -> &[ClusterFit] {
        &self.clusters
    }
    pub fn counters(&self) -> Snapshot {
        self.counters.snapshot()
    }
    /// Device address of each region's base (0 for an empty region).
    pub fn region_base(&self) -> [u64; crate::plan::N_REGIONS] {
        self.region_base
    }
    /// The parameter slots of one launch, as packed at load.
    pub fn launch_params(&self, program: usize, launch: usize) -> &[u64] {
        self.params[program][launch].slots()
    }

    /// What `kiln run --stats` prints.
    pub fn stats_report(&self) -> String {
        let mut pdl = format!(
            "graphs: {} built at load in {:.3} s; programmatic dependent launch: {}",
            self.graphs.len(),
            self.graph_seconds,
            if self.pdl.wanted { format!("{} programmatic edges", self.pdl.programmatic_edges) } else { "off".to_string() }
        );
        for r in &self.pdl.refused {
            pdl.push_str(&format!("\n  refused, built with full edges: {r}"));
        }
        for c in &self.clusters {
            pdl.push_str(&format!("\ncluster launch: {}", c.describe()));
        }
        format!("{}\n{}\n{pdl}", self.device.describe(), self.counters.snapshot().report(self.mode.name()).trim_end())
    }

    fn check_program(&self, program: usize) -> Result<()> {
        ensure!(program < self.plan.programs.len(), "program {program} does not exist (the plan has {})", self.plan.programs.len());
        Ok(())
    }

    /// Copies the step block into the pinned step buffer (host memcpy, no driver call).
    fn stage_step(&mut self, step: &StepBlock) -> Result<()> {
        let dst = self.step_host.as_mut_slice();
        ensure!(
            step.bytes.len() == dst.len(),
            "step block is {} bytes but the plan's step region is {}; build it with StepBlock::new(plan)",
            step.bytes.len(),
            dst.len()
        );
        dst.copy_from_slice(&step.bytes);
        Ok(())
    }

    fn upload_step_eager(&self, program: usize) -> Result<()> {
        if let Some(span) = self.io[program].step {
            self.counters.upload(span.bytes, true);
            call(&self.counters, "cuMemcpyHtoDAsync", unsafe {
                sys::cuMemcpyHtoDAsync_v2(
                    self.region_base[RegionKind::Step.index()] + span.offset,
                    self.step_host.as_ptr().add(span.offset as usize) as *const c_void,
                    span.bytes as usize,
                    self.stream.0,
                )
            })?;
        }
        Ok(())
    }

    fn launch_eager(&self, program: usize, launch: usize) -> Result<()> {
        let l = &self.plan.programs[program].launches[launch];
        if let (Some(c), Some(b)) = (&self.gemms[program][launch], &self.blas) {
            self.counters.kernel_launch();
            return c.enqueue(b, &self.counters, self.stream.0).with_context(|| format!("running the GEMM `{}`", l.name));
        }
        self.counters.kernel_launch();
        call(&self.counters, "cuLaunchKernel", unsafe {
            sys::cuLaunchKernel(
                self.funcs[program][launch],
                l.grid[0],
                l.grid[1],
                l.grid[2],
                l.block[0],
                l.block[1],
                l.block[2],
                l.shared_bytes,
                self.stream.0,
                self.params[program][launch].arg_ptrs(),
                std::ptr::null_mut(),
            )
        })
        .with_context(|| format!("launching `{}` ({})", l.name, abi::launch_symbol(l)))
    }

    fn download_outputs_eager(&self, program: usize) -> Result<()> {
        for out in &self.io[program].outputs {
            self.counters.download(false);
            call(&self.counters, "cuMemcpyDtoHAsync", unsafe {
                sys::cuMemcpyDtoHAsync_v2(
                    self.output_host.as_ptr().add(out.span.offset as usize) as *mut c_void,
                    self.region_base[RegionKind::Output.index()] + out.span.offset,
                    out.span.bytes as usize,
                    self.stream.0,
                )
            })?;
        }
        Ok(())
    }

    /// Debugging: stage and upload `step` for `program` without running anything, so that
    /// [`Self::run_launch`] can step through the program one launch at a time.
    pub fn begin_step(&mut self, program: usize, step: &StepBlock) -> Result<()> {
        self.check_program(program)?;
        // A loop's graph writes the pinned step block back when it ends.
        self.wait_loop()?;
        self.stage_step(step)?;
        self.upload_step_eager(program)?;
        self.stream.sync(&self.counters)
    }

    /// Debugging: runs one launch eagerly and waits for it.
    pub fn run_launch(&mut self, program: usize, launch: usize) -> Result<()> {
        self.check_program(program)?;
        ensure!(launch < self.funcs[program].len(), "program {program} has no launch {launch}");
        self.launch_eager(program, launch)?;
        let l = &self.plan.programs[program].launches[launch];
        self.stream.sync(&self.counters).with_context(|| format!("running launch {launch} `{}`", l.name))
    }

    /// Debugging: bytes `[offset, offset + bytes)` of a region, copied from the device into
    /// pageable memory (counted as a debug download; never used by `run`). The ring is host
    /// memory and is read in place.
    pub fn read_region(&self, region: RegionKind, offset: u64, bytes: usize) -> Result<Vec<u8>> {
        ensure!(
            offset + bytes as u64 <= self.plan.region_bytes[region.index()],
            "{bytes} bytes at {offset} run past the {} region",
            region.name()
        );
        let mut out = vec![0u8; bytes];
        if bytes == 0 {
            return Ok(out);
        }
        if region == RegionKind::Ring {
            ensure!(offset.is_multiple_of(4) && bytes.is_multiple_of(4), "the ring is read in whole 4-byte words");
            let ring = self.ring.as_ref().context("the plan has no ring")?;
            let mut words = vec![0i32; bytes / 4];
            ring.read_words(offset as usize / 4, &mut words);
            return Ok(bytemuck::cast_slice(&words).to_vec());
        }
        self.counters.download(true);
        call(&self.counters, "cuMemcpyDtoH", unsafe {
            sys::cuMemcpyDtoH_v2(out.as_mut_ptr() as *mut c_void, self.region_base[region.index()] + offset, bytes)
        })?;
        self.counters.host_sync();
        Ok(out)
    }

    // -----------------------------------------------------------------------------------------
    // Device loops.

    fn is_loop(&self, program: usize) -> bool {
        self.plan.programs[program].phase == Phase::DecodeLoop
    }

    /// Byte offset of the loop control in the step region.
    fn control_offset(&self) -> Result<usize> {
        Ok(self.plan.tensor(names::LOOP_CONTROL).context("a device loop without loop control")?.offset as usize)
    }

    /// Word `i` of the loop control in the pinned step block: what the host staged before a
    /// launch, or what the device wrote back once the loop finished.
    fn staged_control(&self, i: usize) -> Result<u32> {
        let o = self.control_offset()? + 4 * i;
        let b = &self.step_host.as_slice()[o..o + 4];
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// The loop control `[budget, produced, done, max_position, finished...]` (4 + `rows` words)
    /// as the last device loop left it, from the pinned step block the loop's graph writes back
    /// (no transfer, no sync). Valid once the loop was seen finished.
    pub fn loop_control(&self, rows: usize) -> Result<Vec<u32>> {
        ensure!(
            !matches!(self.in_flight, Some(InFlight { observed: false })),
            "the device loop is still running; read its control after `finished` or `wait`"
        );
        (0..4 + rows).map(|i| self.staged_control(i)).collect()
    }

    /// Launches device loop `program` and returns without waiting (see the module doc). The
    /// ring is reset to -1 first, so the host can tell the slots this launch wrote. A budget of
    /// 0 (or a done flag already set) runs nothing, as on the CPU.
    fn start_loop(&mut self, program: usize, step: &StepBlock) -> Result<()> {
        self.wait_loop()?;
        self.check_program(program)?;
        self.stage_step(step)?;
        let ring_tensor = self.plan.tensor(names::RING).context("a device loop without a ring")?;
        let (first, words) = (ring_tensor.offset as usize / 4, ring_tensor.bytes as usize / 4);
        self.ring.as_mut().context("a device loop but no ring region")?.fill_words(first, words, RING_EMPTY);
        if self.staged_control(0)? == 0 || self.staged_control(2)? != 0 {
            return Ok(());
        }
        self.counters.step();
        let label = self.plan.programs[program].label();
        self.counters.loop_launch();
        match self.mode {
            Mode::Graph => {
                if let Some(span) = self.io[program].step {
                    self.counters.upload(span.bytes, true);
                    self.counters.download(false); // the step write-back
                }
                for _ in &self.io[program].outputs {
                    self.counters.download(false);
                }
                let budget = self.staged_control(0)?;
                let graph = match &self.first_copy[program] {
                    Some(g) if self.plan.programs[program].loop_launches(budget) < self.plan.programs[program].launches.len() => g,
                    _ => &self.graphs[program],
                };
                graph.launch(&self.counters, self.stream.0).with_context(|| format!("launching the device loop {label}"))?;
                self.loop_done.record(&self.counters, &self.stream)?;
                self.in_flight = Some(InFlight { observed: false });
            }
            Mode::Eager => {
                self.run_loop_eager(program).with_context(|| format!("running the device loop {label} eagerly"))?;
                self.in_flight = Some(InFlight { observed: true });
                self.count_loop_steps()?;
            }
        }
        Ok(())
    }

    /// Eager mode: the body, step by step, reading the done flag after each (a debug path: one
    /// blocking sync per step).
    fn run_loop_eager(&mut self, program: usize) -> Result<()> {
        self.upload_step_eager(program)?;
        let done_at = self.control_offset()? + 8;
        let burst = self.plan.options.burst;
        let n = self.plan.programs[program].loop_launches(self.staged_control(0)?);
        for iteration in 0.. {
            ensure!(iteration <= burst, "advance never set the done flag within the burst of {burst} steps");
            for i in 0..n {
                self.launch_eager(program, i)?;
            }
            self.download_step_bytes(done_at as u64, 4)?;
            self.counters.loop_sync();
            self.stream.sync(&self.counters)?;
            if self.staged_control(2)? != 0 {
                break;
            }
        }
        self.download_outputs_eager(program)?;
        if let Some(span) = self.io[program].step {
            self.download_step_bytes(span.offset, span.bytes)?;
        }
        self.stream.sync(&self.counters)
    }

    /// Queues a copy of step-region bytes back into the pinned step block.
    fn download_step_bytes(&self, offset: u64, bytes: u64) -> Result<()> {
        self.counters.download(false);
        call(&self.counters, "cuMemcpyDtoHAsync", unsafe {
            sys::cuMemcpyDtoHAsync_v2(
                self.step_host.as_ptr().add(offset as usize) as *mut c_void,
                self.region_base[RegionKind::Step.index()] + offset,
                bytes as usize,
                self.stream.0,
            )
        })
    }

    /// Adds the steps of the loop just seen finished to the counters.
    fn count_loop_steps(&self) -> Result<()> {
        self.counters.loop_finished(self.staged_control(1)? as u64);
        Ok(())
    }

    /// Whether the device loop in flight (if any) has finished: an event query, never a sync.
    fn loop_finished(&mut self) -> Result<bool> {
        match self.in_flight {
            None | Some(InFlight { observed: true }) => Ok(true),
            Some(InFlight { observed: false }) => {
                if !self.loop_done.query(&self.counters).context("the device loop failed")? {
                    return Ok(false);
                }
                self.in_flight = Some(InFlight { observed: true });
                self.count_loop_steps()?;
                Ok(true)
            }
        }
    }

    /// Ends the device loop in flight, blocking only if the host has not seen it finish yet
    /// (then counted as a sync inside a burst).
    fn wait_loop(&mut self) -> Result<()> {
        if let Some(f) = self.in_flight.take() {
            if !f.observed {
                self.counters.loop_sync();
                self.loop_done.sync(&self.counters).context("waiting for the device loop")?;
                self.count_loop_steps()?;
            }
        }
        Ok(())
    }

    /// The first `dst.len()` words of the ring as the host sees them now (volatile reads of
    /// mapped memory; no driver call).
    fn read_ring(&self, dst: &mut [i32]) -> Result<()> {
        let t = self.plan.tensor(names::RING).context("the plan has no ring (plan with --burst N)")?;
        ensure!(dst.len() as u64 * 4 <= t.bytes, "the ring holds {} words; {} asked", t.bytes / 4, dst.len());
        self.ring.as_ref().context("the plan has no ring region")?.read_words(t.offset as usize / 4, dst);
        Ok(())
    }
}

/// What the host writes into every ring slot before a device loop starts: sampled tokens are
/// never negative, so a slot that holds it has not been written by the running loop.
pub const RING_EMPTY: i32 = -1;

/// Converts the weights into pinned staging buffers, tensor by tensor in offset order, and
/// uploads each filled buffer with one async copy; two buffers alternate so conversion overlaps
/// the copy. A progress bar shows bytes on a terminal.
fn upload_weights(plan: &Plan, weights: &dyn WeightSource, counters: &Counters, stream: &Stream, base: u64) -> Result<()> {
    let tensors: Vec<_> = weight_tensors(plan).collect();
    if tensors.is_empty() {
        return Ok(());
    }
    let total: u64 = plan.region_bytes[RegionKind::Weights.index()];
    let largest = tensors.iter().map(|t| t.bytes).max().unwrap_or(0);
    let chunk = largest.max(64 << 20).min(total.max(1)) as usize;
    let mut staging = [PinnedBuffer::alloc(counters, chunk)?, PinnedBuffer::alloc(counters, chunk)?];
    let done = [Event::new(counters)?, Event::new(counters)?];
    let mut in_flight = [false, false];

    use std::io::IsTerminal;
    let bar = if std::io::stderr().is_terminal() {
        let b = indicatif::ProgressBar::new(total);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "uploading weights {bar:30} {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b
    } else {
        indicatif::ProgressBar::hidden()
    };

    let mut which = 0usize;
    let mut i = 0usize;
    while i < tensors.len() {
        // The batch: tensors from `i` whose planned bytes (padding included) fit one buffer.
        let start = tensors[i].offset;
        let mut j = i;
        while j < tensors.len() && tensors[j].offset + tensors[j].bytes - start <= chunk as u64 {
            j += 1;
        }
        let end = tensors[j - 1].offset + tensors[j - 1].bytes;
        if in_flight[which] {
            done[which].sync(counters)?;
        }
        let buf = staging[which].as_mut_slice();
        buf[..(end - start) as usize].fill(0);
        for t in &tensors[i..j] {
            let o = (t.offset - start) as usize;
            convert_tensor(t, weights, &mut buf[o..o + t.bytes as usize])
                .with_context(|| format!("loading weights from {} for the GPU", weights.describe()))?;
        }
        counters.upload(end - start, true);
        call(counters, "cuMemcpyHtoDAsync", unsafe {
            sys::cuMemcpyHtoDAsync_v2(base + start, staging[which].as_ptr() as *const c_void, (end - start) as usize, stream.0)
        })?;
        done[which].record(counters, stream)?;
        in_flight[which] = true;
        bar.inc(end - start);
        which ^= 1;
        i = j;
    }
    stream.sync(counters)?;
    bar.finish_and_clear();
    Ok(())
}

impl Executor for CudaExecutor {
    fn plan(&self) -> &Plan {
        &self.plan
    }

    /// `KILN_TRACE_OUT` set: zeroes the kernels' trace counter (kernels/common.cuh
    /// `wait_prior_grids`), after waiting for the GPU. Refuses kernels built without the trace.
    fn trace_begin(&mut self) -> Result<()> {
        if std::env::var_os("KILN_TRACE_OUT").is_none() {
            return Ok(());
        }
        self.wait_loop()?;
        self.stream.sync(&self.counters)?;
        let (n, _) = self._module.global(&self.counters, "kiln_trace_n")?.context(
            "KILN_TRACE_OUT is set but the kernels were compiled without the trace: set KILN_NVRTC_DEFINES=KILN_TRACE=1 as well",
        )?;
        call(&self.counters, "cuMemsetD32", unsafe { sys::cuMemsetD32_v2(n, 0, 1) })
    }

    /// `KILN_TRACE_OUT` set: writes the trace entries recorded since `trace_begin` to that file,
    /// 5 little-endian u64 per block (grid id, ns at the wait, ns after it, smid << 48 | grid
    /// blocks << 24 | block, ns when its last thread left the kernel), in the order the blocks took
    /// their slots (scripts/trace_summary.py); and, where the kernels define `kiln_trace_phase`,
    /// the blocks' phase stamps (`KILN_TRACE_PHASE`, KILN_TRACE_PHASES u64 per block, 0 where none)
    /// to the same path with `.phase` appended.
    fn trace_end(&mut self) -> Result<()> {
        let Some(path) = std::env::var_os("KILN_TRACE_OUT") else { return Ok(()) };
        self.wait_loop()?;
        self.stream.sync(&self.counters)?;
        let m = &self._module;
        let (n_ptr, _) = m.global(&self.counters, "kiln_trace_n")?.context("the kernels have no trace counter")?;
        let (buf, bytes) = m.global(&self.counters, "kiln_trace")?.context("the kernels have no trace buffer")?;
        let mut n = [0u8; 4];
        call(&self.counters, "cuMemcpyDtoH", unsafe { sys::cuMemcpyDtoH_v2(n.as_mut_ptr() as *mut c_void, n_ptr, 4) })?;
        let n = u32::from_le_bytes(n) as usize;
        const ENTRY: usize = 5 * 8;
        let kept = n.min(bytes / ENTRY);
        let mut out = vec![0u8; kept * ENTRY];
        if kept > 0 {
            call(&self.counters, "cuMemcpyDtoH", unsafe { sys::cuMemcpyDtoH_v2(out.as_mut_ptr() as *mut c_void, buf, out.len()) })?;
        }
        std::fs::write(&path, &out).with_context(|| format!("writing the trace to {}", path.to_string_lossy()))?;
        if let Some((phase, phase_bytes)) = m.global(&self.counters, "kiln_trace_phase")? {
            // Both buffers hold KILN_TRACE_CAP entries, so a block's phase entry is this one's size over that.
            let phase_entry = phase_bytes / (bytes / ENTRY).max(1);
            let mut stamps = vec![0u8; kept * phase_entry];
            if !stamps.is_empty() {
                call(&self.counters, "cuMemcpyDtoH", unsafe {
                    sys::cuMemcpyDtoH_v2(stamps.as_mut_ptr() as *mut c_void, phase, stamps.len())
                })?;
            }
            let mut phase_path = path.clone();
            phase_path.push(".phase");
            std::fs::write(&phase_path, &stamps)
                .with_context(|| format!("writing the trace's phase stamps to {}", phase_path.to_string_lossy()))?;
        }
        eprintln!("kiln: trace of {kept} blocks ({} dropped past the buffer) written to {}", n - kept, path.to_string_lossy());
        Ok(())
    }

    fn run(&mut self, program: usize, step: &StepBlock) -> Result<()> {
        self.check_program(program)?;
        if self.is_loop(program) {
            self.start_loop(program, step)?;
            return self.wait_loop();
        }
        self.wait_loop()?;
        self.stage_step(step)?;
        let label = || self.plan.programs[program].label();
        match self.mode {
            Mode::Graph => {
                if let Some(span) = self.io[program].step {
                    // The graph's memcpy node, from the pinned step block.
                    self.counters.upload(span.bytes, true);
                }
                for _ in &self.io[program].outputs {
                    self.counters.download(false);
                }
                self.graphs[program]
                    .launch(&self.counters, self.stream.0)
                    .with_context(|| format!("launching the graph of {}", label()))?;
            }
            Mode::Eager => {
                self.upload_step_eager(program)?;
                for i in 0..self.funcs[program].len() {
                    self.launch_eager(program, i).with_context(|| format!("running {}", label()))?;
                }
                self.download_outputs_eager(program)?;
            }
        }
        self.stream.sync(&self.counters).with_context(|| format!("running {} on {}", label(), self.device.name))?;
        self.counters.step();
        Ok(())
    }

    fn read_tensor(&mut self, name: &str, bytes: usize) -> Result<Vec<u8>> {
        let t = self.plan.tensor(name).with_context(|| format!("the plan has no tensor `{name}`"))?;
        ensure!(bytes as u64 <= t.bytes, "`{name}` holds {} bytes; {bytes} asked", t.bytes);
        let (region, offset) = (t.region, t.offset);
        // Outputs of a device loop still running would be stale.
        self.wait_loop()?;
        if region == RegionKind::Output {
            let o = offset as usize;
            return Ok(self.output_host.as_slice()[o..o + bytes].to_vec());
        }
        self.read_region(region, offset, bytes)
    }

    fn name(&self) -> &'static str {
        self.mode.name()
    }

    fn stats(&self) -> Option<String> {
        Some(self.stats_report())
    }

    fn start(&mut self, program: usize, step: &StepBlock) -> Result<()> {
        self.check_program(program)?;
        if self.is_loop(program) {
            self.start_loop(program, step)
        } else {
            self.run(program, step)
        }
    }

    fn poll_ring(&mut self, dst: &mut [i32]) -> Result<()> {
        self.read_ring(dst)
    }

    fn finished(&mut self) -> Result<bool> {
        self.loop_finished()
    }

    fn wait(&mut self) -> Result<()> {
        self.wait_loop()
    }
}
