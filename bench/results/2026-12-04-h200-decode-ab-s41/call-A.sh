#!/bin/bash
# Session 41 call A. M = kiln-s41m (main 9d27c4e), L = lane-loads.patch, S = lane-split.patch, T = s39 tail-l2pf.patch
# (run with KILN_L2_PREFETCH_TAIL=65536). 1. kernel_check --only qkv_rope,tiles on main's sources; 2. ids of L, S, T
# against the references; 3. kiln-only bench batch 1 context 128, order m l s t t s l m.
set -u
T0=$(date +%s)
mkdir -p target
for v in m l s t; do xz -d -c .device/bin/kiln-s41$v.xz > target/kiln-s41$v && chmod +x target/kiln-s41$v; (cd .device/kc41$v && xz -d -f *.xz); done
export KILN_CUDA_INCLUDE=/usr/local/cuda/include
S=$OUT/a-summary.txt
{ date -u; echo "commit $KILN_COMMIT"; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  [ -f target/synth/$M-seed1/config.json ] || timeout 240 target/kiln-s41m synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
  echo "synth $M ready at $(el) s" >> $S
done
setv() { case $1 in m|l|s) B=target/kiln-s41$1; CD=kc41$1; TAIL="";; t) B=target/kiln-s41t; CD=kc41t; TAIL=65536;; esac; }
IDS=$(seq -s, 1 128)
for V in l s t; do
  setv $V
  for MR in qwen2.5-0.5b:fa75432c4925 llama3.2-1b:7b77fd2899f5 llama3.1-8b:3e62d770cd44; do
    M=${MR%:*}; R=${MR#*:}
    echo "ids $M greedy $V: $(KILN_L2_PREFETCH_TAIL=$TAIL KILN_CACHE_DIR=$PWD/.device/$CD timeout 60 $B run --model target/synth/$M-seed1 --fuse --prompt-ids $IDS --max-tokens 128 --temperature 0 --device cuda 2>/dev/null | md5sum | cut -c1-12) (ref $R)" >> $S
  done
  echo "ids 1B sampled $V: $(KILN_L2_PREFETCH_TAIL=$TAIL KILN_CACHE_DIR=$PWD/.device/$CD timeout 40 $B run --model target/synth/llama3.2-1b-seed1 --fuse --prompt-ids $IDS --max-tokens 128 --temperature 0.8 --top-k 40 --seed 5 --device cuda 2>/dev/null | md5sum | cut -c1-12) (ref 397e198de591)" >> $S
done
i=0
for V in m l s t t s l m; do
  i=$((i+1)); [ $(el) -gt 420 ] && { echo "skip run $i at $(el) s" >> $S; continue; }
  setv $V
  echo "-- run $i $V start $(el) s" >> $S
  KILN_L2_PREFETCH_TAIL=$TAIL KILN_CACHE_DIR=$PWD/.device/$CD timeout 60 $B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --batches 1 --contexts 128 \
    --repeats 3 --fuse --out /tmp/b41a-$i > $OUT/bench-$i-$V.txt 2>&1
  echo "rc $? end $(el) s" >> $S
  grep -a -E '^(qwen|llama)[^ ]* +1 |read bandwidth:|rror' $OUT/bench-$i-$V.txt | head -4 | cut -c1-120 >> $S
done
echo "== kernel_check qkv_rope,tiles start $(el) s" >> $S
timeout $((590 - $(el))) python3 scripts/kernel_check.py --only qkv_rope,tiles > $OUT/kcheck.txt 2>&1
echo "rc $? end $(el) s" >> $S; grep -a -E "FAIL|passed" $OUT/kcheck.txt | tail -8 >> $S
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz log-*.txt bench-*.txt 2>/dev/null; rm -f log-*.txt bench-*.txt
cat $S
