//! CUDA graphs built node by node from a program's launch records (no stream capture): one
//! memcpy node for the step block (pinned host -> step region), one kernel node per launch with
//! the plan's geometry and the parameter blob `exec` packed at load, edges exactly from
//! `ProgramPlan::deps` (so independent launches may run concurrently), and one memcpy node per
//! output span (output region -> pinned host mirror) after the launch that writes it.
//!
//! A device loop (`Phase::DecodeLoop`) becomes: step copy -> one conditional WHILE node whose
//! body graph holds the program's kernel nodes (edges from the plan, as above) -> the output
//! copies and a copy of the step span back into the pinned step block (the loop control and
//! the step fields `advance` moved on). The WHILE node's condition starts at 1 on every launch
//! (`CU_GRAPH_COND_ASSIGN_DEFAULT`) and the `advance` kernel sets it to `!done` after each
//! step, so one graph launch runs the whole burst with no host involvement.
//!
//! Owns: graph creation, instantiation and destruction. Never: computes an address; every
//! pointer it is given was fixed at load from the plan.

use super::counters::Counters;
use super::driver::{call, CUfunction};
use super::exec::{LaunchParams, ProgramIo, Span};
use anyhow::{Context, Result};
use cudarc::driver::sys;
use std::ffi::c_void;

/// An instantiated graph for one program, destroyed on drop.
pub struct ProgramGraph {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    /// Nodes and edges, body graphs of conditional nodes included.
    pub nodes: usize,
    pub edges: usize,
    /// Edges that are programmatic (PDL), a subset of `edges`.
    pub programmatic_edges: usize,
}

impl Drop for ProgramGraph {
    fn drop(&mut self) {
        // SAFETY: both handles were created in `build` and are destroyed once, exec first.
        unsafe {
            sys::cuGraphExecDestroy(self.exec);
            sys::cuGraphDestroy(self.graph);
        }
    }
}

/// Where the host-side buffers and device regions of the copies are.
pub struct CopyEnds {
    pub step_host: *mut u8,
    pub step_device: u64,
    pub output_host: *mut u8,
    pub output_device: u64,
}

fn memcpy_params(src_host: Option<*const u8>, src_dev: u64, dst_host: Option<*mut u8>, dst_dev: u64, bytes: u64) -> sys::CUDA_MEMCPY3D {
    use sys::CUmemorytype::{CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_HOST};
    // Every field spelled out: the struct holds enums, so it has no valid all-zero value.
    let bytes = bytes as usize;
    sys::CUDA_MEMCPY3D {
        srcXInBytes: 0,
        srcY: 0,
        srcZ: 0,
        srcLOD: 0,
        srcMemoryType: if src_host.is_some() { CU_MEMORYTYPE_HOST } else { CU_MEMORYTYPE_DEVICE },
        srcHost: src_host.unwrap_or(std::ptr::null()) as *const c_void,
        srcDevice: src_dev,
        srcArray: std::ptr::null_mut(),
        reserved0: std::ptr::null_mut(),
        srcPitch: bytes,
        srcHeight: 1,
        dstXInBytes: 0,
        dstY: 0,
        dstZ: 0,
        dstLOD: 0,
        dstMemoryType: if dst_host.is_some() { CU_MEMORYTYPE_HOST } else { CU_MEMORYTYPE_DEVICE },
        dstHost: dst_host.unwrap_or(std::ptr::null_mut()) as *mut c_void,
        dstDevice: dst_dev,
        dstArray: std::ptr::null_mut(),
        reserved1: std::ptr::null_mut(),
        dstPitch: bytes,
        dstHeight: 1,
        WidthInBytes: bytes,
        Height: 1,
        Depth: 1,
    }
}

/// A graph destroyed on drop: a library call recorded at load, added to a program's graph as
/// a child graph node (the driver copies it, so this one can go once the node exists).
pub struct OwnedGraph(pub sys::CUgraph);

impl Drop for OwnedGraph {
    fn drop(&mut self) {
        // SAFETY: a graph created by stream capture and owned here alone.
        unsafe {
            sys::cuGraphDestroy(self.0);
        }
    }
}

/// What the graph of one program is built from; `funcs[i]` and `params[i]` belong to launch `i`
/// (a library launch has a null function and its recorded graph in `library[i]`).
pub struct ProgramParts<'a> {
    pub label: String,
    pub launches: &'a [crate::plan::Launch],
    pub deps: &'a [(u32, u32)],
    pub funcs: &'a [CUfunction],
    pub params: &'a [LaunchParams],
    pub library: &'a [Option<OwnedGraph>],
    /// Programmatic dependent launch: a kernel node whose one dependency is a kernel node gets
    /// a programmatic edge (it may start while its predecessor's last blocks run; every kiln
    /// kernel waits for its prior grids in every block, kernels/common.cuh).
    pub pdl: bool,
    pub io: &'a ProgramIo,
}

