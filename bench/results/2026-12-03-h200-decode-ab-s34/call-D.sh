#!/bin/bash
# Session 34 call D: the review's refactor (advance.cuh shared by kiln_advance and kiln_sample_advance_f32; fused_linear's
# early-residual epilogue through fused_finish_plain / fused_gemv_slot). Same tokens as call B's 1975d4b (ids md5 listed in
# call-B-summary.txt), fused plans, greedy and sampled; then kiln gate checks 2 and 5.
set -u
T0=$(date +%s)
B=$PWD/target/kiln-s34d
export KILN_CUDA_INCLUDE=/usr/local/cuda/include KILN_CACHE_DIR=$PWD/.device/kc34d
(cd .device/kc34d && xz -d -k -f *.xz)
S=$OUT/d-summary.txt
{ date -u; echo "commit $KILN_COMMIT"; nvidia-smi --query-gpu=name,driver_version --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
IDS=$(seq -s, 1 128)
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  D=target/synth/$M-seed1
  timeout 240 $B synth --shape $M --seed 1 --out $D > $OUT/log-$M.txt 2>&1
  for V in g s; do
    if [ $V = g ]; then SMP="--temperature 0"; else SMP="--temperature 0.8 --top-k 40 --seed 5"; fi
    timeout 60 $B run --model $D --fuse --prompt-ids $IDS --max-tokens 128 $SMP --device cuda > /tmp/ids.txt 2> /tmp/err.txt
    echo "run $M $V rc $? at $(el) s: $(md5sum < /tmp/ids.txt | cut -c1-12) $(wc -w < /tmp/ids.txt) ids" >> $S
    grep -a -i 'error\|panic\|trap\|illegal' /tmp/err.txt | head -3 | cut -c1-200 >> $S
  done
done
echo "== gate checks 2,5 at $(el) s" >> $S
timeout 200 $B gate --synth-dir target/synth --checks 2,5 > $OUT/gate.log 2>&1
echo "rc $? end $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate.log | tail -6 >> $S
cat $S
