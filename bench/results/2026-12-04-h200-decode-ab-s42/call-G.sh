#!/bin/bash
# Session 42 call G: is it the weights' placement? q = s42-pad + KILN_ALLOC_PAD_AFTER_WEIGHTS_MB (a pad right after the
# weights region, moving only the others). 1B-only bench: pads before all regions (B) and after the weights (A).
set -u
T0=$(date +%s)
mkdir -p target
xz -d -c .device/bin/kiln-s42q.xz > target/kiln-s42q && chmod +x target/kiln-s42q; (cd .device/kc42a && xz -d -f *.xz 2>/dev/null)
export KILN_CUDA_INCLUDE=/usr/local/cuda/include KILN_CACHE_DIR=$PWD/.device/kc42a
S=$OUT/g-summary.txt; date -u > $S
el() { echo $(( $(date +%s) - T0 )); }
M=llama3.2-1b
[ -f target/synth/$M-seed1/config.json ] || timeout 240 target/kiln-s42q synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
echo "synth ready at $(el) s" >> $S
i=0
for C in B0 B1024 A64 A1024 B64 B32 B96 B128 B256 B768 A1024 B1024 B0 A64; do
  i=$((i+1)); [ $(el) -gt 200 ] && { echo "skip $i at $(el) s" >> $S; continue; }
  P=${C#?}; if [ ${C:0:1} = B ]; then E="KILN_ALLOC_PAD_MB=$P"; else E="KILN_ALLOC_PAD_AFTER_WEIGHTS_MB=$P"; fi
  env $E timeout 60 target/kiln-s42q bench --shapes $M --synth-root target/synth --batches 1 --contexts 128 \
    --repeats 3 --fuse --out /tmp/b42g-$i > $OUT/bench-$i-$C.txt 2>&1
  echo "$C rc $? at $(el) s: $(grep -a -E "^$M +1 " $OUT/bench-$i-$C.txt | cut -c1-90) $(grep -a -m1 'region bases' $OUT/bench-$i-$C.txt | cut -c1-130)" >> $S
done
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz log-*.txt bench-*.txt 2>/dev/null; rm -f log-*.txt bench-*.txt
cat $S