/// Builds and instantiates the graph of one program. `params` must outlive the graph only until
/// instantiation (the driver copies kernel arguments into the node), but `exec` keeps them for
/// the executor's life anyway.
///
/// # Safety
/// `ctx` is the current context and `funcs` were loaded in it; `ends` points at a pinned step
/// buffer, a pinned output mirror and device regions that cover every span of `parts.io` and
/// outlive the returned graph (the graph's copies read and write them on every launch).
pub unsafe fn build(counters: &Counters, ctx: sys::CUcontext, parts: &ProgramParts, ends: &CopyEnds) -> Result<ProgramGraph> {
    let ProgramParts { label, io, .. } = parts;
    let mut graph: sys::CUgraph = std::ptr::null_mut();
    call(counters, "cuGraphCreate", unsafe { sys::cuGraphCreate(&mut graph, 0) })?;
    // From here on, a failure must destroy the graph: wrap it before adding nodes.
    let mut g = ProgramGraph { graph, exec: std::ptr::null_mut(), nodes: 0, edges: 0, programmatic_edges: 0 };

    let step_node = match io.step {
        // SAFETY: the span lies inside the pinned step buffer (this function's contract).
        Some(span) => Some(
            unsafe { add_copy(counters, &mut g, ctx, &[], &step_upload(ends, span), "the step-block copy node") }
                .with_context(|| label.clone())?,
        ),
        None => None,
    };

    let target = g.graph;
    // SAFETY: forwarded from this function's contract.
    let launch_nodes = unsafe { add_kernel_nodes(counters, &mut g, target, parts, step_node, &io.step_readers, None) }?;

    for out in &io.outputs {
        let dep = [launch_nodes[out.writer as usize]];
        // SAFETY: the span lies inside the pinned output mirror (this function's contract).
        unsafe { add_copy(counters, &mut g, ctx, &dep, &output_download(ends, out.span), "an output copy node") }
            .with_context(|| label.clone())?;
    }

    instantiate(counters, &mut g, label)?;
    Ok(g)
}

