//! Proves, with no GPU, that every CUDA kernel compiles with NVRTC for Hopper (`sm_90` and
//! `sm_90a`) with no error and no warning, and that the compiled module holds every symbol
//! the ABI (`runtime::cuda::abi::symbol`) asks for in real plans: bf16 and f32 Qwen3 plans and
//! a tiny f16 Qwen2 (biased) plan, decode and prefill.
//!
//! Needs libnvrtc and the CUDA headers (see `runtime::cuda::nvrtc`). Without them the tests
//! print "skipped: no NVRTC" and pass, unless `KILN_REQUIRE_NVRTC=1` (CI), which makes them fail
//! with the reason.

use kiln::ir::DType;
use kiln::model::config::ModelConfig;
use kiln::plan::{build_plan, Plan, PlanOptions};
use kiln::runtime::cuda::{abi, nvrtc};
use std::collections::BTreeSet;
use std::sync::OnceLock;

/// Every symbol kernels/ must define: 12 kernels x 3 dtypes (gather and rms_norm also `_release`), attention_cluster x 3 chunk sizes x 3 dtypes, attention_prefill x 2 (f16, bf16),
/// linear's and fused_linear's 5 (dt, out) pairs each, linear_argmax (f32 logits), gated_linear, qkv_linear and qkv_rope x 3
/// dtypes (each also `_o3`), the out-norm pair (bf16), qkv_attention (bf16), sample, advance, sample_advance.
fn expected_symbols() -> BTreeSet<String> {
    let mut s = BTreeSet::new();
    for kernel in [
        "gather",
        "rms_norm",
        "add_rms_norm",
        "head_rms_norm",
        "rope",
        "rope_kv_write",
        "kv_write",
        "attention",
        "attention_split",
        "attention_merge",
        "swiglu",
        "add",
    ] {
        for dt in ["f32", "f16", "bf16"] {
            s.insert(format!("kiln_{kernel}_{dt}"));
            // The entries that release their dependents before the wait (plan knob KILN_RELEASE_EARLY).
            if kernel == "gather" || kernel == "rms_norm" {
                s.insert(format!("kiln_{kernel}_release_{dt}"));
            }
        }
    }
    // The linear family, each in its default and dense (`_o3`, three blocks per SM) variant.
    for variant in ["", "_o3"] {
        for (dt, out) in [("f32", "f32"), ("f16", "f16"), ("f16", "f32"), ("bf16", "bf16"), ("bf16", "f32")] {
            s.insert(format!("kiln_linear_{dt}_{out}{variant}"));
            s.insert(format!("kiln_fused_linear_{dt}_{out}{variant}"));
            if variant == "_o3" {
                s.insert(format!("kiln_fused_linear_{dt}_{out}_o3u"));
            }
            // The decode o / down projections' one path alone (abi.rs `fused_res_entry`).
            if variant.is_empty() && dt == out && dt != "f32" {
                s.insert(format!("kiln_fused_linear_res_{dt}_{out}"));
                // Split over a cluster of two blocks (plan knob KILN_GEMV_K2, abi.rs `fused_res_k2`).
                s.insert(format!("kiln_fused_linear_res_k2_{dt}_{out}"));
            }
            // The GEMV-only entry points (abi.rs `gemv_only_entry`), 16-bit x.
            if dt != "f32" {
                s.insert(format!("kiln_linear_gemv_{dt}_{out}{variant}"));
            }
        }
        for dt in ["f32", "f16", "bf16"] {
            s.insert(format!("kiln_linear_argmax_{dt}_f32{variant}"));
            s.insert(format!("kiln_gated_linear_{dt}{variant}"));
            if dt != "f32" {
                s.insert(format!("kiln_linear_argmax_gemv_{dt}_f32{variant}"));
                s.insert(format!("kiln_gated_linear_gemv_{dt}{variant}"));
            }
            s.insert(format!("kiln_qkv_linear_{dt}{variant}"));
            s.insert(format!("kiln_qkv_rope_{dt}{variant}"));
            if dt != "f32" {
                s.insert(format!("kiln_qkv_rope_gemv_{dt}{variant}"));
            }
        }
    }
    // Flash-attention prefill: f16 and bf16 only (the planner picks it for head_dim 64 / 128).
    for dt in ["f16", "bf16"] {
        s.insert(format!("kiln_attention_prefill_{dt}"));
    }
    // Decode attention in one launch: one entry point per chunk of 1, 2 or 4 heads.
    for g in [1, 2, 4] {
        for dt in ["f32", "f16", "bf16"] {
            s.insert(format!("kiln_attention_cluster_g{g}_{dt}"));
        }
    }
    // The output norm carried by its producer (`lower::fuse` rewrite 10, bf16 only): the producing
    // fused GEMV in its default variant, the vocabulary GEMV reading its statistics in both.
    s.insert("kiln_fused_linear_outnorm_bf16_bf16".to_string());
    for variant in ["", "_o3"] {
        s.insert(format!("kiln_linear_stats_bf16_f32{variant}"));
        s.insert(format!("kiln_linear_argmax_stats_bf16_f32{variant}"));
    }
    // QKV-RoPE and the decode attention in one launch (`lower::fuse` rewrite 11, bf16 only).
    s.insert("kiln_qkv_attention_bf16".to_string());
    s.insert("kiln_sample_f32".to_string());
    s.insert("kiln_advance".to_string());
    s.insert("kiln_sample_advance_f32".to_string());
    s
}

