#!/bin/bash
# Session 40 call C: raw per-block trace analysis of main's 1B and 0.5B decode (kiln-s40m = b554d4f, KILN_TRACE=1).
set -u
T0=$(date +%s)
mkdir -p target
for b in kiln-s40m; do [ -x target/$b ] || { xz -d -c .device/bin/$b.xz > target/$b && chmod +x target/$b; }; done
export KILN_CUDA_INCLUDE=/usr/local/cuda/include KILN_NVRTC_DEFINES=KILN_TRACE=1
(cd .device/kc40tm && ls *.xz >/dev/null 2>&1 && xz -d -f *.xz)
S=$OUT/c-summary.txt
date -u > $S
el() { echo $(( $(date +%s) - T0 )); }
IDS=$(seq -s, 1 128)
for M in llama3.2-1b qwen2.5-0.5b llama3.1-8b; do
  D=target/synth/$M-seed1
  [ -f $D/config.json ] || timeout 240 target/kiln-s40m synth --shape $M --seed 1 --out $D > /dev/null 2>&1
  target/kiln-s40m plan --model $D --fuse --decode-buckets 1 -o /tmp/$M.plan > /dev/null 2>&1
  KILN_CACHE_DIR=$PWD/.device/kc40tm KILN_TRACE_OUT=/tmp/trace-$M.bin timeout 90 target/kiln-s40m run --model $D --plan /tmp/$M.plan \
    --prompt-ids $IDS --max-tokens 256 --temperature 0 --device cuda > /dev/null 2>&1
  echo "#### $M rc $? at $(el) s" >> $S
  case $M in llama3.2-1b) W=192,256,128,264;; qwen2.5-0.5b) W=72,112,56,304;; *) W=384,256,896;; esac
  python3 .device/rawtrace.py /tmp/trace-$M.bin 0 $W >> $S 2>&1
done
echo "end $(el) s" >> $S
cat $S
