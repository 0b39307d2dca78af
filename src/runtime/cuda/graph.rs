//! CUDA graphs built node by node from a program's launch records (no stream capture): one
//! memcpy node for the step block (pinned host -> step region), one kernel node per launch with
//! the plan's geometry and the parameter blob `exec` packed at load, edges exactly from
//! `ProgramPlan::deps` (so independent launches may run concurrently), and one memcpy node per
//! output span (output region -> pinned host mirror) after the launch that writes it.
//!
//! Owns: graph creation, instantiation and destruction. Never: computes an address; every
//! pointer it is given was fixed at load from the plan.

use super::counters::Counters;
use super::driver::{call, CUfunction};
use super::exec::{LaunchParams, ProgramIo};
use anyhow::{Context, Result};
use cudarc::driver::sys;
use std::ffi::c_void;

/// An instantiated graph for one program, destroyed on drop.
pub struct ProgramGraph {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    pub nodes: usize,
    pub edges: usize,
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

/// What the graph of one program is built from; `funcs[i]` and `params[i]` belong to launch `i`.
pub struct ProgramParts<'a> {
    pub label: String,
    pub launches: &'a [crate::plan::Launch],
    pub deps: &'a [(u32, u32)],
    pub funcs: &'a [CUfunction],
    pub params: &'a [LaunchParams],
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
    let ProgramParts { label, launches, deps, funcs, params, io } = parts;
    let mut graph: sys::CUgraph = std::ptr::null_mut();
    call(counters, "cuGraphCreate", unsafe { sys::cuGraphCreate(&mut graph, 0) })?;
    // From here on, a failure must destroy the graph: wrap it before adding nodes.
    let mut g = ProgramGraph { graph, exec: std::ptr::null_mut(), nodes: 0, edges: 0 };

    let step_node = match io.step {
        Some(span) => {
            let p = memcpy_params(
                // SAFETY (pointer arithmetic): the span lies inside the pinned step buffer.
                Some(unsafe { ends.step_host.add(span.offset as usize) } as *const u8),
                0,
                None,
                ends.step_device + span.offset,
                span.bytes,
            );
            let mut node: sys::CUgraphNode = std::ptr::null_mut();
            call(counters, "cuGraphAddMemcpyNode", unsafe { sys::cuGraphAddMemcpyNode(&mut node, g.graph, std::ptr::null(), 0, &p, ctx) })
                .with_context(|| format!("{label}: adding the step-block copy node"))?;
            g.nodes += 1;
            Some(node)
        }
        None => None,
    };

    let mut launch_nodes: Vec<sys::CUgraphNode> = Vec::with_capacity(launches.len());
    let mut by_after: Vec<Vec<u32>> = vec![Vec::new(); launches.len()];
    for &(before, after) in deps.iter() {
        by_after[after as usize].push(before);
    }
    for (i, l) in launches.iter().enumerate() {
        let mut dep_nodes: Vec<sys::CUgraphNode> = by_after[i].iter().map(|&b| launch_nodes[b as usize]).collect();
        if let (Some(s), true) = (step_node, io.step_readers.contains(&(i as u32))) {
            dep_nodes.push(s);
        }
        let kp = sys::CUDA_KERNEL_NODE_PARAMS {
            func: funcs[i],
            gridDimX: l.grid[0],
            gridDimY: l.grid[1],
            gridDimZ: l.grid[2],
            blockDimX: l.block[0],
            blockDimY: l.block[1],
            blockDimZ: l.block[2],
            sharedMemBytes: l.shared_bytes,
            kernelParams: params[i].arg_ptrs(),
            extra: std::ptr::null_mut(),
            kern: std::ptr::null_mut(),
            ctx: std::ptr::null_mut(),
        };
        let mut node: sys::CUgraphNode = std::ptr::null_mut();
        call(counters, "cuGraphAddKernelNode", unsafe {
            sys::cuGraphAddKernelNode_v2(&mut node, g.graph, dep_nodes.as_ptr(), dep_nodes.len(), &kp)
        })
        .with_context(|| format!("{label}: adding the kernel node of launch {i} `{}`", l.name))?;
        g.nodes += 1;
        g.edges += dep_nodes.len();
        launch_nodes.push(node);
    }

    for out in &io.outputs {
        let p = memcpy_params(
            None,
            ends.output_device + out.span.offset,
            // SAFETY (pointer arithmetic): the span lies inside the pinned output mirror.
            Some(unsafe { ends.output_host.add(out.span.offset as usize) }),
            0,
            out.span.bytes,
        );
        let dep = [launch_nodes[out.writer as usize]];
        let mut node: sys::CUgraphNode = std::ptr::null_mut();
        call(counters, "cuGraphAddMemcpyNode", unsafe { sys::cuGraphAddMemcpyNode(&mut node, g.graph, dep.as_ptr(), 1, &p, ctx) })
            .with_context(|| format!("{label}: adding an output copy node"))?;
        g.nodes += 1;
        g.edges += 1;
    }

    call(counters, "cuGraphInstantiate", unsafe { sys::cuGraphInstantiateWithFlags(&mut g.exec, g.graph, 0) })
        .with_context(|| format!("{label}: instantiating the graph of {} nodes", g.nodes))?;
    counters.graphs_instantiated.set(counters.graphs_instantiated.get() + 1);
    counters.graph_nodes.set(counters.graph_nodes.get() + g.nodes as u64);
    Ok(g)
}

impl ProgramGraph {
    // `stream` is an opaque driver handle, passed through, never dereferenced here.
    #[allow(clippy::not_unsafe_ptr_arg_deref)]
    pub fn launch(&self, counters: &Counters, stream: sys::CUstream) -> Result<()> {
        counters.graph_launch();
        call(counters, "cuGraphLaunch", unsafe { sys::cuGraphLaunch(self.exec, stream) })
    }
}
