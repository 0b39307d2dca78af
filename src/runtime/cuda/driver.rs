//! The CUDA driver API as kiln uses it: finding libcuda, checking the driver version, opening
//! a device, and the few owned objects (device memory, pinned host memory, stream, module,
//! graph) with their `Drop`s. Every call goes through [`call`], which counts it and turns a
//! failure into an error naming the call and the driver's own error name.
//!
//! Owns: the only `unsafe` calls into `cudarc::driver::sys`, and the only device and pinned
//! allocations ([`DeviceBuffer::alloc`], [`PinnedBuffer::alloc`], [`MappedBuffer::alloc`]), so
//! the counters see all.
//! Never: decides what to allocate or launch (that is the plan's, read by `exec`).
//!
//! cudarc loads libcuda lazily and panics when it is missing, so [`init`] first asks whether
//! the library can be opened at all and then makes its first calls under `catch_unwind`.

use super::counters::Counters;
use anyhow::{bail, Context, Result};
use cudarc::driver::sys;
use std::ffi::{c_void, CStr};
use std::sync::OnceLock;

pub use sys::{CUdeviceptr, CUfunction, CUgraph, CUgraphExec, CUgraphNode, CUstream};

/// Oldest driver kiln runs on, as `cuDriverGetVersion` reports it (1000 * major + 10 * minor).
pub const MIN_DRIVER_VERSION: i32 = 13000;

/// How the driver errors end: the hint for `kiln run`, whose `--device cpu` needs no GPU.
pub const CPU_HINT: &str = "; run with --device cpu";

pub const NO_DRIVER: &str = "no NVIDIA driver found (libcuda.so.1 could not be loaded); run with --device cpu";

/// `e`'s text without [`CPU_HINT`], for commands that have no `--device cpu` (`kiln gate`).
pub fn without_cpu_hint(e: &anyhow::Error) -> String {
    let text = format!("{e:#}");
    text.strip_suffix(CPU_HINT).map(str::to_string).unwrap_or(text)
}

/// `13000` -> `13.0`.
pub fn version_string(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

/// The driver's name and description of `r` (`CUDA_ERROR_OUT_OF_MEMORY: out of memory`).
pub fn error_text(r: sys::CUresult) -> String {
    let mut name: *const std::ffi::c_char = std::ptr::null();
    let mut desc: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: both calls only write a pointer to a static string owned by the driver.
    unsafe {
        sys::cuGetErrorName(r, &mut name);
        sys::cuGetErrorString(r, &mut desc);
    }
    let s = |p: *const std::ffi::c_char| {
        if p.is_null() {
            None
        } else {
            // SAFETY: the driver returns NUL-terminated static strings.
            Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        }
    };
    match (s(name), s(desc)) {
        (Some(n), Some(d)) => format!("{n}: {d}"),
        (Some(n), None) => n,
        _ => format!("{r:?}"),
    }
}

pub fn check(r: sys::CUresult, what: &str) -> Result<()> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        bail!("{what} failed: {}", error_text(r))
    }
}

/// Counts one driver call and checks its result.
pub fn call(counters: &Counters, what: &str, r: sys::CUresult) -> Result<()> {
    counters.driver_call();
    check(r, what)
}

/// What [`init`] found: the driver version and the number of devices.
#[derive(Clone, Copy, Debug)]
pub struct DriverInfo {
    pub version: i32,
    pub devices: i32,
}

/// Loads libcuda, calls `cuInit` once, checks the version. Every entry point calls this first;
/// the answer (or the error) is computed once per process.
pub fn init() -> Result<DriverInfo> {
    static INIT: OnceLock<std::result::Result<DriverInfo, String>> = OnceLock::new();
    INIT.get_or_init(|| init_once().map_err(|e| format!("{e:#}"))).clone().map_err(|e| anyhow::anyhow!(e))
}

