#!/bin/bash
# Session 42 call E: does y's 1B gain (call C: sample_advance's carry code present, unused, +0.6%) scale with the device
# loop's passes? 1B bench, a and y, KILN_LOOP_UNROLL 1 / 2 / 4 (plan time), order a y y a per setting.
set -u
T0=$(date +%s)
mkdir -p target
for v in a y; do xz -d -c .device/bin/kiln-s42$v.xz > target/kiln-s42$v && chmod +x target/kiln-s42$v; (cd .device/kc42$v && xz -d -f *.xz 2>/dev/null); done
export KILN_CUDA_INCLUDE=/usr/local/cuda/include
S=$OUT/e-summary.txt; date -u > $S
el() { echo $(( $(date +%s) - T0 )); }
M=llama3.2-1b
[ -f target/synth/$M-seed1/config.json ] || timeout 240 target/kiln-s42a synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
echo "synth ready at $(el) s" >> $S
i=0
for U in 1 4 2; do
  for V in a y y a; do
    i=$((i+1)); [ $(el) -gt 300 ] && { echo "skip run $i at $(el) s" >> $S; continue; }
    KILN_LOOP_UNROLL=$U KILN_CACHE_DIR=$PWD/.device/kc42$V timeout 60 target/kiln-s42$V bench --shapes $M --synth-root target/synth --batches 1 --contexts 128 \
      --repeats 3 --fuse --out /tmp/b42e-$i > $OUT/bench-$i-$U-$V.txt 2>&1
    echo "U=$U $V rc $? at $(el) s: $(grep -a -E "^$M +1 " $OUT/bench-$i-$U-$V.txt | cut -c1-90)" >> $S
  done
done
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz log-*.txt bench-*.txt 2>/dev/null; rm -f log-*.txt bench-*.txt
cat $S
