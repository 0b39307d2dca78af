//! The `kiln` binary as a new user meets it: the main job, plan files, and bad input. Every
//! bad input must give a clear one-paragraph error and a non-zero exit, never a panic.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn kiln(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln")).args(args).output().expect("run kiln")
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Asserts a clean failure and returns stderr.
fn fails(args: &[&str]) -> String {
    let out = kiln(args);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "kiln {args:?} should fail; stderr:\n{err}");
    assert_eq!(out.status.code(), Some(1), "kiln {args:?} should exit 1, not crash; stderr:\n{err}");
    assert!(!err.contains("panicked"), "kiln {args:?} panicked:\n{err}");
    assert!(err.starts_with("error: "), "kiln {args:?} stderr:\n{err}");
    eprintln!("kiln {}\n  -> {}", args.join(" "), err.trim());
    err
}

const KNOWN_START: &str = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.";

#[test]
fn run_bundled_greedy() {
    let out = kiln(&["run", "--device", "cpu", "--temperature", "0", "--max-tokens", "200"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.starts_with(KNOWN_START), "got:\n{text}");
}

#[test]
fn version_names_the_commit_the_binary_is_built_from() {
    let out = kiln(&["--version"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert_eq!(text.trim(), format!("kiln {} ({})", env!("CARGO_PKG_VERSION"), kiln::BUILD_COMMIT));
    let c = kiln::BUILD_COMMIT.trim_end_matches("-dirty");
    assert!(c == "unknown" || (c.len() == 12 && c.chars().all(|ch| ch.is_ascii_hexdigit())), "{c}");
}

#[test]
fn run_refuses_sampling_values_it_would_reinterpret() {
    // A negative temperature, a top-p outside (0, 1] or a negative top-k would silently mean
    // greedy or no cut under the sampling rule; the CLI refuses them by name instead.
    for (flag, value, says) in [
        ("--temperature=-1", None, "temperature -1"),
        ("--temperature", Some("NaN"), "temperature NaN"),
        ("--top-p", Some("1.5"), "top-p 1.5"),
        ("--top-p", Some("0"), "top-p 0"),
        ("--top-k=-3", None, "top-k -3"),
    ] {
        let mut args = vec!["run", "--device", "cpu", "--max-tokens", "3", flag];
        args.extend(value);
        let err = fails(&args);
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(err.contains("--top-p"), "the error names the flags to check: {err}");
    }
}

#[test]
fn run_refuses_plans_it_cannot_finish_before_the_prompt_runs() {
    // No decode bucket of 1: refused before prefill prints the first token.
    let out = kiln(&["run", "--device", "cpu", "--max-tokens", "3", "--decode-buckets", "2,4"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(out.stdout.is_empty(), "nothing is generated first: {:?}", String::from_utf8_lossy(&out.stdout));
    assert!(err.contains("no decode bucket of 1") && err.contains("--decode-buckets 1"), "{err}");
    // One token needs no decode step: prefill alone gives it.
    let out = kiln(&["run", "--device", "cpu", "--max-tokens", "1", "--decode-buckets", "2", "--temperature", "0"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // A prefill bucket the user gave that exceeds the (default) context is an error, not dropped.
    let err = fails(&["run", "--device", "cpu", "--max-tokens", "3", "--prefill-buckets", "16,4096"]);
    assert!(err.contains("prefill bucket 4096 is larger than the max context 2048"), "{err}");
    // The default buckets are cut to the context silently: a small context still plans.
    let out = kiln(&["run", "--device", "cpu", "--max-tokens", "3", "--max-context", "32", "--temperature", "0"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn plan_then_run_from_the_plan_file() {
    let tmp = tempfile::tempdir().unwrap();
    let plan = tmp.path().join("x.plan");
    let gguf = repo().join("models/stories260K/stories260K.gguf");
    let out = kiln(&["plan", "--model", gguf.to_str().unwrap(), "-o", plan.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(Path::new(&format!("{}.txt", plan.display())).exists());
    let out = kiln(&[
        "run",
        "--device",
        "cpu",
        "--model",
        gguf.to_str().unwrap(),
        "--plan",
        plan.to_str().unwrap(),
        "--temperature",
        "0",
        "--max-tokens",
        "200",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with(KNOWN_START));
    let out = kiln(&["inspect", plan.to_str().unwrap(), "--summary"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("arena"));
}

#[test]
fn plan_config_reports_arena_and_naive() {
    let tmp = tempfile::tempdir().unwrap();
    let plan = tmp.path().join("l.plan");
    let cfg = repo().join("configs/llama3.2-1b/config.json");
    let out = kiln(&[
        "plan",
        "--config",
        cfg.to_str().unwrap(),
        "--decode-buckets",
        "1,2,4,8",
        "--prefill-buckets",
        "16,64,256",
        "--max-context",
        "4096",
        "-o",
        plan.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("naive") && text.contains("arena"), "{text}");
    let out = kiln(&["diff", plan.to_str().unwrap(), plan.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("dumps are identical"));
}

#[test]
fn missing_model_file() {
    let err = fails(&["run", "--device", "cpu", "--model", "/nonexistent/model.gguf"]);
    assert!(err.contains("not found") || err.contains("No such file"), "{err}");
}

#[test]
fn truncated_gguf() {
    let tmp = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(repo().join("models/stories260K/stories260K.gguf")).unwrap();
    for cut in [10usize, 1000, bytes.len() / 2, bytes.len() - 1] {
        let p = tmp.path().join(format!("cut{cut}.gguf"));
        std::fs::write(&p, &bytes[..cut]).unwrap();
        fails(&["run", "--device", "cpu", "--model", p.to_str().unwrap(), "--max-tokens", "2"]);
    }
}

#[test]
fn wrong_tensor_shape_in_hf_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // A tiny llama whose config says hidden 8 but whose embedding is 9 wide.
    std::fs::write(
        dir.join("config.json"),
        r#"{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":8,"intermediate_size":16,"num_attention_heads":2,"num_key_value_heads":1,"num_hidden_layers":1,"vocab_size":4,"max_position_embeddings":64,"rms_norm_eps":1e-5,"hidden_act":"silu","tie_word_embeddings":true}"#,
    )
    .unwrap();
    let data = vec![0u8; 4 * 9 * 4];
    let mut tensors = std::collections::HashMap::new();
    tensors.insert(
        "model.embed_tokens.weight".to_string(),
        safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![4, 9], &data).unwrap(),
    );
    safetensors::serialize_to_file(&tensors, None, &dir.join("model.safetensors")).unwrap();
    let err = fails(&["run", "--device", "cpu", "--model", dir.to_str().unwrap()]);
    assert!(err.contains("embed") || err.contains("token_embd"), "{err}");
}

#[test]
fn unsupported_architecture() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("config.json");
    std::fs::write(&cfg, r#"{"architectures":["GPT2LMHeadModel"],"model_type":"gpt2","n_embd":768}"#).unwrap();
    let err = fails(&["plan", "--config", cfg.to_str().unwrap()]);
    assert!(err.contains("gpt2"), "{err}");
}

#[test]
fn plan_for_another_model() {
    let tmp = tempfile::tempdir().unwrap();
    let plan = tmp.path().join("q.plan");
    let out = kiln(&[
        "plan",
        "--shape",
        "qwen3-0.6b",
        "--max-context",
        "64",
        "--prefill-buckets",
        "16",
        "--decode-buckets",
        "1",
        "-o",
        plan.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let err = fails(&["run", "--device", "cpu", "--plan", plan.to_str().unwrap(), "--max-tokens", "2"]);
    assert!(err.contains("another model"), "{err}");
}

#[test]
fn corrupt_plan_file() {
    let tmp = tempfile::tempdir().unwrap();
    let plan = tmp.path().join("s.plan");
    let gguf = repo().join("models/stories260K/stories260K.gguf");
    assert!(kiln(&["plan", "--model", gguf.to_str().unwrap(), "-o", plan.to_str().unwrap()]).status.success());
    let mut bytes = std::fs::read(&plan).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x55;
    std::fs::write(&plan, &bytes).unwrap();
    let err = fails(&["run", "--device", "cpu", "--plan", plan.to_str().unwrap()]);
    assert!(err.contains("corrupt"), "{err}");
    std::fs::write(&plan, b"hello").unwrap();
    let err = fails(&["inspect", plan.to_str().unwrap()]);
    assert!(err.contains("not a kiln plan file"), "{err}");
}

#[test]
fn prompt_longer_than_the_context() {
    let prompt = "Once upon a time there was a dog. ".repeat(40);
    let err = fails(&["run", "--device", "cpu", "--max-context", "64", "--prefill-buckets", "16", "--prompt", &prompt]);
    assert!(err.contains("context"), "{err}");
}

#[test]
fn memory_budget_too_small() {
    let err = fails(&["plan", "--shape", "llama3.1-8b", "--memory-budget", "4GiB", "-o", "/tmp/never.plan"]);
    assert!(err.contains("needs") && err.contains("budget"), "{err}");
}

/// `kiln inspect plan | head`: the reader closing stdout early ends the command quietly (exit 0,
/// no panic), as `kiln run | head` does.
#[test]
fn inspect_into_a_closed_pipe() {
    use std::io::Read;
    use std::process::Stdio;
    let plan = repo().join("plans/llama3.2-1b.plan");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["inspect", plan.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kiln");
    // Read one byte, then close the pipe: the dump is far larger than a pipe buffer.
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 1];
    stdout.read_exact(&mut first).unwrap();
    drop(stdout);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "kiln inspect panicked on a closed pipe:\n{err}");
    assert!(out.status.success(), "kiln inspect into a closed pipe: {:?}\n{err}", out.status);
}

#[test]
fn gpu_commands_without_a_driver_say_so_first() {
    // SAFETY: only tries to dlopen libcuda.
    if unsafe { cudarc::driver::sys::is_culib_present() } {
        eprintln!("libcuda is present here; the no-driver path cannot be exercised");
        return;
    }
    // The gate has no --device: its message points at --cpu-stand-in, not at `--device cpu`.
    let err = fails(&["gate"]);
    assert!(err.contains("no NVIDIA driver found") && err.contains("--cpu-stand-in"), "{err}");
    assert!(!err.contains("run with --device cpu"), "{err}");
    // The bench refuses before it writes any synthetic model.
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("synth");
    let err = fails(&["bench", "--shapes", "llama3.2-1b", "--synth-root", root.to_str().unwrap()]);
    assert!(err.contains("kiln bench measures a GPU") && err.contains("--device cpu"), "{err}");
    assert!(!root.exists(), "nothing was synthesized before the driver check");
}

#[test]
fn run_plans_within_the_gpus_free_memory() {
    // `kiln run` on a GPU plans within its free memory (`cli::run::plan_for`'s `gpu_free`): the
    // tile-packed second copy of the GEMV weights when it fits, row-major when only that fits,
    // and an error naming the free memory when nothing does. Shown here without a GPU.
    use kiln::cli::plan_cmd::PlanArgs;
    use kiln::cli::run::{plan_for, GPU_HEADROOM};
    // The gate's small Llama whose 16-bit GEMV weights tile-pack (stories260K's do not).
    let config = kiln::gate::random_config("llama-tiles").unwrap();
    let m = kiln::model::LoadedModel {
        weights: Box::new(kiln::synth::MemWeights::random(&config, 1, kiln::model::SrcDType::BF16)),
        config,
        tokenizer: None,
        source: "llama-tiles (random)".into(),
    };
    let args = PlanArgs {
        decode_buckets: None,
        prefill_buckets: None,
        max_context: Some(256),
        dtype: "bf16".into(),
        memory_budget: None,
        burst: 64,
        fuse: true,
    };
    let roomy = plan_for(&m, None, &args, "1", Some(1 << 40)).unwrap();
    let (tiled, twin_bytes) = roomy.gemv_tiles_bytes();
    assert!(tiled > 0 && twin_bytes > 0, "bf16 GEMV weights are tile-packed when they fit");
    let row_major = plan_for(&m, None, &args, "1", Some(roomy.total_bytes() + GPU_HEADROOM - 1)).unwrap();
    assert_eq!(row_major.gemv_tiles_bytes().0, 0, "one byte short of the tiled plan: planned row-major");
    assert!(row_major.total_bytes() < roomy.total_bytes());
    let err = plan_for(&m, None, &args, "1", Some(GPU_HEADROOM + 4096)).unwrap_err();
    let msg = format!("{err:#}");
    assert!(msg.contains("GPU's") && msg.contains("free memory") && msg.contains("--memory-budget"), "{msg}");
    // An explicit --memory-budget is the limit, whatever the GPU has free.
    let budget = PlanArgs { memory_budget: Some("1GiB".into()), ..args.clone() };
    let p = plan_for(&m, None, &budget, "1", Some(GPU_HEADROOM + 4096)).unwrap();
    assert!(p.gemv_tiles_bytes().0 > 0);
    // Without a GPU nothing limits the plan.
    assert_eq!(plan_for(&m, None, &args, "1", None).unwrap().total_bytes(), roomy.total_bytes());
}
