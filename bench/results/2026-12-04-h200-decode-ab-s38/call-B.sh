#!/bin/bash
# Session 38 call B. Binary $BIN at $KILN_COMMIT. 1. kiln gate --checks 5 (device loop == one-step); 2. the issue's
# official command with PyTorch eager beside torch.compile (--torch-modes eager,compile).
set -u
T0=$(date +%s)
B=$PWD/target/$BIN
export KILN_CUDA_INCLUDE=/usr/local/cuda/include KILN_CACHE_DIR=$PWD/.device/$KC
(cd .device/$KC && xz -d -k -f *.xz)
S=$OUT/b-summary.txt
{ date -u; echo "commit $KILN_COMMIT binary $BIN"; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  [ -f target/synth/$M-seed1/config.json ] || timeout 240 $B synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
  echo "synth $M ready at $(el) s" >> $S
done
echo "== gate start $(el) s" >> $S
timeout 100 $B gate --checks 5 --synth-dir target/synth > $OUT/gate.log 2>&1
echo "rc $? end $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate.log | tail -6 >> $S
R=2026-12-04-h200-decode-$KILN_COMMIT
echo "== official start $(el) s" >> $S
KILN_COMMIT=$KILN_COMMIT timeout $((575 - $(el))) $B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --prompt 128 --new-tokens 256 \
  --batches 1,2,4,8 --contexts 128,4096 --repeats 5 --fuse --torch --torch-rows first --torch-modes eager,compile --torch-repeats 3 \
  --out $OUT/$R > $OUT/official.txt 2>&1
echo "rc $? end $(el) s" >> $S
grep -a -E '^(qwen|llama)[^ ]* +1 +128 |read bandwidth:|rror' $OUT/official.txt | head -8 >> $S
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz log-*.txt official.txt 2>/dev/null; rm -f log-*.txt
cat $S
