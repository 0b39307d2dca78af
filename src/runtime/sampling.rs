//! The sampling rule of `Op::Sample`, written once on the host. The CPU executor calls
//! [`sample_row`]; `kernels/sample.cu` implements the same steps and the same generator, so a
//! seed gives the same tokens on every executor (up to f32 rounding in the softmax sums).
//!
//! For one row of logits:
//! 1. `temperature <= 0` (or not finite): argmax, lowest index on ties.
//! 2. Otherwise weights `w_i = exp((l_i - max) / temperature)` in f32.
//! 3. Candidates sorted by (`w` descending, index ascending); keep the first `top_k` (all when
//!    `top_k <= 0` or `>= vocab`).
//! 4. If `0 < top_p < 1`: keep the shortest prefix whose weight reaches `top_p` of the kept total.
//! 5. `u = uniform(seed, counter)`; walk the kept prefix accumulating weights until the sum
//!    exceeds `u * total`; that candidate is the token (the last one if rounding runs out).

/// SplitMix64 finalizer: a well-mixed 64-bit hash.
pub fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A uniform number in `[0, 1)` keyed by `(seed, counter)`: the top 24 bits of
/// `splitmix64(seed << 32 | counter)` divided by 2^24 (exact in f32).
pub fn uniform(seed: u32, counter: u32) -> f32 {
    let bits = splitmix64(((seed as u64) << 32) | counter as u64) >> 40;
    bits as f32 / 16_777_216.0
}

/// Index of the largest logit, lowest index on ties; NaN never wins.
pub fn argmax(logits: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in logits.iter().enumerate() {
        if x > logits[best] || logits[best].is_nan() && !x.is_nan() {
            best = i;
        }
    }
    best
}

pub fn sample_row(logits: &[f32], temperature: f32, top_k: i32, top_p: f32, seed: u32, counter: u32) -> usize {
    if temperature.is_nan() || temperature <= 0.0 || !temperature.is_finite() {
        return argmax(logits);
    }
    let max = logits[argmax(logits)];
    let mut cand: Vec<(f32, usize)> = logits.iter().enumerate().map(|(i, &l)| (((l - max) / temperature).exp(), i)).collect();
    cand.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    if top_k > 0 && (top_k as usize) < cand.len() {
        cand.truncate(top_k as usize);
    }
    if top_p > 0.0 && top_p < 1.0 {
        let total: f32 = cand.iter().map(|c| c.0).sum();
        let mut acc = 0.0f32;
        let mut keep = cand.len();
        for (j, c) in cand.iter().enumerate() {
            acc += c.0;
            if acc >= top_p * total {
                keep = j + 1;
                break;
            }
        }
        cand.truncate(keep);
    }
    let total: f32 = cand.iter().map(|c| c.0).sum();
    let target = uniform(seed, counter) * total;
    let mut acc = 0.0f32;
    for c in &cand {
        acc += c.0;
        if acc > target {
            return c.1;
        }
    }
    cand.last().map(|c| c.1).unwrap_or(0)
}
