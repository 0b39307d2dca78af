//! Compiles kiln's CUDA kernels (`kernels/`, embedded by `build.rs`, see [`super::kernels`])
//! with NVRTC into one CUBIN for a real architecture, with a disk cache.
//!
//! Owns: the NVRTC options, the include directory search, the cache location and key, and
//! the reading of kernel names out of a CUBIN. Never: touches a device (compiling needs no GPU;
//! [`compile_for_arch`] works on a machine with only libnvrtc and the CUDA headers).
//!
//! libnvrtc is loaded at run time (cudarc's dynamic loading, which searches `LD_LIBRARY_PATH`
//! and the loader's cache for `libnvrtc.so`, `libnvrtc.so.13`, ...). cudarc panics on first use
//! when the library is absent, so every entry point probes for it first and answers
//! [`NvrtcError::LibraryMissing`]; any panic left inside cudarc becomes an error too.
//!
//! All sources compile as one translation unit (`kiln_kernels.cu`, which includes each `*.cu`;
//! every embedded file is registered as an NVRTC header), so the result is one module holding
//! every `kiln_*` symbol. NVRTC has no `-Werror`: kiln fails on any warning in the log instead.

use super::kernels;
use cudarc::nvrtc::sys;
use std::ffi::{c_char, CStr, CString};
use std::path::{Path, PathBuf};

/// Name of the generated translation unit that includes every kernel file.
pub const TRANSLATION_UNIT: &str = "kiln_kernels.cu";

/// Headers the kernels include from the CUDA toolkit; a directory holding both is an include
/// directory.
const CUDA_HEADERS: [&str; 2] = ["cuda_fp16.h", "cuda_bf16.h"];

#[derive(Debug, thiserror::Error)]
pub enum NvrtcError {
    #[error(
        "libnvrtc not found: install the CUDA toolkit or `pip install nvidia-cuda-nvrtc==13.0.*` and set \
         LD_LIBRARY_PATH to the directory holding libnvrtc.so.13 (for the wheel: <site-packages>/nvidia/cu13/lib)"
    )]
    LibraryMissing,
    #[error(
        "CUDA headers (cuda_fp16.h, cuda_bf16.h) not found; searched: {searched}. Set KILN_CUDA_INCLUDE to the \
         CUDA include directory (e.g. /usr/local/cuda/include, or <site-packages>/nvidia/cu13/include from \
         `pip install nvidia-cuda-runtime==13.0.*`)"
    )]
    HeadersMissing { searched: String },
    #[error("NVRTC failed to compile the kernels for {arch} (failing files: {files}):\n{log}")]
    Compile { arch: String, files: String, log: String },
    #[error("NVRTC compiled the kernels for {arch} with warnings, which kiln treats as errors (files: {files}):\n{log}")]
    Warnings { arch: String, files: String, log: String },
    #[error("NVRTC {call} failed: {code}{hint}")]
    Api { call: &'static str, code: String, hint: &'static str },
    #[error("NVRTC produced no CUBIN for {arch}: give a real architecture such as sm_90, not a virtual one (compute_90)")]
    NoCubin { arch: String },
    #[error("libnvrtc panicked in {0} (is it an incompatible version? kiln needs NVRTC 12 or 13)")]
    Panicked(&'static str),
}

/// A compiled module: every kernel of `kernels/` for one architecture.
#[derive(Clone, Debug)]
pub struct CompiledKernels {
    /// The `--gpu-architecture` it was compiled for (`sm_90a`).
    pub arch: String,
    /// The CUBIN (an ELF image) to load with `cuModuleLoadData`.
    pub cubin: Vec<u8>,
    /// NVRTC (major, minor).
    pub nvrtc_version: (i32, i32),
    /// The NVRTC log (empty on a clean compile or a cache hit).
    pub log: String,
    /// Whether it came from the disk cache.
    pub from_cache: bool,
}

/// The architecture kiln compiles for on a device of compute capability `major.minor`:
/// `sm_90a` on Hopper (9.0, enables its arch-specific instructions), `sm_{major}{minor}` otherwise.
pub fn arch_for_compute_capability(major: i32, minor: i32) -> String {
    if (major, minor) == (9, 0) {
        "sm_90a".to_string()
    } else {
        format!("sm_{major}{minor}")
    }
}

/// Whether libnvrtc can be loaded (probes once; never panics).
pub fn is_available() -> bool {
    static PRESENT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    // SAFETY: loads the library by name with libloading; no symbol is called.
    *PRESENT.get_or_init(|| unsafe { sys::is_culib_present() })
}

