#!/bin/bash
# Session 39 call D. Binary kiln-s39c = e4d1402. Kiln-only A/B of the planned L2 prefetch in the official run's
# configuration (contexts 128 and 4096: plans of max context 4352), KILN_L2_PREFETCH=0 against the default.
set -u
T0=$(date +%s)
mkdir -p target && xz -d -c .device/bin/kiln-s39c.xz > target/kiln-s39c && chmod +x target/kiln-s39c
B=$PWD/target/kiln-s39c
export KILN_CUDA_INCLUDE=/usr/local/cuda/include KILN_CACHE_DIR=$PWD/.device/kc39b
(cd .device/kc39b && xz -d -f *.xz)
S=$OUT/d-summary.txt
{ date -u; echo "commit $KILN_COMMIT"; } > $S
el() { echo $(( $(date +%s) - T0 )); }
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  [ -f target/synth/$M-seed1/config.json ] || timeout 240 $B synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
  echo "synth $M ready at $(el) s" >> $S
done
i=0
for v in 0 "" 0 ""; do
  i=$((i+1)); [ $(el) -gt $LIMIT ] && { echo "skip run $i at $(el) s" >> $S; continue; }
  echo "-- run $i KILN_L2_PREFETCH=$v start $(el) s" >> $S
  KILN_L2_PREFETCH=$v timeout 60 $B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --batches 1 --contexts 128,4096 \
    --repeats 3 --fuse --out /tmp/b39d-$i > $OUT/bench-$i.txt 2>&1
  echo "rc $? end $(el) s" >> $S
  grep -a -E '^(qwen|llama)[^ ]* +1 |read bandwidth:|rror' $OUT/bench-$i.txt | head -7 | cut -c1-120 >> $S
done
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz log-*.txt bench-*.txt 2>/dev/null; rm -f log-*.txt bench-*.txt
cat $S
