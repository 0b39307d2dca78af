#!/bin/bash
# Session 52: with QKV-RoPE inside the attention on by default, the trace (results/2026-12-05-h100-decode-ab-s52.md,
# call D) shows the o projection after it 1.4 us slower than after the plain cluster attention (3.63 vs 2.24 us):
# the fused kernel's 202 registers x 256 threads leave no room for an o block on its 112 SMs, so o's 56 blocks
# crowd the other 20. KILN_QKV_ATTN_MIN_BLOCKS=2 (kernels/attention_qkv.cu, a -D) caps it at 128 registers so a
# block of the next launch fits beside it. This call:
#   1. `kiln gate --checks 1,4` on the binary of 6bd7d5c (check 1 gained fused plans, qwen2-hd64's with qkv_attention);
#   2. the A/B, scripts/ab_placement.py: base (default kernels) vs min2 (KILN_NVRTC_DEFINES=KILN_QKV_ATTN_MIN_BLOCKS=2),
#      0.5B, batch 1, contexts 128 and 4096, pads 0 and 1024 (PADS=a,b,... to change), 3 repeats per run.
# Carry: [".device/bin/kiln-s52.xz", ".device/kc52m2"] (kc50's two modules plus both compiled with the define:
# scripts/device_cache.sh /tmp/kiln-s52 .device/kc52m2 KILN_QKV_ATTN_MIN_BLOCKS=2 after copying kc50). ~120 s + start.
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
source scripts/device_prep.sh .device/bin/kiln-s52.xz .device/kc52m2 > /tmp/prep.txt
S=$OUT/m2-summary.txt; { date -u; target/kiln --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat /tmp/prep.txt; } > $S
M2=$(KILN_NVRTC_DEFINES=KILN_QKV_ATTN_MIN_BLOCKS=2 timeout 10 target/kiln kernels --modules both 2>&1 | grep -c 'already cached')
echo "min2 kernels: $M2 of 2 modules cached" >> $S
if [ -z "${SKIP_GATE:-}" ]; then
  timeout 150 target/kiln gate --checks 1,4 > $OUT/gate14.log 2>&1
  echo "gate 1,4 rc $? at $(el) s" >> $S; grep -a -E '^(PASS|FAIL) 1|FAIL|kiln gate:' $OUT/gate14.log | cut -c1-160 >> $S
fi
M=qwen2.5-0.5b
[ -f target/synth/$M-seed1/config.json ] || timeout 100 target/kiln synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-synth.txt 2>&1
timeout $(( ${LIMIT:-290} - $(el) )) python3 scripts/ab_placement.py --arm base=target/kiln \
  --arm min2=target/kiln:KILN_NVRTC_DEFINES=KILN_QKV_ATTN_MIN_BLOCKS=2 \
  --pads ${PADS:-0,1024} --rounds 1 --timeout 60 --out /tmp/abm2 -- \
  --shapes $M --synth-root target/synth --batches 1 --contexts 128,4096 --repeats 3 --fuse >> $S 2>&1
echo "ab end rc $? at $(el) s" >> $S
cp /tmp/abm2/*.log $OUT/ 2>/dev/null
cat $S
