#!/bin/bash
# Session 40 call A. Binary kiln-s40 = 97e5b42 (s39 tail patch: KILN_L2_PREFETCH_TAIL, plan-time, off by default).
# 1. kiln gate (all checks) with KILN_L2_PREFETCH_TAIL=65536; 2. greedy/sampled ids of the 1B with it;
# 3. kiln-only A/B, contexts 128,4096: knob unset / 32768 / 65536 / 98304, two rounds.
set -u
T0=$(date +%s)
mkdir -p target && xz -d -c .device/bin/kiln-s40.xz > target/kiln-s40 && chmod +x target/kiln-s40
B=$PWD/target/kiln-s40
export KILN_CUDA_INCLUDE=/usr/local/cuda/include KILN_CACHE_DIR=$PWD/.device/kc40
(cd .device/kc40 && xz -d -f *.xz)
S=$OUT/a-summary.txt
{ date -u; echo "binary 97e5b42"; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  [ -f target/synth/$M-seed1/config.json ] || timeout 240 $B synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
  echo "synth $M ready at $(el) s" >> $S
done
echo "== gate (TAIL=65536) start $(el) s" >> $S
KILN_L2_PREFETCH_TAIL=65536 timeout 150 $B gate --synth-dir target/synth > $OUT/gate.log 2>&1
echo "rc $? end $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate.log | tail -6 >> $S
for M in llama3.2-1b qwen2.5-0.5b; do
echo "ids $M greedy TAIL=65536: $(KILN_L2_PREFETCH_TAIL=65536 timeout 40 $B run --model target/synth/$M-seed1 --fuse --prompt-ids $(seq -s, 1 128) --max-tokens 128 --temperature 0 --device cuda 2>/dev/null | md5sum | cut -c1-12) (ref 1B 7b77fd2899f5, 0.5B fa75432c4925)" >> $S
done
echo "ids 1B sampled TAIL=65536: $(KILN_L2_PREFETCH_TAIL=65536 timeout 40 $B run --model target/synth/llama3.2-1b-seed1 --fuse --prompt-ids $(seq -s, 1 128) --max-tokens 128 --temperature 0.8 --top-k 40 --seed 5 --device cuda 2>/dev/null | md5sum | cut -c1-12) (ref 397e198de591)" >> $S
i=0
for v in "" 32768 65536 98304 98304 65536 32768 ""; do
  i=$((i+1)); [ $(el) -gt 560 ] && { echo "skip run $i at $(el) s" >> $S; continue; }
  echo "-- run $i KILN_L2_PREFETCH_TAIL=$v start $(el) s" >> $S
  KILN_L2_PREFETCH_TAIL=$v timeout 60 $B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --batches 1 --contexts 128,4096 \
    --repeats 3 --fuse --out /tmp/b40a-$i > $OUT/bench-$i.txt 2>&1
  echo "rc $? end $(el) s" >> $S
  grep -a -E '^(qwen|llama)[^ ]* +1 |read bandwidth:|rror' $OUT/bench-$i.txt | head -7 | cut -c1-120 >> $S
done
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz log-*.txt bench-*.txt gate.log 2>/dev/null; rm -f log-*.txt bench-*.txt
cat $S
