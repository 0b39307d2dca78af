//! The CUDA runtime's host side, proven without a GPU: the clear error when no driver exists,
//! the kernel parameter blobs (pointers then scalars, per the ABI), the transfers around each
//! program, the gate's own logic (with the CPU standing in for the GPU), and `kiln synth`'s
//! files round-tripping through the model loader.

use kiln::gate::{random_config, GateArgs};
use kiln::ir::DType;
use kiln::model::{SrcDType, WeightSource};
use kiln::plan::{build_plan, Access, Kernel, Plan, PlanOptions, RegionKind};
use kiln::runtime::cuda::exec::{param_slots, ProgramIo};
use kiln::runtime::cuda::{cuda_available, CudaExecutor, Mode};
use kiln::synth::MemWeights;

fn small_plan(kind: &str, dtype: DType) -> Plan {
    let cfg = random_config(kind).unwrap();
    let opts = PlanOptions {
        decode_buckets: vec![1, 4],
        prefill_buckets: vec![32],
        max_context: 64,
        dtype,
        memory_budget: None,
        burst: 0,
        fuse: false,
    };
    build_plan(&cfg, &opts).unwrap()
}

fn driver_present() -> bool {
    // SAFETY: only tries to dlopen libcuda.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

#[test]
fn load_without_a_driver_is_a_clear_error_not_a_panic() {
    if driver_present() {
        eprintln!("libcuda is present here; the no-driver path cannot be exercised");
        return;
    }
    let plan = small_plan("llama", DType::F32);
    let weights = MemWeights::random(&plan.config, 1, SrcDType::F32);
    let err = CudaExecutor::load(plan, &weights, Mode::Graph).err().expect("no driver, no executor");
    let msg = format!("{err:#}");
    assert!(msg.contains("no NVIDIA driver found") && msg.contains("--device cpu"), "{msg}");
    let msg = format!("{:#}", cuda_available().unwrap_err());
    assert!(msg.contains("libcuda.so.1"), "{msg}");
}

#[test]
fn param_slots_are_pointers_then_scalars() {
    let plan = small_plan("qwen2", DType::BF16);
    let base = [0x1000_0000u64, 0x2000_0000, 0x3000_0000, 0x4000_0000, 0x5000_0000, 0x6000_0000];
    let p = &plan.programs[0];
    for l in &p.launches {
        let slots = param_slots(&l.kernel, &l.bufs, &base);
        let ptrs = kiln::runtime::cuda::abi::pointer_slots(&l.kernel, &l.bufs);
        let by_value = kiln::runtime::cuda::abi::by_value_slots(&l.kernel);
        let scalars = kiln::runtime::cuda::abi::scalars(&l.kernel).len();
        assert_eq!(slots.len(), ptrs + scalars + by_value.len(), "{}", l.name);
        assert_eq!(&slots[ptrs + scalars..], &by_value[..], "{}", l.name);
        match l.kernel {
            Kernel::Linear { rows, in_features, out_features, bias, argmax, stats: None } => {
                let b = &l.bufs;
                let at = |i: usize| base[b[i].region.index()] + b[i].offset;
                let n = if argmax { 5 } else { 4 };
                if argmax {
                    // x, weight, null bias, out, argmax key.
                    assert_eq!(&slots[..5], &[at(0), at(1), 0, at(2), at(3)]);
                } else if bias {
                    assert_eq!(&slots[..4], &[at(0), at(1), at(2), at(3)]);
                } else {
                    // x, weight, null bias, out.
                    assert_eq!(&slots[..4], &[at(0), at(1), 0, at(2)]);
                }
                assert_eq!(&slots[n..], &[rows as u64, in_features as u64, out_features as u64, bias as u64]);
            }
            Kernel::RmsNorm { eps, .. } => {
                assert_eq!(*slots.last().unwrap(), eps.to_bits() as u64, "eps travels as its f32 bits");
            }
            _ => {}
        }
        for s in &slots[..ptrs] {
            assert!(*s == 0 || *s >= 0x1000_0000, "pointer slot {s:#x} of {}", l.name);
        }
    }
}

#[test]
fn program_io_covers_every_step_read_and_output_write() {
    let plan = small_plan("qwen3", DType::F32);
    for p in &plan.programs {
        let io = ProgramIo::of(p);
        let span = io.step.expect("every program reads the step block");
        for (i, l) in p.launches.iter().enumerate() {
            for b in &l.bufs {
                if b.region == RegionKind::Step {
                    assert!(b.offset >= span.offset && b.offset + b.bytes <= span.offset + span.bytes);
                    assert!(io.step_readers.contains(&(i as u32)));
                }
                if b.region == RegionKind::Output && b.access == Access::Write {
                    assert!(io.outputs.iter().any(|o| o.writer == i as u32 && o.span.offset == b.offset && o.span.bytes == b.bytes));
                }
            }
        }
        // Logits and tokens.
        assert_eq!(io.outputs.len(), 2, "{}", p.label());
    }
}

#[test]
fn gate_logic_runs_with_the_cpu_standing_in() {
    let args = GateArgs {
        checks: vec![1, 2, 4, 6, 7],
        steps: 3,
        min_context: 64,
        synth_dir: std::env::temp_dir(),
        skip_hf: true,
        hf_shapes: vec![],
        hf_steps: 4,
        hf_prompt: 8,
        seed: 1,
        per_launch: false,
        stories: concat!(env!("CARGO_MANIFEST_DIR"), "/models/stories260K/stories260K.gguf").into(),
        python: "python3".into(),
        hf_script: "scripts/hf_compare.py".into(),
        cpu_stand_in: true,
    };
    kiln::gate::main(&args).unwrap();
}

#[test]
fn synth_directory_round_trips_through_the_loader() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = random_config("qwen2").unwrap();
    kiln::synth::write_config(&cfg, "test", 5, SrcDType::BF16, dir.path()).unwrap();
    let model = kiln::model::open(dir.path(), None).unwrap();
    assert_eq!(model.config.n_layers, cfg.n_layers);
    assert_eq!(model.config.qkv_bias, cfg.qkv_bias);
    let mem = MemWeights::random(&cfg, 5, SrcDType::BF16);
    for t in cfg.tensors() {
        let a = model.weights.tensor(&t.name).unwrap();
        let b = mem.tensor(&t.name).unwrap();
        assert_eq!(a.shape, b.shape, "{}", t.name);
        assert!(a.data == b.data, "{} differs between the file and the in-memory model", t.name);
    }
}

