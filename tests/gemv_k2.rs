//! The plan knob `KILN_GEMV_K2` (src/plan/geometry.rs `gemv_k2`; on unless `0`): the Qwen2.5-0.5B's decode down
//! projection planned over clusters of two 256-thread blocks per tile, calling
//! `kiln_fused_linear_res_k2_*`, and no other launch. Its own test binary: the knob is read once per
//! process, here before any plan.

use kiln::ir::DType;
use kiln::model::config::ModelConfig;
use kiln::plan::geometry::{gemv_grid, gemv_tiles};
use kiln::plan::{build_plan, Kernel, PlanOptions};
use kiln::runtime::cuda::abi;

#[test]
fn the_k2_knob_splits_only_the_wide_one_row_down_projection() {
    std::env::remove_var("KILN_GEMV_K2"); // the default
    let cfg = ModelConfig::preset("qwen2.5-0.5b").unwrap();
    let opts = PlanOptions {
        decode_buckets: vec![1, 8],
        prefill_buckets: vec![16],
        max_context: 256,
        dtype: DType::BF16,
        memory_budget: None,
        burst: 0,
        fuse: true,
    };
    let plan = build_plan(&cfg, &opts).unwrap();
    let mut split = 0;
    for l in plan.programs.iter().flat_map(|p| &p.launches) {
        let symbol = abi::launch_symbol(l);
        let doubled = gemv_tiles(&l.kernel).is_some_and(|t| l.grid[0] == 2 * t);
        assert_eq!(symbol.contains("_k2_"), doubled, "{}: {symbol} {:?}", l.name, l.grid);
        if !doubled {
            continue;
        }
        // Only a decode down projection (one to eight rows, 4864 inputs), planned wide without the knob.
        let Kernel::FusedLinear { rows, in_features: 4864, out_features, .. } = l.kernel else { panic!("{}: {:?}", l.name, l.kernel) };
        assert!(rows <= 8, "{}", l.name);
        assert_eq!(gemv_grid(out_features, 4864).1, 512, "{}", l.name);
        assert_eq!((l.grid, l.block, l.occupancy), ([112, 1, 1], [256, 1, 1], 0), "{}", l.name);
        assert_eq!(symbol, "kiln_fused_linear_res_k2_bf16_bf16", "{}", l.name);
        split += 1;
    }
    // 24 layers in each of the two decode buckets.
    assert_eq!(split, 48);
}
