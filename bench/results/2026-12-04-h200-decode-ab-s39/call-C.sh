#!/bin/bash
# Session 39 call C. Binary kiln-s39c = e4d1402 (47a9467's engine and kernels; the bench counts each weight byte once,
# call B counted the o projections' prefetch spans twice). 1. the issue's official command; 2. kernel_check
# --only fused (the new fused_linear signature, a prefetch span that must change no bit); 3. A/B rounds if time.
set -u
T0=$(date +%s)
mkdir -p target && xz -d -c .device/bin/kiln-s39c.xz > target/kiln-s39c && chmod +x target/kiln-s39c
B=$PWD/target/kiln-s39c
export KILN_CUDA_INCLUDE=/usr/local/cuda/include KILN_CACHE_DIR=$PWD/.device/kc39b
(cd .device/kc39b && xz -d -f *.xz)
S=$OUT/c-summary.txt
{ date -u; echo "commit $KILN_COMMIT"; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  [ -f target/synth/$M-seed1/config.json ] || timeout 240 $B synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
  echo "synth $M ready at $(el) s" >> $S
done
R=2026-12-04-h200-decode-$KILN_COMMIT
echo "== official start $(el) s" >> $S
KILN_COMMIT=$KILN_COMMIT timeout 400 $B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --prompt 128 --new-tokens 256 \
  --batches 1,2,4,8 --contexts 128,4096 --repeats 5 --fuse --torch --torch-rows first --torch-modes eager,compile --torch-repeats 3 \
  --out $OUT/$R > $OUT/official.txt 2>&1
echo "rc $? end $(el) s" >> $S
grep -a -E '^(qwen|llama)[^ ]* +1 +128 |read bandwidth:|rror' $OUT/official.txt | head -4 >> $S
ab() {
  echo "-- $1 KILN_L2_PREFETCH=$2 start $(el) s" >> $S
  KILN_L2_PREFETCH=$2 timeout 60 $B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --batches 1 --contexts 128 --repeats 3 \
    --fuse --out /tmp/b39c-$1 > $OUT/bench-$1.txt 2>&1
  echo "rc $? end $(el) s" >> $S
  grep -a -E '^(qwen|llama)[^ ]* +1 |read bandwidth:|rror' $OUT/bench-$1.txt | head -4 | cut -c1-200 >> $S
}
[ $(el) -lt 440 ] && { ab N1 0; ab P1 ""; }
if [ $(el) -lt 470 ]; then
  echo "== kernel_check fused start $(el) s" >> $S
  timeout $((585 - $(el))) python3 scripts/kernel_check.py --only fused > $OUT/kcheck.txt 2>&1
  echo "rc $? end $(el) s" >> $S; grep -a -E -i 'passed|failed|FAIL' $OUT/kcheck.txt | tail -4 >> $S
fi
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz log-*.txt bench-*.txt official.txt kcheck.txt 2>/dev/null; rm -f log-*.txt bench-*.txt official.txt
cat $S
