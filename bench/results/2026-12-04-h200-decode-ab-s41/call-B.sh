#!/bin/bash
# Session 41 call B. M = kiln-s41m (main 9d27c4e), L = 79968f4 (lane-loads), S = a24e6a0 (lane-split).
# 1. kiln-only bench batch 1 context 128, order m l s s l m; 2. kiln gate on the variant with the best 1B mean.
set -u
T0=$(date +%s)
mkdir -p target
for v in m l s; do xz -d -c .device/bin/kiln-s41$v.xz > target/kiln-s41$v && chmod +x target/kiln-s41$v; (cd .device/kc41$v && xz -d -f *.xz); done
export KILN_CUDA_INCLUDE=/usr/local/cuda/include
S=$OUT/b-summary.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  [ -f target/synth/$M-seed1/config.json ] || timeout 240 target/kiln-s41m synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
  echo "synth $M ready at $(el) s" >> $S
done
i=0
for V in m l s s l m; do
  i=$((i+1)); [ $(el) -gt 400 ] && { echo "skip run $i at $(el) s" >> $S; continue; }
  echo "-- run $i $V start $(el) s" >> $S
  KILN_CACHE_DIR=$PWD/.device/kc41$V timeout 90 target/kiln-s41$V bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --batches 1 --contexts 128 \
    --repeats 3 --fuse --out /tmp/b41b-$i > $OUT/bench-$i-$V.txt 2>&1
  echo "rc $? end $(el) s" >> $S
  grep -a -E '^(qwen|llama)[^ ]* +1 |read bandwidth:|rror' $OUT/bench-$i-$V.txt | head -4 | cut -c1-120 >> $S
done
best=m; bv=0
for V in m l s; do
  v=$(cat $OUT/bench-*-$V.txt 2>/dev/null | awk '/^llama3.2-1b +1 +128/ {s+=$4; n++} END {if (n) printf "%.1f", s/n; else print 0}')
  echo "1B mean $V $v" >> $S
  if awk -v a=$v -v b=$bv 'BEGIN {exit !(a > b)}'; then best=$V; bv=$v; fi
done
echo "best $best" >> $S
if [ $best != m ] && [ $(el) -lt 480 ]; then
  echo "== gate $best start $(el) s" >> $S
  KILN_CACHE_DIR=$PWD/.device/kc41$best timeout $((590 - $(el))) target/kiln-s41$best gate --synth-dir target/synth > $OUT/gate.log 2>&1
  echo "rc $? end $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate.log | tail -6 >> $S
fi
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz log-*.txt bench-*.txt 2>/dev/null; rm -f log-*.txt bench-*.txt
cat $S