/// Runs `f`, which calls into libnvrtc, after checking that the library loads, turning a
/// panic inside cudarc into an error.
fn with_nvrtc<T>(what: &'static str, f: impl FnOnce() -> Result<T, NvrtcError>) -> Result<T, NvrtcError> {
    if !is_available() {
        return Err(NvrtcError::LibraryMissing);
    }
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(Err(NvrtcError::Panicked(what)))
}

fn check(call: &'static str, r: sys::nvrtcResult) -> Result<(), NvrtcError> {
    if r == sys::nvrtcResult::NVRTC_SUCCESS {
        return Ok(());
    }
    let hint = if r == sys::nvrtcResult::NVRTC_ERROR_BUILTIN_OPERATION_FAILURE {
        " (libnvrtc-builtins could not be loaded: add the directory holding libnvrtc to LD_LIBRARY_PATH)"
    } else {
        ""
    };
    Err(NvrtcError::Api { call, code: format!("{r:?}"), hint })
}

/// NVRTC (major, minor).
pub fn nvrtc_version() -> Result<(i32, i32), NvrtcError> {
    with_nvrtc("nvrtcVersion", || {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: two valid out-pointers.
        check("nvrtcVersion", unsafe { sys::nvrtcVersion(&mut major, &mut minor) })?;
        Ok((major, minor))
    })
}

/// The CUDA include directory: `$KILN_CUDA_INCLUDE`, else `$CUDA_HOME/include`,
/// `$CUDA_PATH/include`, `/usr/local/cuda/include`, else `<dir>/../include` for each `dir` of
/// `LD_LIBRARY_PATH` (the layout of NVIDIA's pip wheels: `nvidia/cu13/{lib,include}`). The first
/// that holds cuda_fp16.h and cuda_bf16.h wins; `KILN_CUDA_INCLUDE`, when set, must.
pub fn cuda_include_dir() -> Result<PathBuf, NvrtcError> {
    let has_headers = |dir: &Path| CUDA_HEADERS.iter().all(|h| dir.join(h).is_file());
    if let Some(dir) = std::env::var_os("KILN_CUDA_INCLUDE") {
        let dir = PathBuf::from(dir);
        return if has_headers(&dir) {
            Ok(dir)
        } else {
            Err(NvrtcError::HeadersMissing { searched: format!("KILN_CUDA_INCLUDE={}", dir.display()) })
        };
    }
    let mut candidates: Vec<PathBuf> = Vec::new();
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(root) = std::env::var_os(var) {
            candidates.push(PathBuf::from(root).join("include"));
        }
    }
    candidates.push(PathBuf::from("/usr/local/cuda/include"));
    if let Some(paths) = std::env::var_os("LD_LIBRARY_PATH") {
        for lib in std::env::split_paths(&paths).filter(|p| !p.as_os_str().is_empty()) {
            candidates.push(lib.join("..").join("include"));
        }
    }
    candidates.iter().find(|d| has_headers(d)).cloned().ok_or_else(|| NvrtcError::HeadersMissing {
        searched: candidates.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", "),
    })
}

/// The options kiln compiles with (the include directory last). `KILN_NVRTC_DEFINES`, a
/// comma-separated list of `NAME` or `NAME=VALUE`, adds `-D` options: a developer's knob for the
/// kernels' tuning macros and experiments (e.g. `KILN_LINEAR_GEMV_DEPTH=8`); it is part of the cache key.
pub fn options(arch: &str, include_dir: &Path, gemv_tiles: bool) -> Vec<String> {
    let mut o = vec![format!("--gpu-architecture={arch}"), "-std=c++17".to_string(), "-lineinfo".to_string()];
    // The GEMV kernels for tile-packed weights (`lower::tiles`), for a plan that has them.
    if gemv_tiles {
        o.push("-DKILN_GEMV_TILES=1".to_string());
    }
    // Which GEMV kernels walk their tiles (kernels/linear.cu): the plan-time knob's bits.
    let walk = crate::plan::geometry::gemv_walk_define();
    if walk != 1 {
        o.push(format!("-DKILN_GEMV_WALK={walk}"));
    }
    if let Ok(defs) = std::env::var("KILN_NVRTC_DEFINES") {
        o.extend(defs.split(',').map(str::trim).filter(|d| !d.is_empty()).map(|d| format!("-D{d}")));
    }
    o.push(format!("--include-path={}", include_dir.display()));
    o
}