fn init_once() -> Result<DriverInfo> {
    // SAFETY: only tries to dlopen the library names cudarc would use.
    if !unsafe { sys::is_culib_present() } {
        bail!(NO_DRIVER);
    }
    let first_calls = std::panic::catch_unwind(|| -> Result<DriverInfo> {
        let mut version = 0i32;
        // SAFETY: plain out-parameter calls.
        check(unsafe { sys::cuDriverGetVersion(&mut version) }, "cuDriverGetVersion")?;
        if version < MIN_DRIVER_VERSION {
            bail!(
                "the NVIDIA driver supports CUDA {} (driver API version {version}), but kiln needs CUDA {} ({MIN_DRIVER_VERSION}) or newer; update the NVIDIA driver or run with --device cpu",
                version_string(version),
                version_string(MIN_DRIVER_VERSION)
            );
        }
        check(unsafe { sys::cuInit(0) }, "cuInit").context("the NVIDIA driver is installed but could not be initialised")?;
        let mut devices = 0i32;
        check(unsafe { sys::cuDeviceGetCount(&mut devices) }, "cuDeviceGetCount")?;
        Ok(DriverInfo { version, devices })
    });
    match first_calls {
        Ok(r) => r,
        Err(_) => {
            bail!("the NVIDIA driver library was found but is missing entry points kiln needs (too old or broken?); run with --device cpu")
        }
    }
}

/// `Ok` when a driver is present and sees at least one device: the CLI's default device choice.
pub fn cuda_available() -> Result<()> {
    let info = init()?;
    if info.devices < 1 {
        bail!("the NVIDIA driver found no GPU; run with --device cpu");
    }
    Ok(())
}

/// One device and its primary context, current on the thread that opened it.
pub struct Device {
    pub ordinal: i32,
    pub handle: sys::CUdevice,
    pub ctx: sys::CUcontext,
    pub name: String,
    pub compute_capability: (i32, i32),
    pub multiprocessors: i32,
    pub total_bytes: u64,
    pub driver_version: i32,
}

impl Device {
    pub fn open(ordinal: i32, counters: &Counters) -> Result<Device> {
        let info = init()?;
        if info.devices < 1 {
            bail!("the NVIDIA driver found no GPU; run with --device cpu");
        }
        if ordinal < 0 || ordinal >= info.devices {
            bail!("GPU {ordinal} does not exist: the driver sees {} GPU(s)", info.devices);
        }
        let mut handle: sys::CUdevice = 0;
        // SAFETY: out-parameter calls on a valid ordinal.
        call(counters, "cuDeviceGet", unsafe { sys::cuDeviceGet(&mut handle, ordinal) })?;
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        call(counters, "cuDevicePrimaryCtxRetain", unsafe { sys::cuDevicePrimaryCtxRetain(&mut ctx, handle) })?;
        let mut dev = Device {
            ordinal,
            handle,
            ctx,
            name: String::new(),
            compute_capability: (0, 0),
            multiprocessors: 0,
            total_bytes: 0,
            driver_version: info.version,
        };
        dev.make_current(counters)?;
        let mut name = [0 as std::ffi::c_char; 256];
        call(counters, "cuDeviceGetName", unsafe { sys::cuDeviceGetName(name.as_mut_ptr(), 256, handle) })?;
        // SAFETY: the driver NUL-terminates within the 256 bytes it was given.
        dev.name = unsafe { CStr::from_ptr(name.as_ptr()) }.to_string_lossy().into_owned();
        let attr = |a: sys::CUdevice_attribute| -> Result<i32> {
            let mut v = 0;
            call(counters, "cuDeviceGetAttribute", unsafe { sys::cuDeviceGetAttribute(&mut v, a, handle) })?;
            Ok(v)
        };
        use sys::CUdevice_attribute as A;
        dev.compute_capability =
            (attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?, attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?);
        dev.multiprocessors = attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        let mut total = 0usize;
        call(counters, "cuDeviceTotalMem", unsafe { sys::cuDeviceTotalMem_v2(&mut total, handle) })?;
        dev.total_bytes = total as u64;
        Ok(dev)
    }

    /// `sm_90`-style architecture name.
    pub fn arch(&self) -> String {
        format!("sm_{}{}", self.compute_capability.0, self.compute_capability.1)
    }

