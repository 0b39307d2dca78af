#!/bin/bash
# Session 65's second device call, after request 1 ran the official command on an H200 (0.5B 0.501 of the roofline,
# 0.26% over the 0.50 target, less than that run's bandwidth spread). On an H200: the acceptance row again (batch 1,
# context 128, the three shapes, torch.compile in the same run; call-final.sh's bench without the gate), a repeat
# reported beside the first whatever it gives; then a block trace of the 0.5B (where the time goes). Elsewhere: the
# trace only (TRACE_ELSEWHERE=0: nothing; request 8 ran the trace on an H100).
# Carry: [".device/bin/kiln-s64c.xz", ".device/kc64c", ".device/kc64t"] (6533db6, main's kernels; kc64t:
# scripts/device_cache.sh /tmp/kiln-s64c /tmp/kc64t KILN_TRACE=1).
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
if grep -q H200 $OUT/gpu.txt; then
  source scripts/device_prep.sh .device/bin/kiln-s64c.xz .device/kc64c > /tmp/prep.txt
  B=$PWD/target/kiln
  { date -u; $B --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat /tmp/prep.txt; } > $S
  for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
    [ -f target/synth/$M-seed1/config.json ] || timeout 240 $B synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
  done
  echo "synth ready at $(el) s" >> $S
  C=$($B --version | sed -E 's/.*\(([0-9a-f]+).*/\1/')
  R=$(date -u +%F)-h200-decode-row-$C
  timeout $((420 - $(el))) $B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth \
    --prompt 128 --new-tokens 256 --batches 1 --contexts 128 --repeats 5 --fuse --torch --torch-rows first \
    --torch-modes compile --torch-repeats 3 --out $OUT/$R > $OUT/official.txt 2>&1
  echo "bench rc $? at $(el) s" >> $S
  grep -s -a -E '^(qwen|llama)[^ ]* +1 +128 |read bandwidth:|knobs|rror' $OUT/official.txt | head -10 >> $S
fi
[ "${TRACE_ELSEWHERE:-1}" = 1 ] || grep -q H200 $OUT/gpu.txt || exit 0
[ $(el) -lt 480 ] && timeout $((560 - $(el))) bash scripts/device_trace.sh .device/bin/kiln-s64c.xz .device/kc64t trace-summary.txt qwen2.5-0.5b:128 > /dev/null 2>&1
echo "trace done at $(el) s" >> $S
cat $S; head -60 $OUT/trace-summary.txt 2>/dev/null