/// Adds one kernel node per launch to `target` (the program's graph, or a loop's body graph),
/// with the plan's edges; launches in `step_readers` also wait for `step_node`. With
/// `loop_handle`, the `advance` launch gets it as its conditional-handle parameter (the last
/// slot of its parameter blob). Returns the nodes in launch order.
///
/// # Safety
/// As for [`build`]; `target` is `g.graph` or a body graph owned by one of its nodes.
unsafe fn add_kernel_nodes(
    counters: &Counters,
    g: &mut ProgramGraph,
    target: sys::CUgraph,
    parts: &ProgramParts,
    step_node: Option<sys::CUgraphNode>,
    step_readers: &[u32],
    loop_handle: Option<sys::CUgraphConditionalHandle>,
) -> Result<Vec<sys::CUgraphNode>> {
    let ProgramParts { label, launches, deps, funcs, params, library, pdl, .. } = parts;
    let mut launch_nodes: Vec<sys::CUgraphNode> = Vec::with_capacity(launches.len());
    let mut by_after: Vec<Vec<u32>> = vec![Vec::new(); launches.len()];
    for &(before, after) in deps.iter() {
        by_after[after as usize].push(before);
    }
    for (i, l) in launches.iter().enumerate() {
        let mut dep_nodes: Vec<sys::CUgraphNode> = by_after[i].iter().map(|&b| launch_nodes[b as usize]).collect();
        if let (Some(s), true) = (step_node, step_readers.contains(&(i as u32))) {
            dep_nodes.push(s);
        }
        if let Some(Some(child)) = library.get(i) {
            let mut node: sys::CUgraphNode = std::ptr::null_mut();
            call(counters, "cuGraphAddChildGraphNode", unsafe {
                sys::cuGraphAddChildGraphNode(&mut node, target, dep_nodes.as_ptr(), dep_nodes.len(), child.0)
            })
            .with_context(|| format!("{label}: adding the library call of launch {i} `{}`", l.name))?;
            g.nodes += 1;
            g.edges += dep_nodes.len();
            launch_nodes.push(node);
            continue;
        }
        // The advance kernel of a loop body (or sample_advance) takes the WHILE node's handle in its
        // last slot; the driver copies the arguments when the node is added, so a local blob will do.
        let with_handle = match (loop_handle, &l.kernel) {
            (Some(h), k) if k.is_loop_step() => {
                let mut slots = params[i].slots().to_vec();
                *slots.last_mut().expect("advance has parameters") = h;
                Some(LaunchParams::new(slots))
            }
            _ => None,
        };
        let kernel_params = with_handle.as_ref().unwrap_or(&params[i]).arg_ptrs();
        let kp = sys::CUDA_KERNEL_NODE_PARAMS {
            func: funcs[i],
            gridDimX: l.grid[0],
            gridDimY: l.grid[1],
            gridDimZ: l.grid[2],
            blockDimX: l.block[0],
            blockDimY: l.block[1],
            blockDimZ: l.block[2],
            sharedMemBytes: l.shared_bytes,
            kernelParams: kernel_params,
            extra: std::ptr::null_mut(),
            kern: std::ptr::null_mut(),
            ctx: std::ptr::null_mut(),
        };
        let programmatic = *pdl && dep_nodes.len() == 1 && by_after[i].len() == 1 && !launches[by_after[i][0] as usize].kernel.is_library();
        let mut node: sys::CUgraphNode = std::ptr::null_mut();
        let (deps_now, n_now) = if programmatic { (std::ptr::null(), 0) } else { (dep_nodes.as_ptr(), dep_nodes.len()) };
        call(counters, "cuGraphAddKernelNode", unsafe { sys::cuGraphAddKernelNode_v2(&mut node, target, deps_now, n_now, &kp) })
            .with_context(|| format!("{label}: adding the kernel node of launch {i} `{}`", l.name))?;
        if programmatic {
            let edge = sys::CUgraphEdgeData {
                from_port: sys::CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC as u8,
                to_port: 0,
                type_: sys::CUgraphDependencyType::CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC as u8,
                reserved: [0; 5],
            };
            call(counters, "cuGraphAddDependencies", unsafe { sys::cuGraphAddDependencies_v2(target, &dep_nodes[0], &node, &edge, 1) })
                .with_context(|| format!("{label}: adding the programmatic edge into launch {i} `{}`", l.name))?;
            g.programmatic_edges += 1;
        }
        g.nodes += 1;
        g.edges += dep_nodes.len();
        launch_nodes.push(node);
    }
    Ok(launch_nodes)
}

/// Adds a memcpy node to `g` after `deps`.
///
/// # Safety
/// `p` describes a copy between memory that outlives the graph.
/// The copy of the pinned step block's `span` to the device step region.
///
/// # Safety
/// `span` lies inside the pinned step buffer of `ends`.
unsafe fn step_upload(ends: &CopyEnds, span: Span) -> sys::CUDA_MEMCPY3D {
    // SAFETY (pointer arithmetic): the caller's contract.
    let host = unsafe { ends.step_host.add(span.offset as usize) };
    memcpy_params(Some(host as *const u8), 0, None, ends.step_device + span.offset, span.bytes)
}

/// The copy of the output region's `span` to the pinned output mirror.
///
/// # Safety
/// `span` lies inside the pinned output mirror of `ends`.
unsafe fn output_download(ends: &CopyEnds, span: Span) -> sys::CUDA_MEMCPY3D {
    // SAFETY (pointer arithmetic): the caller's contract.
    let host = unsafe { ends.output_host.add(span.offset as usize) };
    memcpy_params(None, ends.output_device + span.offset, Some(host), 0, span.bytes)
}

unsafe fn add_copy(
    counters: &Counters,
    g: &mut ProgramGraph,
    ctx: sys::CUcontext,
    deps: &[sys::CUgraphNode],
    p: &sys::CUDA_MEMCPY3D,
    what: &str,
) -> Result<sys::CUgraphNode> {
    let mut node: sys::CUgraphNode = std::ptr::null_mut();
    call(counters, "cuGraphAddMemcpyNode", unsafe { sys::cuGraphAddMemcpyNode(&mut node, g.graph, deps.as_ptr(), deps.len(), p, ctx) })
        .with_context(|| format!("adding {what}"))?;
    g.nodes += 1;
    g.edges += deps.len();
    Ok(node)
}