    pub fn make_current(&self, counters: &Counters) -> Result<()> {
        // SAFETY: the context is retained for the life of `self`.
        call(counters, "cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(self.ctx) })
    }

    /// (free, total) device bytes.
    pub fn mem_info(&self, counters: &Counters) -> Result<(u64, u64)> {
        let (mut free, mut total) = (0usize, 0usize);
        call(counters, "cuMemGetInfo", unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) })?;
        Ok((free as u64, total as u64))
    }

    pub fn describe(&self) -> String {
        format!(
            "GPU {} {} ({}, {} SMs, {:.1} GiB, driver CUDA {})",
            self.ordinal,
            self.name,
            self.arch(),
            self.multiprocessors,
            self.total_bytes as f64 / (1u64 << 30) as f64,
            version_string(self.driver_version)
        )
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: releases the retain taken in `open`; every object made in this context is
        // dropped before the device (field order in `CudaExecutor`).
        unsafe {
            sys::cuDevicePrimaryCtxRelease_v2(self.handle);
        }
    }
}

/// Device memory, freed on drop. The only way kiln allocates device memory.
pub struct DeviceBuffer {
    pub ptr: sys::CUdeviceptr,
    pub bytes: u64,
}

impl DeviceBuffer {
    pub fn alloc(counters: &Counters, bytes: u64, what: &str) -> Result<DeviceBuffer> {
        let mut ptr: sys::CUdeviceptr = 0;
        counters.device_alloc(bytes);
        call(counters, "cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut ptr, bytes as usize) })
            .with_context(|| format!("allocating {} for the {what} region", crate::plan::planner::fmt_bytes(bytes)))?;
        Ok(DeviceBuffer { ptr, bytes })
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from cuMemAlloc and is freed once.
        unsafe {
            sys::cuMemFree_v2(self.ptr);
        }
    }
}

/// Page-locked host memory, freed on drop: the step block, the output mirror and the weight
/// staging buffers. The only way kiln allocates pinned memory.
pub struct PinnedBuffer {
    ptr: *mut u8,
    bytes: usize,
}

impl PinnedBuffer {
    pub fn alloc(counters: &Counters, bytes: usize) -> Result<PinnedBuffer> {
        // A zero-byte buffer still gets a real (tiny) allocation so pointers are never null.
        let n = bytes.max(1);
        let mut p: *mut c_void = std::ptr::null_mut();
        counters.pinned_alloc(n as u64);
        call(counters, "cuMemHostAlloc", unsafe { sys::cuMemHostAlloc(&mut p, n, 0) })
            .with_context(|| format!("allocating {} of pinned host memory", crate::plan::planner::fmt_bytes(n as u64)))?;
        // SAFETY: fresh allocation of `n` bytes; zeroed so nothing uninitialised is ever read.
        unsafe { std::ptr::write_bytes(p as *mut u8, 0, n) };
        Ok(PinnedBuffer { ptr: p as *mut u8, bytes })
    }
    pub fn len(&self) -> usize {
        self.bytes
    }
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` is valid for `bytes` bytes for the life of `self`; device writes into it
        // happen only between a launch and the sync that `run` waits for.
        unsafe { std::slice::from_raw_parts(self.ptr, self.bytes) }
    }
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes the host view unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.bytes) }
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from cuMemHostAlloc and is freed once.
        unsafe {
            sys::cuMemFreeHost(self.ptr as *mut c_void);
        }
    }
}

/// Page-locked host memory mapped into the device's address space, freed on drop: the ring of
/// device loops, which kernels write and the host reads while they run, with no copy and no
/// sync. Allocated at load like every other region.
pub struct MappedBuffer {
    ptr: *mut u8,
    bytes: usize,
    /// The address kernels use for it.
    pub device_ptr: sys::CUdeviceptr,
}

impl MappedBuffer {
    pub fn alloc(counters: &Counters, bytes: usize, what: &str) -> Result<MappedBuffer> {
        let n = bytes.max(1);
        let mut p: *mut c_void = std::ptr::null_mut();
        counters.pinned_alloc(n as u64);
        call(counters, "cuMemHostAlloc", unsafe { sys::cuMemHostAlloc(&mut p, n, sys::CU_MEMHOSTALLOC_DEVICEMAP) }).with_context(|| {
            format!("allocating {} of mapped host memory for the {what} region", crate::plan::planner::fmt_bytes(n as u64))
        })?;
        // From here on a failure must free `p`: wrap it first.
        let mut buf = MappedBuffer { ptr: p as *mut u8, bytes, device_ptr: 0 };
        // SAFETY: fresh allocation of `n` bytes; zeroed so nothing uninitialised is ever read.
        unsafe { std::ptr::write_bytes(buf.ptr, 0, n) };
        call(counters, "cuMemHostGetDevicePointer", unsafe { sys::cuMemHostGetDevicePointer_v2(&mut buf.device_ptr, p, 0) })
            .with_context(|| format!("mapping the {what} region into the device's address space"))?;
        Ok(buf)
    }
    pub fn len(&self) -> usize {
        self.bytes
    }
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }
    /// Little-endian 32-bit words `[first, first + dst.len())`, each read once with a volatile
    /// load: the device may be writing other words meanwhile (an aligned 4-byte word is never
    /// seen half-written).
    pub fn read_words(&self, first: usize, dst: &mut [i32]) {
        assert!((first + dst.len()) * 4 <= self.bytes, "read of {} words at {first} past a {}-byte mapped buffer", dst.len(), self.bytes);
        let base = self.ptr as *const i32;
        for (i, d) in dst.iter_mut().enumerate() {
            // SAFETY: in bounds (asserted), 4-byte aligned (cuMemHostAlloc is page-aligned and
            // callers pass word indices), and the memory lives as long as `self`.
            *d = i32::from_le(unsafe { std::ptr::read_volatile(base.add(first + i)) });
        }
    }
    /// Sets words `[first, first + count)` to `value`. Only while no kernel can write them.
    pub fn fill_words(&mut self, first: usize, count: usize, value: i32) {
        assert!((first + count) * 4 <= self.bytes, "fill of {count} words at {first} past a {}-byte mapped buffer", self.bytes);
        let base = self.ptr as *mut i32;
        for i in 0..count {
            // SAFETY: as in `read_words`; `&mut self` and the caller's promise make it exclusive.
            unsafe { std::ptr::write_volatile(base.add(first + i), value.to_le()) };
        }
    }
}

impl Drop for MappedBuffer {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from cuMemHostAlloc and is freed once.
        unsafe {
            sys::cuMemFreeHost(self.ptr as *mut c_void);
        }
    }
}

/// A non-blocking stream, destroyed on drop.
pub struct Stream(pub sys::CUstream);

impl Stream {
    pub fn new(counters: &Counters) -> Result<Stream> {
        let mut s: sys::CUstream = std::ptr::null_mut();
        let flags = sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32;
        call(counters, "cuStreamCreate", unsafe { sys::cuStreamCreate(&mut s, flags) })?;
        Ok(Stream(s))
    }
    pub fn sync(&self, counters: &Counters) -> Result<()> {
        counters.host_sync();
        call(counters, "cuStreamSynchronize", unsafe { sys::cuStreamSynchronize(self.0) })
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: created by cuStreamCreate; destroyed once.
        unsafe {
            sys::cuStreamDestroy_v2(self.0);
        }
    }
}

/// An event for ordering host reuse of staging buffers against copies.
pub struct Event(pub sys::CUevent);

impl Event {
    pub fn new(counters: &Counters) -> Result<Event> {
        let mut e: sys::CUevent = std::ptr::null_mut();
        let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
        call(counters, "cuEventCreate", unsafe { sys::cuEventCreate(&mut e, flags) })?;
        Ok(Event(e))
    }
    /// An event that records time (for `elapsed_ms`): load-time measurements only.
    pub fn timed(counters: &Counters) -> Result<Event> {
        let mut e: sys::CUevent = std::ptr::null_mut();
        call(counters, "cuEventCreate", unsafe { sys::cuEventCreate(&mut e, 0) })?;
        Ok(Event(e))
    }
    /// Milliseconds between two completed timed events.
    pub fn elapsed_ms(&self, counters: &Counters, later: &Event) -> Result<f32> {
        let mut ms = 0f32;
        call(counters, "cuEventElapsedTime", unsafe { sys::cuEventElapsedTime_v2(&mut ms, self.0, later.0) })?;
        Ok(ms)
    }
    pub fn record(&self, counters: &Counters, stream: &Stream) -> Result<()> {
        call(counters, "cuEventRecord", unsafe { sys::cuEventRecord(self.0, stream.0) })
    }
    pub fn sync(&self, counters: &Counters) -> Result<()> {
        counters.host_sync();
        call(counters, "cuEventSynchronize", unsafe { sys::cuEventSynchronize(self.0) })
    }
    /// Whether the work recorded before the event has finished; never blocks (not a sync).
    pub fn query(&self, counters: &Counters) -> Result<bool> {
        counters.driver_call();
        match unsafe { sys::cuEventQuery(self.0) } {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            r => check(r, "cuEventQuery").map(|_| false),
        }
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: created by cuEventCreate; destroyed once.
        unsafe {
            sys::cuEventDestroy_v2(self.0);
        }
    }
}

/// A loaded module (CUBIN or PTX image), unloaded on drop.
pub struct Module(pub sys::CUmodule);

impl Module {
    pub fn load(counters: &Counters, image: &[u8]) -> Result<Module> {
        // cuModuleLoadData needs PTX to be NUL-terminated; CUBIN is self-delimiting.
        let mut owned;
        let data: &[u8] = if image.starts_with(b"\x7fELF") || image.last() == Some(&0) {
            image
        } else {
            owned = image.to_vec();
            owned.push(0);
            &owned
        };
        let mut m: sys::CUmodule = std::ptr::null_mut();
        call(counters, "cuModuleLoadData", unsafe { sys::cuModuleLoadData(&mut m, data.as_ptr() as *const c_void) })
            .context("loading the compiled kernels into the GPU")?;
        Ok(Module(m))
    }
    pub fn function(&self, counters: &Counters, symbol: &str) -> Result<sys::CUfunction> {
        let name = std::ffi::CString::new(symbol)?;
        let mut f: sys::CUfunction = std::ptr::null_mut();
        call(counters, "cuModuleGetFunction", unsafe { sys::cuModuleGetFunction(&mut f, self.0, name.as_ptr()) })
            .with_context(|| format!("the compiled kernels have no function `{symbol}` (kernel ABI: see src/runtime/cuda/abi.rs)"))?;
        Ok(f)
    }
    /// The device address and size of the module global `symbol`, or `None` where the module
    /// has no such global (e.g. `kiln_trace`, which only a `KILN_TRACE=1` build defines).
    pub fn global(&self, counters: &Counters, symbol: &str) -> Result<Option<(sys::CUdeviceptr, usize)>> {
        let name = std::ffi::CString::new(symbol)?;
        let (mut ptr, mut bytes): (sys::CUdeviceptr, usize) = (0, 0);
        // SAFETY: a live module, a NUL-terminated name, out-pointers to locals.
        let r = unsafe { sys::cuModuleGetGlobal_v2(&mut ptr, &mut bytes, self.0, name.as_ptr()) };
        if r == sys::CUresult::CUDA_ERROR_NOT_FOUND {
            return Ok(None);
        }
        call(counters, "cuModuleGetGlobal", r)?;
        Ok(Some((ptr, bytes)))
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        // SAFETY: loaded by cuModuleLoadData; unloaded once.
        unsafe {
            sys::cuModuleUnload(self.0);
        }
    }
}

/// Raises a function's dynamic shared memory limit to what its launches need (the default limit is
/// 48 KiB less the kernel's static shared memory).
// `f` is an opaque driver handle, passed through, never dereferenced here.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn set_max_dynamic_shared(counters: &Counters, f: sys::CUfunction, bytes: u32) -> Result<()> {
    let attr = sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
    call(counters, "cuFuncSetAttribute", unsafe { sys::cuFuncSetAttribute(f, attr, bytes as i32) })
}
