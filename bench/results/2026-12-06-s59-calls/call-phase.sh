#!/bin/bash
# Session 59: where the fused QKV-attention's ~4.8 us past its wait goes: KILN_TRACE_PHASE stamps (e76de01; trace
# builds only) at its four phases, the 0.5B traced as in session 58's call 8. Carry
# [".device/bin/kiln-s59t.xz", ".device/kc59t"] (e76de01's binary; scripts/device_cache.sh /tmp/kiln-s59t .device/kc59t
# KILN_TRACE=1). ~20 s on a warm machine. Output: $OUT/s59-phase-summary.txt.
set -u
source scripts/device_prep.sh .device/bin/kiln-s59t.xz .device/kc59t KILN_TRACE=1 > /tmp/prep.txt
B=$PWD/target/kiln S=$OUT/s59-phase-summary.txt
{ nvidia-smi --query-gpu=name --format=csv,noheader; $B --version; cat /tmp/prep.txt; } > $S
M=qwen2.5-0.5b D=target/synth/$M-seed1
[ -f $D/config.json ] || timeout 60 $B synth --shape $M --seed 1 --out $D > /dev/null 2>&1
$B plan --model $D --fuse --decode-buckets 1 -o /tmp/$M.plan > /dev/null 2>&1
for CTX in 128 1024; do
  KILN_TRACE_OUT=/tmp/trace.bin timeout 60 $B run --model $D --plan /tmp/$M.plan --prompt-ids $(seq -s, 1 $CTX) \
    --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
  echo "trace $M prompt $CTX rc $?" >> $S; grep -a -i "error\|panic\|phase" /tmp/traced.txt | head -3 >> $S
  ls -la /tmp/trace.bin* >> $S
  python3 scripts/trace_summary.py /tmp/trace.bin /tmp/$M.plan.txt --json $OUT/phase-$CTX.json >> $S 2>&1
done
cat $S
