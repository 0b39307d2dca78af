//! Plan files: a versioned envelope around the plan, separate from the in-memory type so that
//! the format can change deliberately. Layout: magic `KILNPLAN`, `u32` format version (LE),
//! bincode body, 32-byte SHA-256 of the body. Loading checks, in order: magic, format version,
//! checksum (corrupt or truncated), kiln version, then runs the plan checker. Pairing a plan
//! with a model checks the fingerprint ([`check_model`]).

use super::Plan;
use crate::model::config::ModelConfig;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::Path;

pub const MAGIC: &[u8; 8] = b"KILNPLAN";
/// Bump on any change to the serialized types.
pub const FORMAT_VERSION: u32 = 15;

/// The serialized body. Today it carries the plan as is; a future format can convert.
#[derive(Serialize, Deserialize)]
struct PlanFileBody {
    kiln_version: String,
    fingerprint: String,
    plan: Plan,
}

fn bincode_config() -> impl bincode::config::Config {
    bincode::config::standard().with_little_endian().with_fixed_int_encoding()
}

pub fn to_bytes(plan: &Plan) -> Result<Vec<u8>> {
    let body = PlanFileBody { kiln_version: plan.kiln_version.clone(), fingerprint: plan.fingerprint.clone(), plan: plan.clone() };
    let body = bincode::serde::encode_to_vec(&body, bincode_config()).context("serializing the plan")?;
    let mut out = Vec::with_capacity(body.len() + 44);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&body);
    out.extend_from_slice(&Sha256::digest(&body));
    Ok(out)
}

pub fn from_bytes(bytes: &[u8], what: &str) -> Result<Plan> {
    let replan = "re-create it with `kiln plan` (see `kiln plan --help`)";
    if bytes.len() < 12 || &bytes[..8] != MAGIC {
        bail!("{what} is not a kiln plan file (no `KILNPLAN` header); {replan}");
    }
    let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    if version != FORMAT_VERSION {
        bail!("{what} is plan format version {version}, but this kiln reads version {FORMAT_VERSION}; {replan}");
    }
    if bytes.len() < 12 + 32 {
        bail!("{what} is truncated ({} bytes); {replan}", bytes.len());
    }
    let (body, sum) = bytes[12..].split_at(bytes.len() - 12 - 32);
    if Sha256::digest(body).as_slice() != sum {
        bail!("{what} is corrupt or truncated (checksum mismatch); {replan}");
    }
    let (body, used): (PlanFileBody, usize) =
        bincode::serde::decode_from_slice(body, bincode_config()).with_context(|| format!("{what} could not be decoded; {replan}"))?;
    if used != body_len(bytes) {
        bail!("{what} has trailing bytes after the plan; {replan}");
    }
    let this = env!("CARGO_PKG_VERSION");
    if body.kiln_version != this || body.plan.kiln_version != this {
        bail!("{what} was planned by kiln {}, this is kiln {this}; {replan}", body.kiln_version);
    }
    if body.fingerprint != body.plan.fingerprint {
        bail!("{what} is inconsistent (envelope and plan fingerprints differ); {replan}");
    }
    super::check::check_plan(&body.plan).with_context(|| format!("{what} failed the plan checker"))?;
    Ok(body.plan)
}

fn body_len(bytes: &[u8]) -> usize {
    bytes.len() - 12 - 32
}

pub fn save(plan: &Plan, path: &Path) -> Result<()> {
    std::fs::write(path, to_bytes(plan)?).with_context(|| format!("writing plan file {}", path.display()))
}

pub fn load(path: &Path) -> Result<Plan> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read plan file `{}`", path.display()))?;
    from_bytes(&bytes, &format!("plan file `{}`", path.display()))
}

/// Fails unless `plan` was built for exactly this model (config and tensor table).
pub fn check_model(plan: &Plan, config: &ModelConfig, model_desc: &str) -> Result<()> {
    let fp = super::fingerprint(config, plan.options.dtype);
    if fp != plan.fingerprint {
        let mut diffs = Vec::new();
        let (a, b) = (&plan.config, config);
        macro_rules! cmp {
            ($($f:ident),*) => {$(
                if a.$f != b.$f { diffs.push(format!("{}: plan {:?}, model {:?}", stringify!($f), a.$f, b.$f)); }
            )*};
        }
        cmp!(
            arch,
            vocab_size,
            hidden_size,
            intermediate_size,
            n_layers,
            n_heads,
            n_kv_heads,
            head_dim,
            rms_norm_eps,
            rope,
            tie_word_embeddings,
            qkv_bias,
            qk_norm,
            max_position_embeddings,
            bos_token_id,
            eos_token_ids
        );
        bail!(
            "the plan was built for another model than {model_desc} (fingerprint {} vs {}; {}); re-plan for this model with `kiln plan --model ...`",
            &plan.fingerprint[..12],
            &fp[..12],
            if diffs.is_empty() { "configs differ".to_string() } else { diffs.join("; ") }
        );
    }
    Ok(())
}
