#!/bin/bash
# Session 40 call E. Timing probe of the RoPE angle in qkv_rope (wrong values, timing only): M = kiln-s40m (main
# b554d4f), R1 = kiln-s40r KILN_ROPE_PROBE=1 (no angle), R2 = KILN_ROPE_PROBE=2 (the angle's sincos kept, its
# inverse frequency a constant as if read from a table). kiln-only bench, batch 1, context 128, two rounds.
set -u
T0=$(date +%s)
mkdir -p target
for b in kiln-s40m kiln-s40r; do xz -d -c .device/bin/$b.xz > target/$b && chmod +x target/$b; done
export KILN_CUDA_INCLUDE=/usr/local/cuda/include
for d in kc40m kc40r1 kc40r2; do (cd .device/$d && xz -d -f *.xz); done
S=$OUT/e-summary.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } > $S
el() { echo $(( $(date +%s) - T0 )); }
for M in qwen2.5-0.5b llama3.2-1b llama3.1-8b; do
  [ -f target/synth/$M-seed1/config.json ] || timeout 240 target/kiln-s40m synth --shape $M --seed 1 --out target/synth/$M-seed1 > $OUT/log-$M.txt 2>&1
  echo "synth $M ready at $(el) s" >> $S
done
i=0
for V in m r1 r2 r2 r1 m; do
  i=$((i+1)); [ $(el) -gt 450 ] && { echo "skip run $i at $(el) s" >> $S; continue; }
  case $V in m) B=target/kiln-s40m; CD=kc40m; DEF="";; r1) B=target/kiln-s40r; CD=kc40r1; DEF=KILN_ROPE_PROBE=1;; r2) B=target/kiln-s40r; CD=kc40r2; DEF=KILN_ROPE_PROBE=2;; esac
  echo "-- run $i $V start $(el) s" >> $S
  KILN_NVRTC_DEFINES=$DEF KILN_CACHE_DIR=$PWD/.device/$CD timeout 60 $B bench --shapes qwen2.5-0.5b,llama3.2-1b,llama3.1-8b --synth-root target/synth --batches 1 --contexts 128 \
    --repeats 3 --fuse --out /tmp/b40e-$i > $OUT/bench-$i-$V.txt 2>&1
  echo "rc $? end $(el) s" >> $S
  grep -a -E '^(qwen|llama)[^ ]* +1 |read bandwidth:|rror' $OUT/bench-$i-$V.txt | head -4 | cut -c1-120 >> $S
done
echo "end $(el) s" >> $S
cd $OUT && tar czf extra.tgz log-*.txt bench-*.txt 2>/dev/null; rm -f log-*.txt bench-*.txt
cat $S
