#!/bin/bash
# Session 58 call 3 (call 2, as first written, asked for the official command on an H200 and got no machine; 401 s
# were left, too little for the official command after a start). On an H200: the 0.5B alone through kiln bench
# (no torch) on e2f3541's binary (main's default kernels), for its measured fraction there, not the acceptance;
# then, on either GPU, block traces: the first run of the blocks' end stamps (cfff1f3: every kernel opens with
# KILN_TRACE_BLOCK_END(); scripts/trace_summary.py splits each launch's charge into its span, release to last
# block end, and the gap to the next release): the 0.5B and the 1B, default fused plans, 128-token prompt, 256
# greedy tokens.
# Ran 04:32 UTC on an H100 (requested as nvidia-h200): the traces only (s58-3-summary.txt; wall 12 s).
# Carry: [".device/bin/kiln-s58.xz", ".device/kc58", ".device/bin/kiln-s58t.xz", ".device/kc58t"]
# (kc58: scripts/device_cache.sh /tmp/kiln-s58 .device/kc58; kc58t: ... /tmp/kiln-s58t .device/kc58t KILN_TRACE=1).
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  source scripts/device_prep.sh .device/bin/kiln-s58.xz .device/kc58 > $OUT/h200-05b.txt
  M=qwen2.5-0.5b; timeout 120 target/kiln synth --shape $M --seed 1 --out target/synth/$M-seed1 > /dev/null 2>&1
  timeout 150 target/kiln bench --shapes $M --synth-root target/synth --prompt 128 --new-tokens 256 --batches 1 \
    --contexts 128 --repeats 5 --fuse --out $OUT/$(date -u +%F)-h200-decode-05b-e2f35416625f >> $OUT/h200-05b.txt 2>&1
  echo "bench rc $? at $(el) s" >> $OUT/h200-05b.txt
  unset KILN_NVRTC_DEFINES KILN_CACHE_DIR
fi
source scripts/device_prep.sh .device/bin/kiln-s58t.xz .device/kc58t KILN_TRACE=1 > /tmp/prep.txt
B=$PWD/target/kiln
S=$OUT/s58-3-summary.txt; { date -u; $B --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat /tmp/prep.txt; } > $S
for M in qwen2.5-0.5b llama3.2-1b; do
  [ $(el) -lt ${TRACE_BEFORE:-240} ] || { echo "trace $M skipped at $(el) s" >> $S; break; }
  D=target/synth/$M-seed1
  [ -f $D/config.json ] || timeout 120 $B synth --shape $M --seed 1 --out $D > /dev/null 2>&1
  $B plan --model $D --fuse --decode-buckets 1 -o $OUT/$M.plan > /dev/null 2>&1
  KILN_TRACE_OUT=/tmp/trace.bin timeout 45 $B run --model $D --plan $OUT/$M.plan --prompt-ids $(seq -s, 1 128) \
    --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
  echo "trace $M rc $? at $(el) s" >> $S; grep -a -i 'error\|panic\|trace of' /tmp/traced.txt | head -3 >> $S
  python3 scripts/trace_summary.py /tmp/trace.bin $OUT/$M.plan.txt --csv $OUT/launches-$M.csv >> $S 2>&1
  rm -f /tmp/trace.bin $OUT/$M.plan; gzip -f $OUT/launches-$M.csv $OUT/$M.plan.txt
done
cat $S
[ -f $OUT/h200-05b.txt ] && grep -a -E 'cached|read bandwidth|knobs|^qwen[^ ]* +1 +128 |rror|bench rc' $OUT/h200-05b.txt
