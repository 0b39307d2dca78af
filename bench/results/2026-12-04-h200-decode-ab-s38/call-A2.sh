#!/bin/bash
# Session 38 call A2 (call A's benches timed out: the row-major module was not in the carried cache). Binary kiln-s38p (main 21bbd92 + the KILN_O_L2PF probe: the o projection's blocks ask the L2,
# before their wait, for KILN_O_L2PF bytes each of the weights after their matrix, the gate/up twins, while the
# attention leaves the DRAM idle). Kiln-only bench (call A gave the reference greedy ids with every setting),
# batch 1, context 128, default / 64K / 128K / 256K, two rounds.
set -u
T0=$(date +%s)
B=$PWD/target/kiln-s38p
export KILN_CUDA_INCLUDE=/usr/local/cuda/include KILN_CACHE_DIR=$PWD/.device/kc38p
(cd .device/kc38p && xz -d -k -f *.xz)
S=$OUT/a2-summary.txt
{ date -u; echo "commit $KILN_COMMIT"; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  D=target/synth/$M-seed1
  [ -f $D/config.json ] || timeout 240 $B synth --shape $M --seed 1 --out $D > $OUT/log-$M.txt 2>&1
  echo "synth $M ready at $(el) s" >> $S
done
defs() { [ "$1" = 0 ] && echo "" || echo "KILN_O_L2PF=$1"; }
i=0
for P in 0 131072 65536 262144 0 131072 65536 262144; do
  i=$((i+1)); [ $(el) -gt 420 ] && { echo "skip P$P at $(el) s" >> $S; continue; }
  echo "-- P$P run $i start $(el) s" >> $S
  KILN_NVRTC_DEFINES=$(defs $P) timeout 150 $B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --batches 1 --contexts 128 --repeats 3 \
    --fuse --out /tmp/b38a-$P-$i > $OUT/bench-P$P-$i.txt 2>&1
  echo "rc $? end $(el) s" >> $S
  grep -a -E '^(qwen|llama)[^ ]* +1 |read bandwidth:|rror' $OUT/bench-P$P-$i.txt | head -4 | cut -c1-200 >> $S
done
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz bench-*.txt log-*.txt  2>/dev/null; rm -f bench-*.txt log-*.txt 
cat $S
