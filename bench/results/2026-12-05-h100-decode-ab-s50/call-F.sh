#!/bin/bash
# Session 50; NOT RUN (the device refused: too little device time left to start a machine). Meant for the last 250 s: call-E's A/B timed out because the carried kernel cache (kc49) did not
# match the binary's cache key, so every run compiled (>60 s). The cache rebuilt with the binary itself
# (.device/kc50). kiln's own decode, 0.5B, batch 1, ctx 128, KILN_FUSE_QKV_ATTN off / on, alternating, 3 rounds.
# Carry: [".device/bin/kiln-s49.xz", ".device/kc50"].
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
mkdir -p target
xz -d -c .device/bin/kiln-s49.xz > target/kiln && chmod +x target/kiln; (cd .device/kc50 && xz -d -f *.xz 2>/dev/null)
export KILN_CUDA_INCLUDE=/usr/local/cuda/include KILN_CACHE_DIR=$PWD/.device/kc50
S=$OUT/f-summary.txt; { date -u; target/kiln --version; nvidia-smi --query-gpu=name --format=csv,noheader; } > $S
M=qwen2.5-0.5b
timeout 30 target/kiln synth --shape $M --seed 1 --out target/synth/$M-seed1 > /dev/null 2>&1
echo "synth at $(el) s" >> $S
for r in 1 2 3; do for K in 0 1; do
  [ $(el) -gt 130 ] && break 2
  KILN_FUSE_QKV_ATTN=$K timeout 40 target/kiln bench --shapes $M --synth-root target/synth --batches 1 --contexts 128 \
    --repeats 3 --fuse --out /tmp/f-$r-$K > /tmp/f-$r-$K.txt 2>&1
  echo "round $r KILN_FUSE_QKV_ATTN=$K rc $? at $(el) s: $(grep -a -E '^qwen[^ ]* +1 +128 ' /tmp/f-$r-$K.txt | head -1)" >> $S
done; done
tail -30 /tmp/f-1-1.txt > $OUT/f-1-1-tail.txt 2>/dev/null
cat $S
