#!/bin/bash
# Session 41 call F. R = kiln-s41r (13bb11d: rope and rope_kv_write take the host's RoPE inverse frequencies
# by value, as qkv_rope does). 1. kernel_check --only rope,rope_kv_write,qkv_rope (cached CUBINs); 2. ids of R
# (greedy 3 shapes, 1B sampled); 3. kiln gate on R.
set -u
T0=$(date +%s)
mkdir -p target
xz -d -c .device/bin/kiln-s41r.xz > target/kiln-s41r && chmod +x target/kiln-s41r
(cd .device/kc41r && xz -d -f *.xz); (cd .device/kccr && xz -d -f *.xz)
export KILN_CUDA_INCLUDE=/usr/local/cuda/include
S=$OUT/f-summary.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
KILN_CHECK_CACHE=$PWD/.device/kccr timeout 90 python3 scripts/kernel_check.py --only rope,rope_kv_write,qkv_rope > $OUT/kcheck.txt 2>&1
echo "kernel_check rc $? at $(el) s" >> $S; grep -a -E "FAIL|passed|compiled" $OUT/kcheck.txt | tail -6 >> $S
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  [ -f target/synth/$M-seed1/config.json ] || timeout 240 target/kiln-s41r synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
  echo "synth $M ready at $(el) s" >> $S
done
IDS=$(seq -s, 1 128)
export KILN_CACHE_DIR=$PWD/.device/kc41r
for MR in qwen2.5-0.5b:fa75432c4925 llama3.2-1b:7b77fd2899f5 llama3.1-8b:3e62d770cd44; do
  M=${MR%:*}; R=${MR#*:}
  echo "ids $M greedy r: $(timeout 60 target/kiln-s41r run --model target/synth/$M-seed1 --fuse --prompt-ids $IDS --max-tokens 128 --temperature 0 --device cuda 2>/dev/null | md5sum | cut -c1-12) (ref $R)" >> $S
done
echo "ids 1B sampled r: $(timeout 40 target/kiln-s41r run --model target/synth/llama3.2-1b-seed1 --fuse --prompt-ids $IDS --max-tokens 128 --temperature 0.8 --top-k 40 --seed 5 --device cuda 2>/dev/null | md5sum | cut -c1-12) (ref 397e198de591)" >> $S
echo "== gate start $(el) s" >> $S
timeout 150 target/kiln-s41r gate --synth-dir target/synth > $OUT/gate.log 2>&1
echo "rc $? end $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate.log | tail -6 >> $S
cd $OUT && tar czf extra.tgz log-*.txt 2>/dev/null; rm -f log-*.txt
cat $S
