//! kiln: an LLM inference engine that decides everything before the GPU runs.
//!
//! Pipeline: [`model`] (load a config and weights) -> [`lower`] (config -> op IR per phase and
//! bucket) -> [`plan`] (fixed regions, offsets and launch records) -> [`runtime`] (execute a
//! plan: CPU reference, CUDA eager, CUDA graphs).

/// The git commit this binary is built from (12 hex digits, `-dirty` when its sources differ from it;
/// `unknown` outside a git checkout): set by `build.rs`.
pub const BUILD_COMMIT: &str = env!("KILN_BUILD_COMMIT");

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
