#!/bin/bash
# Session 60: e81ee87's trace executor (the phase stamps per block derived from the buffers' sizes, not a constant)
# on a GPU: the 0.5B traced at context 128 with main's KILN_TRACE=1 kernels, its phase file's size, and
# scripts/trace_summary.py's phases (which must match session 59's call-phase.sh). Carry
# [".device/bin/kiln-s60m.xz", ".device/kc60t"] (83a7781's binary; scripts/device_cache.sh /tmp/kiln-s60m .device/kc60t
# KILN_TRACE=1). ~25 s on a warm machine. Output: $OUT/s60-trace-summary.txt.
set -u
source scripts/device_prep.sh .device/bin/kiln-s60m.xz .device/kc60t KILN_TRACE=1 > /tmp/prep.txt
B=$PWD/target/kiln S=$OUT/s60-trace-summary.txt
{ nvidia-smi --query-gpu=name --format=csv,noheader; $B --version; cat /tmp/prep.txt; } > $S
M=qwen2.5-0.5b D=target/synth/$M-seed1
[ -f $D/config.json ] || timeout 60 $B synth --shape $M --seed 1 --out $D > /dev/null 2>&1
$B plan --model $D --fuse --decode-buckets 1 -o /tmp/$M.plan > /dev/null 2>&1
KILN_TRACE_OUT=/tmp/trace.bin timeout 60 $B run --model $D --plan /tmp/$M.plan --prompt-ids $(seq -s, 1 128) \
  --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
echo "trace $M prompt 128 rc $?" >> $S; grep -a -i "error\|panic\|phase" /tmp/traced.txt | head -3 >> $S
ls -la /tmp/trace.bin* >> $S
python3 scripts/trace_summary.py /tmp/trace.bin /tmp/$M.plan.txt --json $OUT/trace-128.json >> $S 2>&1
cat $S
