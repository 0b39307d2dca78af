//! Executors of a plan. Each one allocates exactly the plan's regions at load and then only
//! follows launch records: the runtime never allocates after `load` and never computes an
//! address.
//!
//! - [`cpu`]: the reference executor, byte-for-byte over host regions with the plan's layout;
//!   the oracle the GPU executors are checked against.

pub mod cpu;
pub mod cuda;
pub mod sampling;
pub mod session;
pub mod weights;

use crate::plan::{Plan, RegionKind};
use anyhow::{bail, Context, Result};

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
}
