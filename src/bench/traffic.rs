//! What a step must move and compute, read off the plan: the bytes a decode step reads (the
//! roofline's numerator) and the FLOPs of a prefill (for the tensor-core fraction).
//!
//! Counts what the plan's launches actually read, not what the model file holds: every weight
//! operand of the decode program once (a tied output projection reads the whole
//! `[vocab, hidden]` table), except the embedding gather, which reads only its `rows` rows.
//! The KV cache is counted at the live length, not at the planned capacity. Activations are
//! left out (a few hundred KiB at decode, mostly in L2).
//!
//! Never: touches a device. Pure functions of a plan, tested without a GPU.

use crate::ir::Phase;
use crate::plan::{Access, Kernel, Plan, ProgramPlan, RegionKind};
use anyhow::{ensure, Context, Result};
use std::collections::BTreeSet;

/// Weight bytes one run of `program` reads: each weight byte once (the union of the weight
/// operands' byte ranges: a span read by two launches, or a planned L2 prefetch span inside the
/// weight its next launch reads, counts once), the gather's table only for the rows it gathers.
pub fn weight_bytes_read(program: &ProgramPlan) -> u64 {
    let mut spans = BTreeSet::new();
    let mut gathered = 0u64;
    for l in &program.launches {
        for (i, b) in l.bufs.iter().enumerate() {
            if b.region != RegionKind::Weights || b.access != Access::Read {
                continue;
            }
            match l.kernel {
                // bufs: table, indices, out; the table is the only weight operand.
                Kernel::Gather { rows, dim, .. } if i == 0 => gathered += rows as u64 * dim as u64 * b.dtype.size() as u64,
                _ => {
                    spans.insert((b.offset, b.bytes));
                }
            }
        }
    }
    // The union of [offset, offset + bytes) over the spans, in offset order.
    let (mut total, mut end) = (0u64, 0u64);
    for &(offset, bytes) in &spans {
        let start = offset.max(end);
        let stop = offset + bytes;
        if stop > start {
            total += stop - start;
            end = stop;
        }
    }
    total + gathered
}

/// Bytes of K and V over all layers for one token row of one sequence:
/// `2 x layers x kv_dim x dtype size`.
pub fn kv_bytes_per_row(plan: &Plan) -> u64 {
    2 * plan.config.n_layers as u64 * plan.config.kv_dim() as u64 * plan.options.dtype.size() as u64
}

/// Mean KV rows each decode step attends to when `new_tokens` tokens follow a `context`-token
/// prompt: the prefill yields token 1, then decode step `j` (1 ..= new_tokens - 1) attends to
/// `context + j` rows; the mean is `context + new_tokens / 2`.
pub fn mean_kv_rows(context: usize, new_tokens: usize) -> f64 {
    context as f64 + new_tokens as f64 / 2.0
}

/// The byte count behind one roofline number.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DecodeTraffic {
    /// Weight bytes one decode step reads (shared by the batch).
    pub weight_bytes: u64,
    /// KV bytes one decode step reads, all sequences of the batch, at the mean live length.
    pub kv_bytes: f64,
    pub batch: usize,
}

impl DecodeTraffic {
    pub fn of(plan: &Plan, batch: usize, context: usize, new_tokens: usize) -> Result<DecodeTraffic> {
        let program = plan.program(Phase::Decode, batch).with_context(|| format!("the plan has no decode bucket of {batch}"))?;
        Ok(DecodeTraffic {
            weight_bytes: weight_bytes_read(&plan.programs[program]),
            kv_bytes: batch as f64 * kv_bytes_per_row(plan) as f64 * mean_kv_rows(context, new_tokens),
            batch,
        })
    }
    pub fn bytes_per_step(&self) -> f64 {
        self.weight_bytes as f64 + self.kv_bytes
    }
    /// Bytes per generated token (a step makes `batch` tokens).
    pub fn bytes_per_token(&self) -> f64 {
        self.bytes_per_step() / self.batch as f64
    }
    /// The most tokens per second a GPU reading `bytes_per_s` can make.
    pub fn roofline_tok_s(&self, bytes_per_s: f64) -> f64 {
        bytes_per_s / self.bytes_per_token()
    }
}