fn plan(cfg: &ModelConfig, dtype: DType, fuse: bool) -> Plan {
    let opts =
        PlanOptions { decode_buckets: vec![1, 4], prefill_buckets: vec![16], max_context: 64, dtype, memory_budget: None, burst: 0, fuse };
    build_plan(cfg, &opts).unwrap_or_else(|e| panic!("plan for {dtype}: {e:#}"))
}

/// Plans whose symbols must all be present.
fn plans() -> Vec<(String, Plan)> {
    let qwen3 = ModelConfig::preset("qwen3-0.6b").unwrap();
    let mut tiny = ModelConfig::preset("qwen2.5-0.5b").unwrap();
    tiny.n_layers = 1;
    tiny.vocab_size = 512;
    tiny.hidden_size = 64;
    tiny.intermediate_size = 128;
    tiny.n_heads = 4;
    tiny.n_kv_heads = 2;
    tiny.head_dim = 16;
    tiny.rope.rotary_dim = 16;
    tiny.validate().unwrap();
    vec![
        ("qwen3-0.6b bf16".to_string(), plan(&qwen3, DType::BF16, false)),
        ("qwen3-0.6b f32".to_string(), plan(&qwen3, DType::F32, false)),
        ("tiny qwen2 f16".to_string(), plan(&tiny, DType::F16, false)),
        ("qwen3-0.6b bf16 fused".to_string(), plan(&qwen3, DType::BF16, true)),
        ("tiny qwen2 f16 fused".to_string(), plan(&tiny, DType::F16, true)),
        // Its gate/up GEMV (304 blocks) takes the dense `_o3` variant.
        ("qwen2.5-0.5b bf16 fused".to_string(), plan(&ModelConfig::preset("qwen2.5-0.5b").unwrap(), DType::BF16, true)),
    ]
}