/// Builds and instantiates the graph of a device loop (`Phase::DecodeLoop`): step copy ->
/// WHILE node (body: the program's kernel nodes) -> output copies and the step write-back.
///
/// # Safety
/// As for [`build`]; in addition the step span of `parts.io` must lie inside the pinned step
/// buffer, which the write-back overwrites at the end of every launch.
pub unsafe fn build_loop(counters: &Counters, ctx: sys::CUcontext, parts: &ProgramParts, ends: &CopyEnds) -> Result<ProgramGraph> {
    let ProgramParts { label, io, .. } = parts;
    let span = io.step.with_context(|| format!("{label}: a device loop that reads no step fields"))?;
    let mut graph: sys::CUgraph = std::ptr::null_mut();
    call(counters, "cuGraphCreate", unsafe { sys::cuGraphCreate(&mut graph, 0) })?;
    let mut g = ProgramGraph { graph, exec: std::ptr::null_mut(), nodes: 0, edges: 0, programmatic_edges: 0 };

    // SAFETY: the span lies inside the pinned step buffer (this function's contract).
    let step_node = unsafe { add_copy(counters, &mut g, ctx, &[], &step_upload(ends, span), "the step-block copy node") }
        .with_context(|| label.clone())?;

    // The loop: its condition is 1 at every launch; `advance` sets it to !done.
    let mut handle: sys::CUgraphConditionalHandle = 0;
    call(counters, "cuGraphConditionalHandleCreate", unsafe {
        sys::cuGraphConditionalHandleCreate(&mut handle, g.graph, ctx, 1, sys::CU_GRAPH_COND_ASSIGN_DEFAULT)
    })
    .with_context(|| format!("{label}: creating the device loop's conditional handle"))?;
    // SAFETY: all-zero is a valid value of this plain C struct (its enums have a 0 variant);
    // the fields that matter are set below.
    let mut np: sys::CUgraphNodeParams = unsafe { std::mem::zeroed() };
    np.type_ = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_CONDITIONAL;
    np.__bindgen_anon_1.conditional = sys::CUDA_CONDITIONAL_NODE_PARAMS {
        handle,
        type_: sys::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_WHILE,
        size: 1,
        phGraph_out: std::ptr::null_mut(),
        ctx,
    };
    let mut while_node: sys::CUgraphNode = std::ptr::null_mut();
    let deps = [step_node];
    call(counters, "cuGraphAddNode", unsafe {
        sys::cuGraphAddNode_v2(&mut while_node, g.graph, deps.as_ptr(), std::ptr::null(), deps.len(), &mut np)
    })
    .with_context(|| format!("{label}: adding the conditional WHILE node (needs CUDA 12.4+ drivers)"))?;
    g.nodes += 1;
    g.edges += 1;
    // The driver fills `phGraph_out` with an array it owns: the body graph, alive as long as
    // the node.
    // SAFETY: set by the successful call above; `size` is 1.
    let body = unsafe {
        let out = np.__bindgen_anon_1.conditional.phGraph_out;
        anyhow::ensure!(!out.is_null(), "{label}: the driver returned no body graph for the WHILE node");
        *out
    };
    // SAFETY: `body` belongs to a node of `g.graph`; the rest is this function's contract.
    unsafe { add_kernel_nodes(counters, &mut g, body, parts, None, &[], Some(handle)) }?;

    for out in &io.outputs {
        // SAFETY: the span lies inside the pinned output mirror (this function's contract).
        unsafe { add_copy(counters, &mut g, ctx, &[while_node], &output_download(ends, out.span), "an output copy node") }
            .with_context(|| label.clone())?;
    }
    // SAFETY (pointer arithmetic): the span lies inside the pinned step buffer.
    let step_host = unsafe { ends.step_host.add(span.offset as usize) };
    let back = memcpy_params(None, ends.step_device + span.offset, Some(step_host), 0, span.bytes);
    unsafe { add_copy(counters, &mut g, ctx, &[while_node], &back, "the step write-back node") }.with_context(|| label.clone())?;

    instantiate(counters, &mut g, label)?;
    Ok(g)
}

fn instantiate(counters: &Counters, g: &mut ProgramGraph, label: &str) -> Result<()> {
    call(counters, "cuGraphInstantiate", unsafe { sys::cuGraphInstantiateWithFlags(&mut g.exec, g.graph, 0) })
        .with_context(|| format!("{label}: instantiating the graph of {} nodes", g.nodes))?;
    counters.graphs_instantiated.set(counters.graphs_instantiated.get() + 1);
    counters.graph_nodes.set(counters.graph_nodes.get() + g.nodes as u64);
    Ok(())
}

impl ProgramGraph {
    // `stream` is an opaque driver handle, passed through, never dereferenced here.
    #[allow(clippy::not_unsafe_ptr_arg_deref)]
    pub fn launch(&self, counters: &Counters, stream: sys::CUstream) -> Result<()> {
        counters.graph_launch();
        call(counters, "cuGraphLaunch", unsafe { sys::cuGraphLaunch(self.exec, stream) })
    }
}
