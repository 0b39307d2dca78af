#!/bin/bash
# Session 36 call C. Binary kiln-s36c at $KILN_COMMIT (rewrite 9: the greedy argmax key, filtered atomics, default on).
# 1. kiln gate --checks 5 (device loop == one-step; the full gate ran in call B on this binary); 2. the official command; 3. block traces of the three shapes if time is left.
set -u
T0=$(date +%s)
B=$PWD/target/kiln-s36c
export KILN_CUDA_INCLUDE=/usr/local/cuda/include KILN_CACHE_DIR=$PWD/.device/kc36c
for d in kc36c kc36ct; do (cd .device/$d && xz -d -k -f *.xz); done
S=$OUT/c-summary.txt
{ date -u; echo "commit $KILN_COMMIT"; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  [ -f target/synth/$M-seed1/config.json ] || timeout 240 $B synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
  echo "synth $M ready at $(el) s" >> $S
done
echo "== gate start $(el) s" >> $S
timeout 150 $B gate --checks 5 --synth-dir target/synth > $OUT/gate.log 2>&1
echo "rc $? end $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate.log | tail -6 >> $S
R=2026-12-03-h200-decode-$KILN_COMMIT
echo "== official start $(el) s" >> $S
KILN_COMMIT=$KILN_COMMIT timeout 330 $B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --prompt 128 --new-tokens 256 \
  --batches 1,2,4,8 --contexts 128,4096 --repeats 5 --fuse --torch --torch-rows first --torch-modes compile --torch-repeats 3 \
  --out $OUT/$R > $OUT/official.txt 2>&1
echo "rc $? end $(el) s" >> $S
grep -a -E '^(qwen|llama)[^ ]* +1 +128 |read bandwidth:|rror' $OUT/official.txt | head -8 >> $S
IDS=$(seq -s, 1 128)
for M in llama3.2-1b qwen2.5-0.5b llama3.1-8b; do
  [ $(el) -gt 540 ] && break
  D=target/synth/$M-seed1
  echo "== trace $M at $(el) s" >> $S
  $B plan --model $D --fuse --decode-buckets 1 -o $OUT/$M.plan >> $OUT/log-$M.txt 2>&1
  KILN_CACHE_DIR=$PWD/.device/kc36ct KILN_NVRTC_DEFINES=KILN_TRACE=1 KILN_TRACE_OUT=/tmp/trace.bin timeout 40 $B run --model $D --plan $OUT/$M.plan \
    --prompt-ids $IDS --max-tokens 256 --temperature 0 --device cuda > /tmp/traced.txt 2>&1
  python3 scripts/trace_summary.py /tmp/trace.bin $OUT/$M.plan.txt --csv $OUT/launches-$M.csv >> $S 2>&1
  rm -f /tmp/trace.bin $OUT/$M.plan
done
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz log-*.txt *.csv *.plan.txt official.txt 2>/dev/null; rm -f log-*.txt *.csv *.plan.txt
ls -la $OUT >> $S
cat $S