/// The source of the translation unit: one `#include` per kernel file, in name order.
pub fn translation_unit() -> String {
    let mut src = String::from("// Generated by kiln: every kernel of kernels/ in one module.\n");
    for (name, _) in kernels::kernel_files() {
        src.push_str(&format!("#include \"{name}\"\n"));
    }
    src
}

/// Files named at the start of the log's error (or warning) lines: `rope.cu(42): error: ...`.
fn files_in_log(log: &str, kind: &str) -> String {
    let mut files: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(kind))
        .filter_map(|l| l.split_once('(').map(|(f, _)| f.trim()))
        .filter(|f| !f.is_empty() && !f.contains(' '))
        .collect();
    files.sort();
    files.dedup();
    if files.is_empty() {
        "unknown".to_string()
    } else {
        files.join(", ")
    }
}

/// Compiles every kernel for `arch` (`sm_90a`, `sm_90`, `sm_80`, ...) into a CUBIN, without a
/// GPU and without the cache; with `gemv_tiles` the GEMVs read tile-packed weights
/// (`lower::tiles`). Fails on any error or warning.
pub fn compile_for_arch(arch: &str, gemv_tiles: bool) -> Result<CompiledKernels, NvrtcError> {
    if !is_available() {
        return Err(NvrtcError::LibraryMissing);
    }
    let include_dir = cuda_include_dir()?;
    with_nvrtc("compile", || compile_unchecked(arch, &include_dir, gemv_tiles))
}

fn compile_unchecked(arch: &str, include_dir: &Path, gemv_tiles: bool) -> Result<CompiledKernels, NvrtcError> {
    let nvrtc_version = {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: two valid out-pointers.
        check("nvrtcVersion", unsafe { sys::nvrtcVersion(&mut major, &mut minor) })?;
        (major, minor)
    };
    let cstring = |s: &str| CString::new(s).expect("kernel sources and options hold no NUL byte");
    let source = cstring(&translation_unit());
    let unit_name = cstring(TRANSLATION_UNIT);
    let header_names: Vec<CString> = kernels::SOURCES.iter().map(|(n, _)| cstring(n)).collect();
    let header_texts: Vec<CString> = kernels::SOURCES.iter().map(|(_, t)| cstring(t)).collect();
    let name_ptrs: Vec<*const c_char> = header_names.iter().map(|s| s.as_ptr()).collect();
    let text_ptrs: Vec<*const c_char> = header_texts.iter().map(|s| s.as_ptr()).collect();
    let opts: Vec<CString> = options(arch, include_dir, gemv_tiles).iter().map(|o| cstring(o)).collect();
    let opt_ptrs: Vec<*const c_char> = opts.iter().map(|s| s.as_ptr()).collect();

    let mut prog: sys::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: every pointer refers to a NUL-terminated string alive until the program is
    // destroyed below; the arrays have `SOURCES.len()` entries each.
    check("nvrtcCreateProgram", unsafe {
        sys::nvrtcCreateProgram(
            &mut prog,
            source.as_ptr(),
            unit_name.as_ptr(),
            text_ptrs.len() as i32,
            text_ptrs.as_ptr(),
            name_ptrs.as_ptr(),
        )
    })?;
    struct Destroy(sys::nvrtcProgram);
    impl Drop for Destroy {
        fn drop(&mut self) {
            // SAFETY: created above and destroyed once.
            unsafe { sys::nvrtcDestroyProgram(&mut self.0) };
        }
    }
    let guard = Destroy(prog);

    // SAFETY: `prog` is live; the options outlive the call.
    let compiled = unsafe { sys::nvrtcCompileProgram(guard.0, opt_ptrs.len() as i32, opt_ptrs.as_ptr()) };
    let log = {
        let mut size = 0usize;
        // SAFETY: `prog` is live; the buffer has the size NVRTC asked for.
        check("nvrtcGetProgramLogSize", unsafe { sys::nvrtcGetProgramLogSize(guard.0, &mut size) })?;
        let mut buf = vec![0u8; size.max(1)];
        check("nvrtcGetProgramLog", unsafe { sys::nvrtcGetProgramLog(guard.0, buf.as_mut_ptr() as *mut c_char) })?;
        CStr::from_bytes_until_nul(&buf).map(|c| c.to_string_lossy().trim_end().to_string()).unwrap_or_default()
    };
    if compiled == sys::nvrtcResult::NVRTC_ERROR_COMPILATION {
        return Err(NvrtcError::Compile { arch: arch.to_string(), files: files_in_log(&log, "error"), log });
    }
    if compiled != sys::nvrtcResult::NVRTC_SUCCESS {
        // An invalid option (an architecture this NVRTC does not know) lands here with a log.
        if !log.is_empty() {
            return Err(NvrtcError::Compile { arch: arch.to_string(), files: "none (see the log)".to_string(), log });
        }
        check("nvrtcCompileProgram", compiled)?;
    }
    if log.to_ascii_lowercase().contains("warning") {
        return Err(NvrtcError::Warnings { arch: arch.to_string(), files: files_in_log(&log, "warning"), log });
    }
    let mut size = 0usize;
    // SAFETY: `prog` is live and compiled.
    check("nvrtcGetCUBINSize", unsafe { sys::nvrtcGetCUBINSize(guard.0, &mut size) })?;
    if size == 0 {
        return Err(NvrtcError::NoCubin { arch: arch.to_string() });
    }
    let mut cubin = vec![0u8; size];
    check("nvrtcGetCUBIN", unsafe { sys::nvrtcGetCUBIN(guard.0, cubin.as_mut_ptr() as *mut c_char) })?;
    drop(guard);
    Ok(CompiledKernels { arch: arch.to_string(), cubin, nvrtc_version, log, from_cache: false })
}

