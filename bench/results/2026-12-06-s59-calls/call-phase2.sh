#!/bin/bash
# Session 59: phase stamps in the QKV-attention (4a6b6f2) and in the o / down GEMV's early-residual path (70d2c51):
# the 0.5B (its o; its down is the k2 kernel, unstamped) and the 1B (o and down), traced as in call-8.
# Carry [".device/bin/kiln-s59w.xz", ".device/kc59w"] (70d2c51's binary; scripts/device_cache.sh /tmp/kiln-s59w
# .device/kc59w KILN_TRACE=1). ~30 s warm. Output: $OUT/s59-phase2-summary.txt.
set -u
source scripts/device_prep.sh .device/bin/kiln-s59w.xz .device/kc59w KILN_TRACE=1 > /tmp/prep.txt
B=$PWD/target/kiln S=$OUT/s59-phase2-summary.txt
{ nvidia-smi --query-gpu=name --format=csv,noheader; $B --version; cat /tmp/prep.txt; } > $S
for M in qwen2.5-0.5b llama3.2-1b; do
  D=target/synth/$M-seed1
  [ -f $D/config.json ] || timeout 60 $B synth --shape $M --seed 1 --out $D > /dev/null 2>&1
  $B plan --model $D --fuse --decode-buckets 1 -o /tmp/$M.plan > /dev/null 2>&1
  KILN_TRACE_OUT=/tmp/trace.bin timeout 45 $B run --model $D --plan /tmp/$M.plan --prompt-ids $(seq -s, 1 128) \
    --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
  echo "trace $M rc $?" >> $S; grep -a -i "error\|panic" /tmp/traced.txt | head -3 >> $S
  python3 scripts/trace_summary.py /tmp/trace.bin /tmp/$M.plan.txt --json $OUT/phase2-$M.json >> $S 2>&1
done
cat $S
