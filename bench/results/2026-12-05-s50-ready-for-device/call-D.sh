#!/bin/bash
# Written in session 49 (no device lent); never run. Where the 0.5B's step goes with KILN_FUSE_QKV_ATTN off and on:
# block traces (kernels built with KILN_TRACE=1: kernels/common.cuh wait_prior_grids records each block's wait) of
# 256 greedy decode tokens after a 128-token prompt, batch 1, summed per launch role by scripts/trace_summary.py
# (each launch charged release(i + 1) - release(i), boundary included; late = blocks not resident at the release).
# Run after call-B.sh (any result: the trace says where the fused launch's time goes either way), if device time is
# left; ~15 s unpack + 2 x (~10 s plan + ~20 s traced run): ~90 s plus the start.
# Carry: [".device/bin/kiln-s49.xz", ".device/kc50t"] (the binary of a81a15e and kiln's kernel cache built with
# KILN_NVRTC_DEFINES=KILN_TRACE=1 on the CPU machine: `scripts/device_cache.sh target/kiln-s49 .device/kc50t KILN_TRACE=1`,
# which keys it by the device's include path and checks that the binary finds it; session 49's kc49t was keyed by
# the wheel's include path and would have compiled on the device).
# Session 52 ran it (results/2026-12-05-h100-decode-ab-s52.md) and added BIN=... KC=... to trace another binary with
# its trace cache, e.g. BIN=.device/bin/kiln-s52b.xz KC=.device/kc52t (14db48a: the fused kernel on by default, at 128
# registers; carry those two instead).
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
source scripts/device_prep.sh ${BIN:-.device/bin/kiln-s49.xz} ${KC:-.device/kc50t} KILN_TRACE=1 > /tmp/prep.txt
B=$PWD/target/kiln M=qwen2.5-0.5b
D=target/synth/$M-seed1
S=$OUT/d-summary.txt; { date -u; $B --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat /tmp/prep.txt; } > $S
[ -f $D/config.json ] || timeout 100 $B synth --shape $M --seed 1 --out $D > $OUT/log-synth.txt 2>&1
for K in 0 1; do
  N=$M-qkvattn$K
  echo "== trace $N (KILN_FUSE_QKV_ATTN=$K) at $(el) s" >> $S
  KILN_FUSE_QKV_ATTN=$K $B plan --model $D --fuse --decode-buckets 1 -o $OUT/$N.plan > $OUT/log-plan-$K.txt 2>&1
  KILN_TRACE_OUT=/tmp/trace.bin timeout 90 $B run --model $D --plan $OUT/$N.plan --prompt-ids $(seq -s, 1 128) \
    --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
  echo "rc $? ids $(grep -a -v '^\[kiln\]\|^kiln:' /tmp/traced.txt | md5sum | cut -c1-12)" >> $S
  grep -a '^\[kiln\]\|^kiln:' /tmp/traced.txt | cut -c1-200 >> $S
  python3 scripts/trace_summary.py /tmp/trace.bin $OUT/$N.plan.txt --csv $OUT/launches-$N.csv >> $S 2>&1
  rm -f /tmp/trace.bin $OUT/$N.plan
done
echo "end $(el) s" >> $S
cd $OUT && gzip -f launches-*.csv; tar czf extra.tgz log-*.txt launches-*.csv.gz *.plan.txt 2>/dev/null; rm -f log-*.txt launches-*.csv.gz *.plan.txt
cat $S