/// Where compiled kernels are cached: `$KILN_CACHE_DIR`, else `$XDG_CACHE_HOME/kiln`, else
/// `$HOME/.cache/kiln`; `None` when none of them is set.
pub fn cache_dir() -> Option<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    var("KILN_CACHE_DIR")
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("kiln")))
        .or_else(|| var("HOME").map(|d| d.join(".cache").join("kiln")))
}

/// Cache file name for the current sources, `arch`, NVRTC version and options.
fn cache_file_name(arch: &str, version: (i32, i32), include_dir: &Path, gemv_tiles: bool) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(kernels::source_hash().as_bytes());
    for o in options(arch, include_dir, gemv_tiles) {
        h.update(o.as_bytes());
        h.update([0]);
    }
    let key: String = h.finalize().iter().take(12).map(|b| format!("{b:02x}")).collect();
    format!("kernels-{arch}-nvrtc{}.{}-{key}.cubin", version.0, version.1)
}

/// The kernels for `arch` from the disk cache, or compiled (and then cached). The cache is keyed
/// by (source hash, arch, NVRTC version, options); an unreadable or unwritable cache only costs
/// a compile.
pub fn load_or_compile(arch: &str, gemv_tiles: bool) -> Result<CompiledKernels, NvrtcError> {
    let version = nvrtc_version()?;
    let include_dir = cuda_include_dir()?;
    let path = cache_file(arch, version, &include_dir, gemv_tiles);
    if let Some(path) = &path {
        if let Ok(cubin) = std::fs::read(path) {
            if cubin.starts_with(b"\x7fELF") {
                tracing::debug!("kernels for {arch} from cache {}", path.display());
                return Ok(CompiledKernels { arch: arch.to_string(), cubin, nvrtc_version: version, log: String::new(), from_cache: true });
            }
        }
    }
    let started = std::time::Instant::now();
    let compiled = with_nvrtc("compile", || compile_unchecked(arch, &include_dir, gemv_tiles))?;
    tracing::info!("compiled kernels for {arch} with NVRTC {}.{} in {:.1?}", version.0, version.1, started.elapsed());
    if let Some(path) = &path {
        if let Err(e) = write_atomically(path, &compiled.cubin) {
            tracing::warn!("could not cache compiled kernels at {}: {e}", path.display());
        }
    }
    Ok(compiled)
}

/// The cache file `load_or_compile` reads and writes for `arch` with this machine's NVRTC, CUDA
/// include directory and `KILN_NVRTC_DEFINES`; `None` when no cache directory is set.
pub fn cache_path(arch: &str, gemv_tiles: bool) -> Result<Option<PathBuf>, NvrtcError> {
    Ok(cache_file(arch, nvrtc_version()?, &cuda_include_dir()?, gemv_tiles))
}

/// The cache file for these inputs in the cache directory, if one is set.
fn cache_file(arch: &str, version: (i32, i32), include_dir: &Path, gemv_tiles: bool) -> Option<PathBuf> {
    cache_dir().map(|d| d.join(cache_file_name(arch, version, include_dir, gemv_tiles)))
}

