//! Executors of a plan. Each one allocates exactly the plan's regions at load and then only
//! follows launch records: the runtime never allocates after `load` and never computes an
//! address.
//!
//! - [`cpu`]: the reference executor, byte-for-byte over host regions with the plan's layout;
//!   the oracle the GPU executors are checked against.
//! - [`cuda`]: eager and graph executors; graphs are built node by node from the launch records
//!   at load (device loops as conditional WHILE nodes); the only captures are the cuBLASLt
//!   prefill GEMMs, each recorded once at load into a child graph node.
//! - [`session`]: generation over any executor (chunked prefill, one-step or device-loop decode);
//!   [`sampling`]: the host statement of the sampling rule; [`weights`]: tensors into the
//!   plan's weight region.

pub mod cpu;
pub mod cuda;
pub mod sampling;
pub mod session;
pub mod weights;

use crate::plan::{Plan, RegionKind};
use anyhow::{bail, ensure, Context, Result};

/// Host image of the plan's step region: per-step inputs, written by field name, copied to
/// the device in one transfer before each launch.
#[derive(Clone, Debug)]
pub struct StepBlock {
    pub bytes: Vec<u8>,
}

impl StepBlock {
    pub fn new(plan: &Plan) -> StepBlock {
        StepBlock { bytes: vec![0; plan.region_bytes[RegionKind::Step.index()] as usize] }
    }

    fn field<'a>(&'a mut self, plan: &Plan, name: &str, elem: usize, len: usize) -> Result<&'a mut [u8]> {
        let t = plan.tensor(name).with_context(|| format!("the plan has no step field `{name}`"))?;
        if t.region != RegionKind::Step {
            bail!("`{name}` is not a step field");
        }
        if t.dtype.size() != elem || (len * elem) as u64 > t.bytes {
            bail!("step field `{name}` holds {} bytes of {}; {len} values do not fit", t.bytes, t.dtype);
        }
        let o = t.offset as usize;
        Ok(&mut self.bytes[o..o + len * elem])
    }

    pub fn set_i32(&mut self, plan: &Plan, name: &str, vals: &[i32]) -> Result<()> {
        let dst = self.field(plan, name, 4, vals.len())?;
        dst.copy_from_slice(bytemuck::cast_slice(vals));
        Ok(())
    }
    pub fn set_u32(&mut self, plan: &Plan, name: &str, vals: &[u32]) -> Result<()> {
        let dst = self.field(plan, name, 4, vals.len())?;
        dst.copy_from_slice(bytemuck::cast_slice(vals));
        Ok(())
    }
    pub fn set_f32(&mut self, plan: &Plan, name: &str, vals: &[f32]) -> Result<()> {
        let dst = self.field(plan, name, 4, vals.len())?;
        dst.copy_from_slice(bytemuck::cast_slice(vals));
        Ok(())
    }
}

/// Something that runs a plan's programs: the CPU reference, CUDA eager, CUDA graphs.
pub trait Executor {
    fn plan(&self) -> &Plan;
    /// Copies `step` into the step region, runs program `program` to completion.
    fn run(&mut self, program: usize, step: &StepBlock) -> Result<()>;
    /// Bytes `[0, bytes)` of the planned output (or any persistent) tensor `name`.
    fn read_tensor(&mut self, name: &str, bytes: usize) -> Result<Vec<u8>>;
    /// Short name for messages (`cpu`, `cuda-graph`).
    fn name(&self) -> &'static str;
    /// Counters for `kiln run --stats` (allocations after load, copies, launches, syncs per
    /// step), where the executor keeps them.
    fn stats(&self) -> Option<String> {
        None
    }
    /// A developer's timing trace (`KILN_TRACE_OUT`, CUDA with `KILN_TRACE=1` kernels): start a
    /// window (called after prefill) and write what it recorded (called after decode). The
    /// defaults do nothing.
    fn trace_begin(&mut self) -> Result<()> {
        Ok(())
    }
    fn trace_end(&mut self) -> Result<()> {
        Ok(())
    }

    // Device loops (`loop.b{B}` programs) stream tokens through the plan's ring while they run.
    // The defaults suit an executor that runs every program to completion (the CPU).

    /// Starts `program` and may return before it has finished: a device loop on a GPU keeps
    /// running while the host reads its ring. The next `start`, `run` or `read_tensor` waits
    /// for it first. The default runs the program to completion.
    fn start(&mut self, program: usize, step: &StepBlock) -> Result<()> {
        self.run(program, step)
    }
    /// The first `dst.len()` words (`burst * rows`) of the ring of the device loop last
    /// started, as the host sees them now: word `k * rows + r` is row `r`'s token of loop step
    /// `k`, or -1 while this launch has not written it. Never blocks. Once [`Self::finished`]
    /// has answered `true`, every token of the launch is there.
    fn poll_ring(&mut self, dst: &mut [i32]) -> Result<()> {
        let burst = self.plan().options.burst;
        ensure!(burst > 0 && dst.len().is_multiple_of(burst), "poll_ring takes burst x rows words; the plan's burst is {burst}");
        let rows = dst.len() / burst;
        let control = self.read_tensor(crate::lower::names::LOOP_CONTROL, 8)?;
        let produced = u32::from_le_bytes([control[4], control[5], control[6], control[7]]) as usize;
        let ring = self.read_tensor(crate::lower::names::RING, 4 * dst.len())?;
        for (i, (d, b)) in dst.iter_mut().zip(ring.chunks_exact(4)).enumerate() {
            *d = if i < produced * rows { i32::from_le_bytes([b[0], b[1], b[2], b[3]]) } else { -1 };
        }
        Ok(())
    }
    /// Whether the program last started has finished. Never blocks (not a sync).
    fn finished(&mut self) -> Result<bool> {
        Ok(true)
    }
    /// Waits for the program last started to finish.
    fn wait(&mut self) -> Result<()> {
        Ok(())
    }
}