/// The compiled module for `arch` (for tile-packed GEMV weights with `tiles`), or None when NVRTC
/// is unavailable and not required.
fn compiled(arch: &'static str, tiles: bool) -> Option<&'static nvrtc::CompiledKernels> {
    static SM90: OnceLock<Result<nvrtc::CompiledKernels, String>> = OnceLock::new();
    static SM90A: OnceLock<Result<nvrtc::CompiledKernels, String>> = OnceLock::new();
    static SM90A_TILES: OnceLock<Result<nvrtc::CompiledKernels, String>> = OnceLock::new();
    let cell = match (arch, tiles) {
        ("sm_90", false) => &SM90,
        ("sm_90a", false) => &SM90A,
        ("sm_90a", true) => &SM90A_TILES,
        other => panic!("no cell for {other:?}"),
    };
    let result = cell.get_or_init(|| match nvrtc::compile_for_arch(arch, tiles) {
        Ok(c) => Ok(c),
        Err(e @ (nvrtc::NvrtcError::LibraryMissing | nvrtc::NvrtcError::HeadersMissing { .. })) => Err(e.to_string()),
        Err(e) => panic!("compiling the kernels for {arch} failed:\n{e}"),
    });
    match result {
        Ok(c) => Some(c),
        Err(reason) => {
            if std::env::var("KILN_REQUIRE_NVRTC").as_deref() == Ok("1") {
                panic!("KILN_REQUIRE_NVRTC=1 but NVRTC cannot run: {reason}");
            }
            eprintln!("skipped: no NVRTC ({reason})");
            None
        }
    }
}

fn check_arch(arch: &'static str, tiles: bool) {
    let Some(kernels) = compiled(arch, tiles) else { return };
    assert!(kernels.log.is_empty() || !kernels.log.to_lowercase().contains("warning"), "{}", kernels.log);
    let names: BTreeSet<String> = nvrtc::cubin_kernel_names(&kernels.cubin).unwrap().into_iter().collect();
    let expected = expected_symbols();
    let missing: Vec<_> = expected.difference(&names).collect();
    assert!(missing.is_empty(), "{arch}: kernels missing from the CUBIN: {missing:?}");
    // Kernels outside the plan ABI (the bandwidth probe of `kiln bench`) are allowed by prefix, and
    // so are the CUDA device-runtime functions a kernel calls (`cudaGraphSetConditional` in
    // advance.cu): undefined symbols of the CUBIN that `cubin_kernel_names` lists with the kernels.
    let extra: Vec<_> = names.difference(&expected).filter(|n| !n.starts_with("kiln_bench_") && !n.starts_with("cuda")).collect();
    assert!(extra.is_empty(), "{arch}: unexpected kernels in the CUBIN (add them to the ABI and this list): {extra:?}");
    // Both builds define the same symbols; a plan's layout only picks which build it loads.
    for (label, plan) in plans() {
        let wanted = abi::symbols(&plan);
        assert!(!wanted.is_empty());
        for symbol in &wanted {
            assert!(names.contains(symbol), "{arch}: {label} needs `{symbol}`, which kernels/ does not define");
        }
    }
    eprintln!(
        "{arch}{}: {} kernels, CUBIN {} bytes, NVRTC {}.{}",
        if tiles { " (tile-packed GEMV weights)" } else { "" },
        names.len(),
        kernels.cubin.len(),
        kernels.nvrtc_version.0,
        kernels.nvrtc_version.1
    );
}

#[test]
fn kernels_compile_for_sm_90_with_every_abi_symbol() {
    check_arch("sm_90", false);
}

#[test]
fn kernels_compile_for_sm_90a_with_every_abi_symbol() {
    check_arch("sm_90a", false);
}

/// The build the runtime compiles for a plan with tile-packed GEMV weights (the default plans of
/// the reference models: `lower::tiles`).
#[test]
fn tiled_kernels_compile_for_sm_90a_with_every_abi_symbol() {
    check_arch("sm_90a", true);
}

#[test]
fn plans_ask_only_for_symbols_kernels_define() {
    // Holds with or without NVRTC: the ABI's names for real plans are within the expected set.
    let expected = expected_symbols();
    let (mut dense, mut res) = (0, 0);
    for (label, plan) in plans() {
        for symbol in abi::symbols(&plan) {
            assert!(expected.contains(&symbol), "{label}: `{symbol}` is not among the kernels kiln defines");
            dense += symbol.ends_with("_o3") as usize;
            res += symbol.starts_with("kiln_fused_linear_res_") as usize;
        }
    }
    assert!(dense > 0, "some plan asks for a dense GEMV variant");
    assert!(res > 0, "some plan's decode o / down projection calls kiln_fused_linear_res_*");
    // The GEMV-only entries by default (KILN_GEMV_ONLY_ENTRY unset in tests).
    let gemv_only = plans().iter().flat_map(|(_, plan)| abi::symbols(plan)).filter(|s| s.contains("_gemv_")).count();
    assert!(gemv_only > 0, "some plan's decode GEMV calls a GEMV-only entry (kiln_linear_gemv_*, ...)");
}

#[test]
fn a_virtual_architecture_is_refused_with_a_clear_error() {
    if compiled("sm_90", false).is_none() {
        return;
    }
    let err = nvrtc::compile_for_arch("compute_90", false).expect_err("a virtual architecture yields no CUBIN");
    assert!(matches!(err, nvrtc::NvrtcError::NoCubin { .. } | nvrtc::NvrtcError::Api { .. }), "{err}");
}