/// Writes through a temporary file and a rename, so that a concurrent reader never sees half.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".{}.{}.tmp", path.file_name().and_then(|n| n.to_str()).unwrap_or("cubin"), std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// Names of the kernels (global function symbols) in a CUBIN, sorted. Reads the ELF64 symbol
/// table; fails on anything that is not a little-endian ELF64 image.
pub fn cubin_kernel_names(cubin: &[u8]) -> anyhow::Result<Vec<String>> {
    use anyhow::{bail, Context};
    const SHT_SYMTAB: u32 = 2;
    const STT_FUNC: u8 = 2;
    const STB_GLOBAL: u8 = 1;
    let u16_at =
        |o: usize| -> anyhow::Result<u16> { Ok(u16::from_le_bytes(cubin.get(o..o + 2).context("truncated CUBIN")?.try_into().unwrap())) };
    let u32_at =
        |o: usize| -> anyhow::Result<u32> { Ok(u32::from_le_bytes(cubin.get(o..o + 4).context("truncated CUBIN")?.try_into().unwrap())) };
    let u64_at = |o: usize| -> anyhow::Result<usize> {
        Ok(u64::from_le_bytes(cubin.get(o..o + 8).context("truncated CUBIN")?.try_into().unwrap()) as usize)
    };
    if !cubin.starts_with(b"\x7fELF") || cubin.get(4) != Some(&2) || cubin.get(5) != Some(&1) {
        bail!("not a little-endian ELF64 image (a CUBIN)");
    }
    let (shoff, shentsize, shnum) = (u64_at(0x28)?, u16_at(0x3a)? as usize, u16_at(0x3c)? as usize);
    let section = |i: usize| shoff + i * shentsize;
    let mut names = Vec::new();
    for i in 0..shnum {
        let sh = section(i);
        if u32_at(sh + 4)? != SHT_SYMTAB {
            continue;
        }
        let (offset, size, link, entsize) = (u64_at(sh + 24)?, u64_at(sh + 32)?, u32_at(sh + 40)? as usize, u64_at(sh + 56)?);
        let strtab = u64_at(section(link) + 24)?;
        if entsize == 0 {
            bail!("symbol table with zero entry size");
        }
        for s in (offset..offset + size).step_by(entsize) {
            let info = *cubin.get(s + 4).context("truncated symbol")?;
            if info & 0xf != STT_FUNC || info >> 4 != STB_GLOBAL {
                continue;
            }
            let start = strtab + u32_at(s)? as usize;
            let bytes = cubin.get(start..).context("symbol name outside the image")?;
            let name = CStr::from_bytes_until_nul(bytes).context("unterminated symbol name")?;
            names.push(name.to_string_lossy().into_owned());
        }
    }
    names.sort();
    names.dedup();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hopper_gets_its_arch_specific_target() {
        assert_eq!(arch_for_compute_capability(9, 0), "sm_90a");
        assert_eq!(arch_for_compute_capability(8, 9), "sm_89");
        assert_eq!(arch_for_compute_capability(12, 0), "sm_120");
    }

    #[test]
    fn the_translation_unit_includes_every_kernel_file_once() {
        let tu = translation_unit();
        for (name, _) in kernels::kernel_files() {
            assert_eq!(tu.matches(&format!("#include \"{name}\"")).count(), 1, "{name}");
        }
        assert!(!tu.contains(".cuh"), "headers are included by the kernel files, not the unit");
    }

    #[test]
    fn failing_files_are_read_from_the_log() {
        let log = "rope.cu(42): error: identifier \"x\" is undefined\n\nlinear.cu(7): error: expected a \";\"\n2 errors detected";
        assert_eq!(files_in_log(log, "error"), "linear.cu, rope.cu");
    }

    #[test]
    fn cache_names_differ_by_arch_version_and_weight_layout() {
        let inc = Path::new("/usr/local/cuda/include");
        let a = cache_file_name("sm_90a", (13, 0), inc, false);
        assert_ne!(a, cache_file_name("sm_90", (13, 0), inc, false));
        assert_ne!(a, cache_file_name("sm_90a", (12, 8), inc, false));
        assert_ne!(a, cache_file_name("sm_90a", (13, 0), inc, true));
        assert!(a.starts_with("kernels-sm_90a-nvrtc13.0-") && a.ends_with(".cubin"));
    }

    #[test]
    fn a_non_elf_image_is_refused() {
        assert!(cubin_kernel_names(b"not an elf").is_err());
    }
}
