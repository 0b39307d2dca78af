#!/bin/bash
# Session 39 call B. Binary kiln-s39b = 47a9467 (the planned L2 prefetch, KILN_L2_PREFETCH=0 plans without it).
# 1. kiln gate (all checks); 2. greedy ids of the 1B; 3. kiln-only A/B default vs KILN_L2_PREFETCH=0, one round;
# 4. the official command with PyTorch eager and torch.compile; 5. the A/B's default-off second round if time is left.
set -u
T0=$(date +%s)
mkdir -p target && xz -d -c .device/bin/kiln-s39b.xz > target/kiln-s39b && chmod +x target/kiln-s39b
B=$PWD/target/kiln-s39b
export KILN_CUDA_INCLUDE=/usr/local/cuda/include KILN_CACHE_DIR=$PWD/.device/kc39b
(cd .device/kc39b && xz -d -f *.xz)
S=$OUT/b-summary.txt
{ date -u; echo "commit $KILN_COMMIT"; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  [ -f target/synth/$M-seed1/config.json ] || timeout 240 $B synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
  echo "synth $M ready at $(el) s" >> $S
done
echo "== gate start $(el) s" >> $S
timeout 150 $B gate --synth-dir target/synth > $OUT/gate.log 2>&1
echo "rc $? end $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate.log | tail -6 >> $S
echo "ids 1B greedy: $(timeout 40 $B run --model target/synth/llama3.2-1b-seed1 --fuse --prompt-ids $(seq -s, 1 128) --max-tokens 128 --temperature 0 --device cuda 2>/dev/null | md5sum | cut -c1-12) (ref 7b77fd2899f5)" >> $S
ab() {
  echo "-- $1 KILN_L2_PREFETCH=$2 start $(el) s" >> $S
  KILN_L2_PREFETCH=$2 timeout 100 $B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --batches 1 --contexts 128 --repeats 3 \
    --fuse --out /tmp/b39b-$1 > $OUT/bench-$1.txt 2>&1
  echo "rc $? end $(el) s" >> $S
  grep -a -E '^(qwen|llama)[^ ]* +1 |read bandwidth:|rror' $OUT/bench-$1.txt | head -4 | cut -c1-200 >> $S
}
ab P1 "" ; ab N1 0
R=2026-12-04-h200-decode-$KILN_COMMIT
echo "== official start $(el) s" >> $S
KILN_COMMIT=$KILN_COMMIT timeout $((590 - $(el))) $B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --prompt 128 --new-tokens 256 \
  --batches 1,2,4,8 --contexts 128,4096 --repeats 5 --fuse --torch --torch-rows first --torch-modes eager,compile --torch-repeats 3 \
  --out $OUT/$R > $OUT/official.txt 2>&1
echo "rc $? end $(el) s" >> $S
grep -a -E '^(qwen|llama)[^ ]* +1 +128 |read bandwidth:|rror' $OUT/official.txt | head -8 >> $S
[ $(el) -lt 530 ] && ab N2 0
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz log-*.txt bench-*.txt gate.log official.txt 2>/dev/null; rm -f log-*.txt bench-*.txt official.txt
cat $S
