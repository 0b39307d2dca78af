//! kiln: an LLM inference engine that decides everything before the GPU runs.
//!
//! Pipeline: [`model`] (load a config and weights) -> [`lower`] (config -> op IR per phase and
//! bucket) -> [`plan`] (fixed regions, offsets and launch records) -> [`runtime`] (execute a
//! plan: CPU reference, CUDA eager, CUDA graphs).

pub mod bench;
pub mod bundled;
pub mod cli;
pub mod gate;
pub mod ir;
pub mod lower;
pub mod model;
pub mod plan;
pub mod runtime;
pub mod synth;