/// The kernels that rotate (`qkv_rope` in fused decode, `rope_kv_write` in fused prefill, `rope`
/// in plain plans) take their rotary pairs' inverse frequencies by value (kernels/rope.cuh
/// `RopeFreqs`): the CPU reference's `RopeSpec::inv_freq` bits, after the scalars, packed two words
/// per slot; a rope with more pairs than the table sends n = 0 and the kernel computes them.
#[test]
fn rotating_kernels_params_carry_the_cpu_inverse_frequencies() {
    use kiln::runtime::cuda::abi::{by_value_slots, pointer_slots, scalars, ROPE_TABLE};
    let cfg = kiln::model::ModelConfig::preset("llama3.2-1b").unwrap();
    let base = [0x1000_0000u64, 0x2000_0000, 0x3000_0000, 0x4000_0000, 0x5000_0000, 0x6000_0000];
    let mut seen = std::collections::BTreeMap::new();
    let mut rotating = Vec::new();
    for fuse in [true, false] {
        let opts = PlanOptions {
            decode_buckets: vec![1],
            prefill_buckets: vec![16],
            max_context: 256,
            dtype: DType::BF16,
            memory_budget: None,
            burst: 0,
            fuse,
        };
        let plan = build_plan(&cfg, &opts).unwrap();
        for l in plan.programs.iter().flat_map(|p| &p.launches) {
            let rope = match &l.kernel {
                Kernel::QkvRope { rope, .. } | Kernel::Rope { rope, .. } | Kernel::RopeKvWrite { rope, .. } => rope,
                _ => continue,
            };
            *seen.entry(l.kernel.name()).or_insert(0) += 1;
            let slots = param_slots(&l.kernel, &l.bufs, &base);
            let table = &slots[pointer_slots(&l.kernel, &l.bufs) + scalars(&l.kernel).len()..];
            assert_eq!(table.len(), (1 + ROPE_TABLE).div_ceil(2), "{}", l.name);
            let words: Vec<u32> = table.iter().flat_map(|s| [*s as u32, (*s >> 32) as u32]).collect();
            let pairs = rope.rotary_dim as usize / 2;
            assert_eq!(words[0] as usize, pairs, "{}", l.name);
            for i in 0..ROPE_TABLE {
                let want = if i < pairs { rope.inv_freq(i).to_bits() } else { 0 };
                assert_eq!(words[1 + i], want, "{} pair {i}", l.name);
            }
            // Llama 3's scaled frequencies: the table is not the plain theta^(-2i/d).
            assert!(matches!(rope.scaling, kiln::ir::RopeScaling::Llama3 { .. }));
            rotating.push(l.kernel.clone());
        }
    }
    for name in ["qkv_rope", "rope_kv_write", "rope"] {
        assert!(seen.get(name).is_some_and(|&n| n > 0), "no {name} launch in the plans: {seen:?}");
    }
    // A head too wide for the table: n = 0.
    for mut wide in rotating {
        if let Kernel::QkvRope { ref mut rope, .. } | Kernel::Rope { ref mut rope, .. } | Kernel::RopeKvWrite { ref mut rope, .. } = wide {
            rope.rotary_dim = 2 * ROPE_TABLE as u32 + 2;
        }
        assert!(by_value_slots(&wide).iter().all(|&s| s == 0));
    }
}
