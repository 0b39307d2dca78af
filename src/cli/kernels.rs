//! `kiln kernels`: compile kernels/ with NVRTC into the kernel cache ahead of time, with no GPU.
//!
//! A first run on a machine otherwise spends one to three minutes compiling (once per module:
//! row-major and tile-packed GEMV weights). The cache file's name is keyed by the sources, the
//! architecture, the NVRTC version, the CUDA include directory and `KILN_NVRTC_DEFINES`
//! (`nvrtc::cache_path`), so a cache built here is used on a GPU machine only when all of those
//! match there (set `KILN_CUDA_INCLUDE` to the same path on both); otherwise that machine compiles.

use crate::runtime::cuda::nvrtc;
use anyhow::{bail, Context, Result};
use clap::Args;

#[derive(Args, Debug)]
pub struct KernelsCmd {
    /// The GPU architecture: `sm_90a` for H100/H200, `sm_80` for A100, ...
    #[arg(long, default_value = "sm_90a")]
    pub arch: String,
    /// Which modules: `both`, `tiles` (plans with tile-packed GEMV weights, the default for
    /// 16-bit models) or `rows` (row-major weights; also the module `kiln bench`'s read-bandwidth
    /// kernel runs from).
    #[arg(long, default_value = "both", value_parser = ["both", "tiles", "rows"])]
    pub modules: String,
}

pub fn kernels_main(cmd: &KernelsCmd) -> Result<()> {
    if nvrtc::cache_dir().is_none() {
        bail!("no kernel cache directory: set KILN_CACHE_DIR (or XDG_CACHE_HOME or HOME)");
    }
    let tiles: &[bool] = match cmd.modules.as_str() {
        "tiles" => &[true],
        "rows" => &[false],
        _ => &[false, true],
    };
    for &t in tiles {
        let name = if t { "tile-packed" } else { "row-major" };
        let started = std::time::Instant::now();
        let k = nvrtc::load_or_compile(&cmd.arch, t).with_context(|| format!("compiling the {name} module for {}", cmd.arch))?;
        let path = nvrtc::cache_path(&cmd.arch, t)?.map(|p| p.display().to_string()).unwrap_or_default();
        let how = if k.from_cache { "already cached".to_string() } else { format!("compiled in {:.1?}", started.elapsed()) };
        println!("{name} module for {} (NVRTC {}.{}): {how}: {path}", cmd.arch, k.nvrtc_version.0, k.nvrtc_version.1);
    }
    Ok(())
}
