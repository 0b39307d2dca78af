//! CUDA executors of a plan (eager and graph). Libraries (libcuda, libnvrtc, libcublasLt) are loaded at
//! run time, so kiln builds and tests with no CUDA installed.

pub mod abi;
pub mod blaslt;
pub mod counters;
pub mod driver;
pub mod exec;
pub mod graph;
pub mod placement;

pub use driver::cuda_available;
pub use exec::{free_memory, ordinal_from_env, CudaExecutor, Mode};
pub mod kernels;
pub mod nvrtc;