/// FLOPs of prefilling `n` tokens (one sequence, from position 0) with `plan`'s prefill
/// programs, counting multiply-adds as 2: every per-token linear for `n` rows, the output
/// projection once (prefill keeps only the last row's logits), and causal attention (token `i`
/// attends to `i + 1` rows: QK^T and PV, `4 x heads x head_dim x n(n+1)/2` per layer).
/// Independent of chunking: a chunked prefill does the same useful work.
pub fn prefill_flops(plan: &Plan, n: usize) -> Result<f64> {
    let p =
        plan.programs.iter().filter(|p| p.phase == Phase::Prefill).max_by_key(|p| p.bucket).context("the plan has no prefill bucket")?;
    let (mut per_token_macs, mut once_macs, mut attn_width) = (0f64, 0f64, 0f64);
    for l in &p.launches {
        match l.kernel {
            Kernel::Linear { rows, in_features, out_features, .. } | Kernel::Gemm { rows, in_features, out_features, .. } => {
                let macs = in_features as f64 * out_features as f64;
                if rows as usize == p.tokens {
                    per_token_macs += macs;
                } else {
                    once_macs += macs * rows as f64;
                }
            }
            Kernel::Attention { heads, head_dim, .. } | Kernel::AttentionPrefill { heads, head_dim, .. } => {
                attn_width += heads as f64 * head_dim as f64
            }
            _ => {}
        }
    }
    ensure!(per_token_macs > 0.0, "the prefill program has no per-token linear");
    let n = n as f64;
    Ok(2.0 * per_token_macs * n + 2.0 * once_macs + 4.0 * attn_width * n * (n + 1.0) / 2.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::DType;
    use crate::model::ModelConfig;
    use crate::plan::{build_plan, PlanOptions};

    fn plan_of(cfg: &ModelConfig, decode: Vec<usize>, prefill: Vec<usize>) -> Plan {
        plan_fused(cfg, decode, prefill, false)
    }

    fn plan_fused(cfg: &ModelConfig, decode: Vec<usize>, prefill: Vec<usize>, fuse: bool) -> Plan {
        let opts = PlanOptions {
            decode_buckets: decode,
            prefill_buckets: prefill,
            max_context: 64,
            dtype: DType::BF16,
            memory_budget: None,
            burst: 0,
            fuse,
        };
        build_plan(cfg, &opts).unwrap()
    }

    /// Bytes of every weight tensor of `cfg` in bf16, from the config's own table.
    fn table_bytes(cfg: &ModelConfig, skip: &str) -> u64 {
        cfg.tensors().iter().filter(|t| t.name != skip).map(|t| t.shape.iter().product::<usize>() as u64 * 2).sum()
    }

    #[test]
    fn tied_embeddings_count_the_full_table_once_plus_the_gathered_rows() {
        let cfg = crate::gate::random_config("qwen2").unwrap();
        assert!(cfg.tie_word_embeddings);
        let plan = plan_of(&cfg, vec![1, 4], vec![16]);
        let row = cfg.hidden_size as u64 * 2;
        for batch in [1, 4] {
            let p = &plan.programs[plan.program(Phase::Decode, batch).unwrap()];
            // Every tensor once (the table through the output projection) + `batch` rows.
            assert_eq!(weight_bytes_read(p), table_bytes(&cfg, "") + batch as u64 * row, "batch {batch}");
        }
    }

    /// A fused plan's decode reads the same weight bytes: the o projections' planned L2
    /// prefetch spans lie inside the gate weights the next launches read, and count once.
    #[test]
    fn prefetch_spans_add_no_bytes() {
        let cfg = crate::gate::random_config("qwen2").unwrap();
        let plan = plan_fused(&cfg, vec![1], vec![16], true);
        let p = &plan.programs[plan.program(Phase::Decode, 1).unwrap()];
        let prefetching = p.launches.iter().filter(|l| matches!(l.kernel, Kernel::FusedLinear { l2_prefetch: 1.., .. })).count();
        assert_eq!(prefetching, cfg.n_layers, "one o projection per layer");
        assert_eq!(weight_bytes_read(p), table_bytes(&cfg, "") + cfg.hidden_size as u64 * 2);
    }

    #[test]
    fn untied_embeddings_read_only_the_gathered_rows_of_the_table() {
        let cfg = crate::gate::random_config("llama").unwrap();
        assert!(!cfg.tie_word_embeddings);
        let plan = plan_of(&cfg, vec![2], vec![16]);
        let p = &plan.programs[plan.program(Phase::Decode, 2).unwrap()];
        let row = cfg.hidden_size as u64 * 2;
        assert_eq!(weight_bytes_read(p), table_bytes(&cfg, "token_embd.weight") + 2 * row);
    }

    #[test]
    fn roofline_divides_bandwidth_by_weights_plus_live_kv() {
        let cfg = crate::gate::random_config("qwen2").unwrap();
        let plan = plan_of(&cfg, vec![1, 4], vec![16]);
        let row = kv_bytes_per_row(&plan);
        assert_eq!(row, 2 * cfg.n_layers as u64 * cfg.kv_dim() as u64 * 2);
        let t1 = DecodeTraffic::of(&plan, 1, 32, 16).unwrap();
        assert_eq!(t1.kv_bytes, row as f64 * 40.0);
        let t4 = DecodeTraffic::of(&plan, 4, 32, 16).unwrap();
        assert_eq!(t4.kv_bytes, 4.0 * row as f64 * 40.0);
        // Batching shares the weights: more tokens per byte.
        assert!(t4.roofline_tok_s(1e12) > 2.0 * t1.roofline_tok_s(1e12));
        assert!((t1.roofline_tok_s(1e12) - 1e12 / (t1.weight_bytes as f64 + t1.kv_bytes)).abs() < 1e-6);
        assert!(DecodeTraffic::of(&plan, 3, 32, 16).is_err());
    }

    #[test]
    fn prefill_flops_are_two_per_weight_per_token_plus_causal_attention() {
        let cfg = crate::gate::random_config("llama").unwrap();
        let (d, f, v, l) = (cfg.hidden_size as f64, cfg.intermediate_size as f64, cfg.vocab_size as f64, cfg.n_layers as f64);
        let (qd, kvd) = (cfg.q_dim() as f64, cfg.kv_dim() as f64);
        let per_token = l * (d * qd + 2.0 * d * kvd + qd * d + 3.0 * d * f);
        for (buckets, n) in [(vec![16], 16usize), (vec![8, 32], 32), (vec![16], 40)] {
            let plan = plan_of(&cfg, vec![1], buckets);
            let n_f = n as f64;
            let want = 2.0 * per_token * n_f + 2.0 * v * d + 4.0 * l * qd * n_f * (n_f + 1.0) / 2.0;
            let got = prefill_flops(&plan, n).unwrap();
            assert!((got - want).abs() / want < 1e-12, "n {n}: {got} vs {want}");
        }
    }
}
