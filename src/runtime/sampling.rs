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

/// The 64-bit argmax key of logit `x` at index `i` (`Op::LinearArgmax`; `kiln::argmax_key` in
/// kernels/common.cuh computes the same bits): the value's bits made order-preserving as an
/// unsigned integer in the high word (-0 taken as +0), `!i` in the low word, and 0 for NaN. The
/// largest key of a row is its [`argmax`] (the largest value, the lowest index among equal ones,
/// NaN never while any value is not NaN): a max, so any order of folding gives the same key.
pub fn argmax_key(x: f32, i: u32) -> u64 {
    if x.is_nan() {
        return 0;
    }
    let b = if x == 0.0 { 0 } else { x.to_bits() };
    let ordered = if b & 0x8000_0000 != 0 { !b } else { b | 0x8000_0000 };
    (ordered as u64) << 32 | (!i) as u64
}

/// The token of a row whose largest [`argmax_key`] is `key` (0: no key folded in, or only NaN:
/// index 0, as [`argmax`] of a row of NaN); an index outside the vocabulary gives 0.
pub fn argmax_key_token(key: u64, vocab: usize) -> usize {
    if key == 0 {
        return 0;
    }
    let i = !(key as u32) as usize;
    if i < vocab {
        i
    } else {
        0
    }
}

/// Whether a row with this temperature takes the argmax (step 1): `temperature <= 0`, NaN or infinite.
pub fn is_greedy(temperature: f32) -> bool {
    temperature.is_nan() || temperature <= 0.0 || !temperature.is_finite()
}

pub fn sample_row(logits: &[f32], temperature: f32, top_k: i32, top_p: f32, seed: u32, counter: u32) -> usize {
    if is_greedy(temperature) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn key_argmax(l: &[f32]) -> usize {
        let key = l.iter().enumerate().map(|(i, &x)| argmax_key(x, i as u32)).max().unwrap_or(0);
        argmax_key_token(key, l.len())
    }

    #[test]
    fn the_argmax_key_picks_argmaxs_token() {
        let nan = f32::NAN;
        let (inf, ninf) = (f32::INFINITY, f32::NEG_INFINITY);
        let rows: Vec<Vec<f32>> = vec![
            vec![1.0, 3.0, 2.0],
            vec![3.0, 1.0, 3.0],
            vec![-0.0, 0.0, -1.0],
            vec![-1.0, 0.0, -0.0],
            vec![nan, nan, nan],
            vec![nan, -5.0, nan, -5.0],
            vec![ninf, ninf],
            vec![nan, ninf, -1e-45],
            vec![f32::MIN, -f32::MIN_POSITIVE, -1e-45, 1e-45, f32::MAX, inf, inf],
            vec![-2.0, -3.0, -1.5, -1.5],
            vec![-0.0, -0.0],
        ];
        for l in &rows {
            assert_eq!(key_argmax(l), argmax(l), "{l:?}");
        }
        // Pseudo-random rows with many ties and signs (a fixed generator, no weights baked in).
        let mut z = 7u64;
        for n in 1..200usize {
            let l: Vec<f32> = (0..n)
                .map(|_| {
                    z = splitmix64(z);
                    match z % 11 {
                        0 => nan,
                        1 => -0.0,
                        2 => 0.0,
                        _ => ((z >> 8) % 17) as f32 - 8.0,
                    }
                })
                .collect();
            assert_eq!(key_argmax(&l), argmax(&l), "{l:?}");
        }
    }
}
