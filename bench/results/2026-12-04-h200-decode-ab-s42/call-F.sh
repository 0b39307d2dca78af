#!/bin/bash
# Session 42 call F: does the 1B's decode speed depend on where its regions land in device memory? p = main +
# KILN_ALLOC_PAD_MB (branch s42-pad: n MiB allocated before the regions, bases printed). 1B-only bench, pads swept;
# then the 0.5B before the 1B in one process (as the 3-shape bench runs them), p unpadded.
set -u
T0=$(date +%s)
mkdir -p target
xz -d -c .device/bin/kiln-s42p.xz > target/kiln-s42p && chmod +x target/kiln-s42p; (cd .device/kc42a && xz -d -f *.xz 2>/dev/null)
export KILN_CUDA_INCLUDE=/usr/local/cuda/include KILN_CACHE_DIR=$PWD/.device/kc42a
S=$OUT/f-summary.txt; date -u > $S
el() { echo $(( $(date +%s) - T0 )); }
for M in qwen2.5-0.5b llama3.2-1b; do
  [ -f target/synth/$M-seed1/config.json ] || timeout 240 target/kiln-s42p synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
done
echo "synth ready at $(el) s" >> $S
i=0
for P in 0 2 6 64 130 512 1024 2050 4100 0 2 64 1024 0; do
  i=$((i+1)); [ $(el) -gt 240 ] && { echo "skip $i at $(el) s" >> $S; continue; }
  KILN_ALLOC_PAD_MB=$P timeout 60 target/kiln-s42p bench --shapes llama3.2-1b --synth-root target/synth --batches 1 --contexts 128 \
    --repeats 3 --fuse --out /tmp/b42f-$i > $OUT/bench-$i-$P.txt 2>&1
  echo "pad $P rc $? at $(el) s: $(grep -a -E '^llama3.2-1b +1 ' $OUT/bench-$i-$P.txt | cut -c1-90) $(grep -a -m1 'region bases' $OUT/bench-$i-$P.txt | cut -c1-140)" >> $S
done
for k in 1 2; do
  timeout 90 target/kiln-s42p bench --shapes qwen2.5-0.5b,llama3.2-1b --synth-root target/synth --batches 1 --contexts 128 \
    --repeats 3 --fuse --out /tmp/b42f2-$k > $OUT/bench-2s-$k.txt 2>&1
  echo "0.5B then 1B ($k) rc $? at $(el) s:" >> $S; grep -a -E '^(qwen|llama)[^ ]* +1 ' $OUT/bench-2s-$k.txt | cut -c1-90 >> $S
done
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz log-*.txt bench-*.txt 2>/dev/null; rm -f log-*.txt bench-*.txt
cat $S
