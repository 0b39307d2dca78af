#!/bin/bash
# Session 33 call D (binary of main's head $KILN_COMMIT): the official command, then kiln gate.
set -u
T0=$(date +%s)
B=$PWD/target/kiln-s33d
export KILN_CACHE_DIR=$PWD/.device/kc33d KILN_CUDA_INCLUDE=/usr/local/cuda/include
(cd .device/kc33d && xz -d -k -f *.xz)
S=$OUT/d-summary.txt
{ date -u; echo "commit $KILN_COMMIT"; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  timeout 240 $B synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
  echo "synth $M done at $(el) s" >> $S
done
R=2026-12-03-h200-decode-$KILN_COMMIT
echo "== official start $(el) s" >> $S
timeout 400 $B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --prompt 128 --new-tokens 256 \
  --batches 1,2,4,8 --contexts 128,4096 --repeats 5 --fuse --torch --torch-rows first --torch-modes compile --torch-repeats 3 \
  --out $OUT/$R > $OUT/official.txt 2>&1
echo "rc $? end $(el) s" >> $S
grep -a -E '^(qwen|llama)[^ ]* +1 +128 |read bandwidth:|rror' $OUT/official.txt | head -8 >> $S
echo "== gate start $(el) s" >> $S
timeout 150 $B gate --synth-dir target/synth > $OUT/gate.log 2>&1
echo "rc $? end $(el) s" >> $S; tail -2 $OUT/gate.log >> $S
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz official.txt log-*.txt 2>/dev/null; rm -f log-*.txt
ls -la $OUT >> $S
cat $S
