#!/bin/bash
# Session 42 call C: which of the carry branch's two kernel edits moves main's bench (call A: b/n binary 1B +0.5%,
# 0.5B -0.6% against a, with no carry planned). a = main 3343994, x = main + qkv_rope's early bit 1 (s42-x),
# y = main + sample_advance's carry code, its table and row null (s42-y), n = the carry branch with
# KILN_LOOP_CARRY_GATHER=0 (dropped for the carry limit), m = session 41's main 9d27c4e (before 13bb11d and
# 48d0db1's rope changes). ids of x and y; bench batch 1 ctx 128, order a m x y y x m a.
set -u
T0=$(date +%s)
mkdir -p target
for v in a x y; do xz -d -c .device/bin/kiln-s42$v.xz > target/kiln-s42$v && chmod +x target/kiln-s42$v; (cd .device/kc42$v && xz -d -f *.xz); done
xz -d -c .device/bin/kiln-s41m.xz > target/kiln-s42m && chmod +x target/kiln-s42m; (cd .device/kc41m && xz -d -f *.xz); ln -sfn kc41m .device/kc42m
export KILN_CUDA_INCLUDE=/usr/local/cuda/include
S=$OUT/c-summary.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  [ -f target/synth/$M-seed1/config.json ] || timeout 240 target/kiln-s42a synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
  echo "synth $M ready at $(el) s" >> $S
done
IDS=$(seq -s, 1 128)
for V in x y; do
  export KILN_CACHE_DIR=$PWD/.device/kc42$V
  for MR in qwen2.5-0.5b:fa75432c4925 llama3.2-1b:7b77fd2899f5; do
    M=${MR%:*}; R=${MR#*:}
    echo "ids $M greedy $V: $(timeout 60 target/kiln-s42$V run --model target/synth/$M-seed1 --fuse --prompt-ids $IDS --max-tokens 128 --temperature 0 --device cuda 2>/dev/null | md5sum | cut -c1-12) (ref $R)" >> $S
  done
  echo "ids 1B sampled $V: $(timeout 40 target/kiln-s42$V run --model target/synth/llama3.2-1b-seed1 --fuse --prompt-ids $IDS --max-tokens 128 --temperature 0.8 --top-k 40 --seed 5 --device cuda 2>/dev/null | md5sum | cut -c1-12) (ref 397e198de591)" >> $S
done
unset KILN_CACHE_DIR
i=0
for V in a m x y y x m a; do
  i=$((i+1)); [ $(el) -gt 480 ] && { echo "skip run $i at $(el) s" >> $S; continue; }
  echo "-- run $i $V start $(el) s" >> $S
  B=$V; C=""; [ $V = n ] && { B=b; C=0; }
  KILN_LOOP_CARRY_GATHER=$C KILN_CACHE_DIR=$PWD/.device/kc42$B timeout 90 target/kiln-s42$B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --batches 1 --contexts 128 \
    --repeats 3 --fuse --out /tmp/b42c-$i > $OUT/bench-$i-$V.txt 2>&1
  echo "rc $? end $(el) s" >> $S
  grep -a -E '^(qwen|llama)[^ ]* +1 |read bandwidth:|rror' $OUT/bench-$i-$V.txt | head -4 | cut -c1-120 >> $S
done
for V in a m x y; do
  for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
    v=$(cat $OUT/bench-*-$V.txt 2>/dev/null | awk -v m=$M '$1 == m && $2 == 1 && $3 == 128 {s+=$4; n++} END {if (n) printf "%.1f (%d)", s/n, n; else print "-"}')
    echo "mean $V $M $v" >> $S
  done
done
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz log-*.txt bench-*.txt 2>/dev/null; rm -f log-*.txt bench-*.txt
cat $S
