#!/bin/bash
# Session 35 call C. Binary kiln-s35c ($KILN_COMMIT: plan checker rule 11, gate check 5 with budgets 10 and 11; kernels
# as 84fb769's, the same cubins). 1. kiln gate (all checks); 2. greedy ids of the three shapes against call A's md5s
# (128 tokens: bursts of 64, 62 and a first-copy launch of 1).
set -u
T0=$(date +%s)
B=$PWD/target/kiln-s35c
export KILN_CUDA_INCLUDE=/usr/local/cuda/include KILN_CACHE_DIR=$PWD/.device/kc35
(cd .device/kc35 && xz -d -k -f *.xz)
S=$OUT/c-summary.txt
{ date -u; echo "commit $KILN_COMMIT"; nvidia-smi --query-gpu=name,driver_version --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
IDS=$(seq -s, 1 128)
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  D=target/synth/$M-seed1
  [ -f $D/config.json ] || timeout 240 $B synth --shape $M --seed 1 --out $D > $OUT/log-$M.txt 2>&1
  timeout 60 $B run --model $D --fuse --prompt-ids $IDS --max-tokens 128 --temperature 0 --device cuda > /tmp/ids.txt 2> /tmp/err.txt
  echo "run $M g rc $? at $(el) s: $(md5sum < /tmp/ids.txt | cut -c1-12) $(wc -w < /tmp/ids.txt) ids" >> $S
  grep -a -i 'error\|panic\|trap\|illegal' /tmp/err.txt | head -3 | cut -c1-200 >> $S
done
echo "== gate at $(el) s" >> $S
timeout 200 $B gate --synth-dir target/synth > $OUT/gate.log 2>&1
echo "rc $? end $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate.log | tail -6 >> $S
grep -a "^ *5 \|device loop" $OUT/gate.log | cut -c1-300 | head -8 >> $S
cat $S
