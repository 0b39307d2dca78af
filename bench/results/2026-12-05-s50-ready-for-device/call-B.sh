#!/bin/bash
# Written in session 48; its carried files rebuilt in session 49 (kernels/attention_qkv.cu gained empty probe hooks:
# the same machine code, new cache keys). No device lent in either. QKV-RoPE and the decode attention in one launch,
# `kiln_qkv_attention_bf16` (kernels/attention_qkv.cu) behind the plan-time knob KILN_FUSE_QKV_ATTN=1 (lower::fuse
# rewrite 11; the 0.5B's one-row decode programs take it, the 1B and 8B never), in kiln's own decode. Run it
# first (call-A.sh's part 1 timed the same kernel in stand-in layers in session 50):
#   1. kernel_check --only qkv_attention: the kernel against qkv_rope + attention_cluster_g1 (out and K/V row p
#      within rounding, other cache rows untouched, early == late bitwise, padding row zeros);
#   2. greedy ids of the 0.5B with the knob off and on (they may differ: the fused GEMV sums in its own order);
#   3. `kiln gate --checks 2,3,5` with the knob: GPU == CPU (its qwen2-hd64 model takes the fused kernel),
#      GPU == transformers on the Qwen2.5-0.5B shape, device loop == one-step;
#   4. the A/B: scripts/ab_placement.py, knob off / on, 0.5B, batch 1, contexts 128 and 4096, pads 0/32/64/1024.
# Carry: [".device/bin/kiln-s49.xz", ".device/kc50", ".device/kcc49.tar.xz"] (the binary of a81a15e, kiln's
# kernel cache for it and kernel_check's CUBINs, all built here with NVRTC 13.0; rebuild them after any change
# to src/ or kernels/: bench/README.md "Device calls", scripts/device_cache.sh and call-A.sh's header).
# Session 50 (H100, results/2026-12-05-h100-decode-ab-s50): steps 1 and part of 3 ran and passed; the A/B and the ids
# timed out because kc49 missed the binary's cache key (every run compiled); .device/kc50 is rebuilt and checked by
# scripts/device_cache.sh, and the call now prints how many modules it finds cached. This is the next first call.
# Session 51 (no machine started in 19 calls) added three switches for a short budget: SKIP_CHECK=1 (step 1; session
# 50's check passed, and kcc49.tar.xz need not be carried), SKIP_GATE=1 (step 3) and PADS=a,b (step 4's pads).
# ~20 s unpack + ~60 s check + ~40 s synth/ids + ~150 s gate + 8 runs of ~15 s: ~450 s plus the start.
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
source scripts/device_prep.sh .device/bin/kiln-s49.xz .device/kc50 > /tmp/prep.txt
[ -n "${SKIP_CHECK:-}" ] || tar -C /tmp -xJf .device/kcc49.tar.xz
export KILN_CHECK_CACHE=/tmp/kcc49
S=$OUT/b-summary.txt; { date -u; target/kiln --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat /tmp/prep.txt; } > $S
if [ -z "${SKIP_CHECK:-}" ]; then
timeout 150 python3 scripts/kernel_check.py --only qkv_attention --dtypes bf16 > $OUT/check.txt 2>&1
echo "kernel_check qkv_attention rc $? at $(el) s" >> $S; grep -a -E "qkv_attention|FAIL|compiled" $OUT/check.txt >> $S
else echo "kernel_check skipped (SKIP_CHECK)" >> $S; fi
M=qwen2.5-0.5b
[ -f target/synth/$M-seed1/config.json ] || timeout 100 target/kiln synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-synth.txt 2>&1
for K in 0 1; do
  KILN_FUSE_QKV_ATTN=$K timeout 60 target/kiln run --model target/synth/$M-seed1 --fuse --prompt-ids $(seq -s, 1 128) \
    --max-tokens 128 --temperature 0 --device cuda 2> $OUT/log-ids-$K.txt | md5sum | cut -c1-12 > /tmp/ids.txt
  echo "0.5B greedy ids, KILN_FUSE_QKV_ATTN=$K: $(cat /tmp/ids.txt) at $(el) s" >> $S
done
if [ -z "${SKIP_GATE:-}" ]; then
KILN_FUSE_QKV_ATTN=1 timeout 200 target/kiln gate --checks 2,3,5 --hf-shapes $M --synth-dir target/synth > $OUT/gate.log 2>&1
echo "gate 2,3,5 with KILN_FUSE_QKV_ATTN=1 rc $? at $(el) s" >> $S; grep -a -E 'FAIL|qwen2-hd64|transformers|kiln gate:' $OUT/gate.log | cut -c1-220 >> $S
else echo "gate skipped (SKIP_GATE)" >> $S; fi
timeout $(( 590 - $(el) )) python3 scripts/ab_placement.py --arm base=target/kiln --arm qkvattn=target/kiln:KILN_FUSE_QKV_ATTN=1 \
  --pads ${PADS:-0,32,64,1024} --rounds 1 --timeout 60 --out /tmp/ab49 -- \
  --shapes $M --synth-root target/synth --batches 1 --contexts 128,4096 --repeats 3 --fuse >> $S 2>&1
echo "ab end rc $? at $(el) s" >> $S
cp /tmp/ab49/*.log $OUT/ 2>/dev/null
cat $S
