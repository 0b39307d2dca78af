//! CUDA executors of a plan (eager and graph). Libraries (libcuda, libnvrtc) are loaded at
//! run time, so kiln builds and tests with no CUDA installed.

pub mod abi;
