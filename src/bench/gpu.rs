//! The GPU's identity and its read bandwidth, measured with kiln's own kernel
//! (`kernels/bench_read.cu`): the denominator-side ceiling of every roofline number.
//!
//! The bench allocates its own buffer (plain `cuMemAlloc`, never managed memory): it is not a
//! plan executor, and the buffer is freed before any model is loaded. The buffer is filled on
//! the device with seeded random words, read once to check the kernel's XOR against the host's,
//! then read `runs` times, each timed with CUDA events; the median is reported.
//!
//! Owns: the probe's launches and timing. Never: runs while an executor holds the GPU.

use crate::runtime::cuda::counters::Counters;
use crate::runtime::cuda::driver::{self, call, DeviceBuffer, Module, Stream};
use crate::runtime::cuda::nvrtc;
use crate::runtime::sampling::splitmix64;
use anyhow::{ensure, Context, Result};
use cudarc::driver::sys;
use serde::{Deserialize, Serialize};
use std::ffi::c_void;

/// Threads per block of `kiln_bench_read` / `kiln_bench_fill` (`KILN_BENCH_THREADS`).
const THREADS: u32 = 256;
/// Seed of the buffer's contents.
const FILL_SEED: u64 = 0x6b69_6c6e_6265_6e63;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GpuInfo {
    pub name: String,
    pub compute_capability: String,
    pub multiprocessors: i32,
    pub memory_bytes: u64,
    /// CUDA version the driver supports (`13.0`).
    pub driver_cuda: String,
    /// The driver's own version string (`580.159.04`), from nvidia-smi when it is there.
    pub driver_version: Option<String>,
}

pub fn gpu_info() -> Result<GpuInfo> {
    let counters = Counters::default();
    let d = driver::Device::open(crate::runtime::cuda::ordinal_from_env()?, &counters)?;
    Ok(GpuInfo {
        name: d.name.clone(),
        compute_capability: format!("{}.{}", d.compute_capability.0, d.compute_capability.1),
        multiprocessors: d.multiprocessors,
        memory_bytes: d.total_bytes,
        driver_cuda: driver::version_string(d.driver_version),
        driver_version: nvidia_smi_driver(),
    })
}

fn nvidia_smi_driver() -> Option<String> {
    let out = std::process::Command::new("nvidia-smi").args(["--query-gpu=driver_version", "--format=csv,noheader"]).output().ok()?;
    let s = String::from_utf8_lossy(&out.stdout).lines().next()?.trim().to_string();
    (out.status.success() && !s.is_empty()).then_some(s)
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Bandwidth {
    /// Bytes read per run.
    pub buffer_bytes: u64,
    /// Median over `samples`, bytes per second.
    pub bytes_per_s: f64,
    pub min_bytes_per_s: f64,
    pub max_bytes_per_s: f64,
    /// Every timed run, GB/s (1e9 bytes per second).
    pub samples_gbs: Vec<f64>,
    /// Blocks of `block` threads; the fastest of the grids tried.
    pub grid: u32,
    pub block: u32,
    /// Median GB/s of each grid tried: (blocks per SM, GB/s).
    pub grids_tried: Vec<(u32, f64)>,
    pub kernel: String,
}

/// A timing event, destroyed on drop.
struct TimingEvent(sys::CUevent);

impl TimingEvent {
    fn new(counters: &Counters) -> Result<TimingEvent> {
        let mut e: sys::CUevent = std::ptr::null_mut();
        call(counters, "cuEventCreate", unsafe { sys::cuEventCreate(&mut e, sys::CUevent_flags::CU_EVENT_DEFAULT as u32) })?;
        Ok(TimingEvent(e))
    }
    fn record(&self, counters: &Counters, stream: &Stream) -> Result<()> {
        call(counters, "cuEventRecord", unsafe { sys::cuEventRecord(self.0, stream.0) })
    }
}

impl Drop for TimingEvent {
    fn drop(&mut self) {
        // SAFETY: created by cuEventCreate; destroyed once.
        unsafe {
            sys::cuEventDestroy_v2(self.0);
        }
    }
}

fn launch(counters: &Counters, f: sys::CUfunction, grid: u32, stream: &Stream, args: &mut [*mut c_void]) -> Result<()> {
    call(counters, "cuLaunchKernel", unsafe {
        sys::cuLaunchKernel(f, grid, 1, 1, THREADS, 1, 1, 0, stream.0, args.as_mut_ptr(), std::ptr::null_mut())
    })
}

/// What `kiln_bench_read` must answer for the buffer `kiln_bench_fill` writes: the XOR of every
/// 32-bit word (see the kernel's CPU reference), on all cores.
fn expected_xor(n16: u64, seed: u64) -> u32 {
    let threads = std::thread::available_parallelism().map(|n| n.get() as u64).unwrap_or(4);
    let per = n16.div_ceil(threads);
    std::thread::scope(|s| {
        let parts: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let mut acc = 0u64;
                    for i in t * per..((t + 1) * per).min(n16) {
                        acc ^= splitmix64(seed ^ (2 * i)) ^ splitmix64(seed ^ (2 * i + 1));
                    }
                    acc
                })
            })
            .collect();
        let acc = parts.into_iter().map(|h| h.join().expect("xor thread")).fold(0u64, |a, b| a ^ b);
        (acc as u32) ^ ((acc >> 32) as u32)
    })
}

pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Read bandwidth over a `bytes`-byte buffer (rounded down to 16 bytes), median of `runs`.
pub fn read_bandwidth(bytes: u64, runs: usize) -> Result<Bandwidth> {
    ensure!(bytes >= 1 << 20, "the bandwidth buffer must be at least 1 MiB");
    ensure!(runs >= 1, "at least one bandwidth run");
    let counters = Counters::default();
    let device = driver::Device::open(crate::runtime::cuda::ordinal_from_env()?, &counters)?;
    let arch = nvrtc::arch_for_compute_capability(device.compute_capability.0, device.compute_capability.1);
    let compiled = nvrtc::load_or_compile(&arch, false).with_context(|| format!("compiling kernels/ (with bench_read.cu) for {arch}"))?;
    // Everything below lives in `device`'s context and is dropped before it.
    let result = (|| -> Result<Bandwidth> {
        let module = Module::load(&counters, &compiled.cubin)?;
        let fill = module.function(&counters, "kiln_bench_fill")?;
        let read = module.function(&counters, "kiln_bench_read")?;
        let stream = Stream::new(&counters)?;
        let n16 = bytes / 16;
        let buf = DeviceBuffer::alloc(&counters, n16 * 16, "bandwidth probe")?;
        let out = DeviceBuffer::alloc(&counters, 4, "bandwidth probe result")?;
        let sms = device.multiprocessors.max(1) as u32;

        let (mut p_buf, mut p_n, mut p_seed, mut p_out) = (buf.ptr, n16, FILL_SEED, out.ptr);
        let mut fill_args =
            [&mut p_buf as *mut u64 as *mut c_void, &mut p_n as *mut u64 as *mut c_void, &mut p_seed as *mut u64 as *mut c_void];
        launch(&counters, fill, sms * 8, &stream, &mut fill_args)?;
        let mut read_args =
            [&mut p_buf as *mut u64 as *mut c_void, &mut p_n as *mut u64 as *mut c_void, &mut p_out as *mut u64 as *mut c_void];

        // One checked read: the kernel must see every word.
        call(&counters, "cuMemsetD32Async", unsafe { sys::cuMemsetD32Async(out.ptr, 0, 1, stream.0) })?;
        launch(&counters, read, sms * 4, &stream, &mut read_args)?;
        stream.sync(&counters).context("filling and reading the bandwidth buffer")?;
        let mut got = 0u32;
        call(&counters, "cuMemcpyDtoH", unsafe { sys::cuMemcpyDtoH_v2(&mut got as *mut u32 as *mut c_void, out.ptr, 4) })?;
        let want = expected_xor(n16, FILL_SEED);
        ensure!(
            got == want,
            "kiln_bench_read computed XOR {got:#010x} over the buffer, the host {want:#010x}: the probe does not read every byte"
        );

        let (start, stop) = (TimingEvent::new(&counters)?, TimingEvent::new(&counters)?);
        let time_once = |grid: u32, args: &mut [*mut c_void]| -> Result<f64> {
            start.record(&counters, &stream)?;
            launch(&counters, read, grid, &stream, args)?;
            stop.record(&counters, &stream)?;
            call(&counters, "cuEventSynchronize", unsafe { sys::cuEventSynchronize(stop.0) })?;
            let mut ms = 0f32;
            call(&counters, "cuEventElapsedTime", unsafe { sys::cuEventElapsedTime_v2(&mut ms, start.0, stop.0) })?;
            Ok((n16 * 16) as f64 / (ms as f64 * 1e-3) / 1e9)
        };
        // Pick the grid: a few blocks per SM, each timed 3 times after a warm-up.
        let mut grids_tried = Vec::new();
        for per_sm in [2u32, 4, 8, 16] {
            time_once(sms * per_sm, &mut read_args)?;
            let s: Vec<f64> = (0..3).map(|_| time_once(sms * per_sm, &mut read_args)).collect::<Result<_>>()?;
            grids_tried.push((per_sm, median(&s)));
        }
        let best = grids_tried.iter().max_by(|a, b| a.1.total_cmp(&b.1)).map(|g| g.0).unwrap_or(4);
        let samples: Vec<f64> = (0..runs).map(|_| time_once(sms * best, &mut read_args)).collect::<Result<_>>()?;
        let gbs = median(&samples);
        Ok(Bandwidth {
            buffer_bytes: n16 * 16,
            bytes_per_s: gbs * 1e9,
            min_bytes_per_s: samples.iter().cloned().fold(f64::INFINITY, f64::min) * 1e9,
            max_bytes_per_s: samples.iter().cloned().fold(0.0, f64::max) * 1e9,
            samples_gbs: samples,
            grid: sms * best,
            block: THREADS,
            grids_tried,
            kernel: "kiln_bench_read (kernels/bench_read.cu): 16-byte __ldg, grid-stride, 8 loads in flight per thread".into(),
        })
    })();
    drop(device);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_xor_matches_a_plain_loop_over_the_fill_reference() {
        let (n16, seed) = (1000u64, 42u64);
        let mut acc = 0u32;
        for i in 0..n16 {
            let (a, b) = (splitmix64(seed ^ (2 * i)), splitmix64(seed ^ (2 * i + 1)));
            acc ^= (a as u32) ^ ((a >> 32) as u32) ^ (b as u32) ^ ((b >> 32) as u32);
        }
        assert_eq!(expected_xor(n16, seed), acc);
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }
}
