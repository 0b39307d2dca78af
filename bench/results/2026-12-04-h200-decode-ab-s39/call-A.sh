#!/bin/bash
# Session 39 call A. Binary kiln-s39 (main 587b447 + probes, compile time: KILN_SELF_L2PF bit 1 = the o
# projection's blocks ask the L2, before their wait, for the rest of their own tile past the ring's first fill;
# bit 2 = the gated GEMV's blocks for the rest of their first gate and up tiles; KILN_O_L2PF = session 38's
# prefetch of the gate/up twins' first bytes by the o blocks). Kiln-only bench, batch 1, context 128, two rounds.
set -u
T0=$(date +%s)
mkdir -p target && xz -d -c .device/bin/kiln-s39.xz > target/kiln-s39 && chmod +x target/kiln-s39
B=$PWD/target/kiln-s39
export KILN_CUDA_INCLUDE=/usr/local/cuda/include KILN_CACHE_DIR=$PWD/.device/kc39
(cd .device/kc39 && xz -d -f *.xz)
S=$OUT/a-summary.txt
{ date -u; echo "commit $KILN_COMMIT"; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  D=target/synth/$M-seed1
  [ -f $D/config.json ] || timeout 240 $B synth --shape $M --seed 1 --out $D > $OUT/log-$M.txt 2>&1
  echo "synth $M ready at $(el) s" >> $S
done
V=("" "KILN_SELF_L2PF=1" "KILN_SELF_L2PF=1,KILN_O_L2PF=32768" "KILN_O_L2PF=32768" "KILN_SELF_L2PF=2")
i=0
for r in 1 2; do for v in 0 1 2 3 4; do
  i=$((i+1)); [ $(el) -gt 480 ] && { echo "skip V$v at $(el) s" >> $S; continue; }
  echo "-- V$v [${V[$v]}] run $i start $(el) s" >> $S
  KILN_NVRTC_DEFINES=${V[$v]} timeout 120 $B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --batches 1 --contexts 128 --repeats 3 \
    --fuse --out /tmp/b39a-$v-$i > $OUT/bench-V$v-$i.txt 2>&1
  echo "rc $? end $(el) s" >> $S
  grep -a -E '^(qwen|llama)[^ ]* +1 |read bandwidth:|rror' $OUT/bench-V$v-$i.txt | head -4 | cut -c1-200 >> $S
done; done
for v in 2 4; do
  [ $(el) -gt 540 ] && break
  echo "ids 1B V$v: $(KILN_NVRTC_DEFINES=${V[$v]} timeout 40 $B run --model target/synth/llama3.2-1b-seed1 --fuse --prompt-ids $(seq -s, 1 128) --max-tokens 128 --temperature 0 --device cuda 2>/dev/null | md5sum | cut -c1-12) (ref 7b77fd2899f5)" >> $S
done
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz bench-*.txt log-*.txt  2>/dev/null; rm -f bench-*.txt log-*.txt
cat $S
