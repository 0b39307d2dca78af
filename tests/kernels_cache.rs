//! `kiln kernels`: compiles the kernels into the cache with no GPU, and a second call finds them
//! there; without a cache directory it says which variable to set.
//!
//! The compile needs libnvrtc and the CUDA headers (see `runtime::cuda::nvrtc`); without them
//! that test prints "skipped: no NVRTC" and passes, unless `KILN_REQUIRE_NVRTC=1` (CI).

use kiln::runtime::cuda::nvrtc;
use std::process::Command;

fn kiln() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
}

#[test]
fn kernels_command_compiles_into_the_cache_once() {
    if !nvrtc::is_available() || nvrtc::cuda_include_dir().is_err() {
        assert!(
            std::env::var("KILN_REQUIRE_NVRTC").as_deref() != Ok("1"),
            "KILN_REQUIRE_NVRTC=1 but NVRTC or the CUDA headers are missing"
        );
        eprintln!("skipped: no NVRTC");
        return;
    }
    let cache = tempfile::tempdir().unwrap();
    let run = || {
        let out = kiln().args(["kernels", "--modules", "rows"]).env("KILN_CACHE_DIR", cache.path()).output().unwrap();
        assert!(out.status.success(), "kiln kernels failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let first = run();
    assert!(first.starts_with("row-major module for sm_90a") && first.contains(": compiled in "), "{first}");
    let path = first.trim().rsplit(": ").next().unwrap();
    assert!(std::path::Path::new(path).starts_with(cache.path()), "{path} is not in the cache directory");
    let cubin = std::fs::read(path).unwrap();
    assert!(cubin.starts_with(b"\x7fELF"), "the cached file is not a CUBIN");
    assert_eq!(std::fs::read_dir(cache.path()).unwrap().count(), 1, "one module, one file");
    let second = run();
    assert!(second.contains(": already cached: ") && second.trim().ends_with(path), "{second}");
}

#[test]
fn kernels_command_without_a_cache_directory_says_what_to_set() {
    let out = kiln().arg("kernels").env_remove("KILN_CACHE_DIR").env_remove("XDG_CACHE_HOME").env_remove("HOME").output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no kernel cache directory: set KILN_CACHE_DIR"), "{err}");
}
