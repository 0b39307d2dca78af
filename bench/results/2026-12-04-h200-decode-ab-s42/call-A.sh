#!/bin/bash
# Session 42 call A. a = kiln-s42a (main 3343994: 48d0db1's rope.cuh, first GPU run), b = kiln-s42b (main +
# the carried gather: planner::carry_gather, sample_advance gathers the next step's embedding, QkvRope hold).
# 1. kernel_check --only rope,rope_kv_write,qkv_rope (working tree = b's kernels; cached CUBINs);
# 2. greedy ids of the 3 shapes + the 1B sampled, a and b; 3. bench batch 1 ctx 128, arms a, b (carry), n (b with
# KILN_LOOP_CARRY_GATHER=0), order a b n n b a; 4. kiln gate on b.
set -u
T0=$(date +%s)
mkdir -p target
for v in a b; do xz -d -c .device/bin/kiln-s42$v.xz > target/kiln-s42$v && chmod +x target/kiln-s42$v; (cd .device/kc42$v && xz -d -f *.xz); done
(cd .device/kcc42b && xz -d -f *.xz)
export KILN_CUDA_INCLUDE=/usr/local/cuda/include
S=$OUT/a-summary.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
KILN_CHECK_CACHE=$PWD/.device/kcc42b timeout 100 python3 scripts/kernel_check.py --only rope,rope_kv_write,qkv_rope > $OUT/kcheck.txt 2>&1
echo "kernel_check rc $? at $(el) s" >> $S; grep -a -E "FAIL|passed|compiled" $OUT/kcheck.txt | tail -6 >> $S
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  [ -f target/synth/$M-seed1/config.json ] || timeout 240 target/kiln-s42a synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
  echo "synth $M ready at $(el) s" >> $S
done
IDS=$(seq -s, 1 128)
for V in a b; do
  export KILN_CACHE_DIR=$PWD/.device/kc42$V
  for MR in qwen2.5-0.5b:fa75432c4925 llama3.2-1b:7b77fd2899f5 llama3.1-8b:3e62d770cd44; do
    M=${MR%:*}; R=${MR#*:}
    echo "ids $M greedy $V: $(timeout 60 target/kiln-s42$V run --model target/synth/$M-seed1 --fuse --prompt-ids $IDS --max-tokens 128 --temperature 0 --device cuda 2>$OUT/err-$V-$M.txt | md5sum | cut -c1-12) (ref $R)" >> $S
  done
  echo "ids 1B sampled $V: $(timeout 40 target/kiln-s42$V run --model target/synth/llama3.2-1b-seed1 --fuse --prompt-ids $IDS --max-tokens 128 --temperature 0.8 --top-k 40 --seed 5 --device cuda 2>>$OUT/err-$V-s.txt | md5sum | cut -c1-12) (ref 397e198de591)" >> $S
done
unset KILN_CACHE_DIR
echo "ids done at $(el) s" >> $S
i=0
for V in a b n n b a; do
  i=$((i+1)); [ $(el) -gt 420 ] && { echo "skip run $i at $(el) s" >> $S; continue; }
  echo "-- run $i $V start $(el) s" >> $S
  B=$V; C=""; [ $V = n ] && { B=b; C=0; }
  KILN_LOOP_CARRY_GATHER=$C KILN_CACHE_DIR=$PWD/.device/kc42$B timeout 90 target/kiln-s42$B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --batches 1 --contexts 128 \
    --repeats 3 --fuse --out /tmp/b42a-$i > $OUT/bench-$i-$V.txt 2>&1
  echo "rc $? end $(el) s" >> $S
  grep -a -E '^(qwen|llama)[^ ]* +1 |read bandwidth:|rror' $OUT/bench-$i-$V.txt | head -4 | cut -c1-120 >> $S
done
for V in a b n; do
  for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
    v=$(cat $OUT/bench-*-$V.txt 2>/dev/null | awk -v m=$M '$1 == m && $2 == 1 && $3 == 128 {s+=$4; n++} END {if (n) printf "%.1f (%d)", s/n, n; else print "-"}')
    echo "mean $V $M $v" >> $S
  done
done
if [ $(el) -lt 500 ]; then
  echo "== gate b start $(el) s" >> $S
  KILN_CACHE_DIR=$PWD/.device/kc42b timeout $((590 - $(el))) target/kiln-s42b gate --synth-dir target/synth > $OUT/gate.log 2>&1
  echo "rc $? end $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate.log | tail -6 >> $S
fi
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz log-*.txt bench-*.txt err-*.txt 2>/dev/null; rm -f log-*.txt bench-*.txt err-*.txt
cat $S
