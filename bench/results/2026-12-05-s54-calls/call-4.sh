#!/bin/bash
# Session 54, fourth call, on fde97e2 (the defaults, push exchanges on): Nsight Compute source-level passes (warp
# stall samples per SASS line) of the 0.5B's fused QKV-attention launch with the pushes (lever 2 of NOTES: its
# post-wait chain) and of three consecutive decode `fused_linear` launches (o, down, o or down, o, down: the down
# GEMV at 4.9 us for 1.9 us of bytes). Kernels are serialized by ncu (no PDL overlap): the stalls are each kernel's
# own chain, not the boundary's.
# Carry: [".device/bin/kiln-s53c.xz", ".device/kc53e"]
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
source scripts/device_prep.sh .device/bin/kiln-s53c.xz .device/kc53e > /tmp/prep.txt
B=target/kiln M=qwen2.5-0.5b
S=$OUT/s54-4-summary.txt; { date -u; $B --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat /tmp/prep.txt; } > $S
[ -f target/synth/$M-seed1/config.json ] || timeout 100 $B synth --shape $M --seed 1 --out target/synth/$M-seed1 > /dev/null 2>&1
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
RUN="$B run --model target/synth/$M-seed1 --fuse --prompt-ids $(seq -s, 1 128) --max-tokens 8 --temperature 0 --burst 0 --prefill-buckets 128 --max-context 512 --device cuda"
timeout 150 $NCU --clock-control none -k regex:qkv_attention --launch-skip 48 --launch-count 1 --section SourceCounters \
  --section WarpStateStats --page source --print-source sass --csv $RUN > $OUT/ncu-src-qkv-push.csv 2> $OUT/ncu-src-qkv-push.err
echo "ncu qkv rc $? at $(el) s" >> $S
timeout $((330 - $(el))) $NCU --clock-control none -k regex:fused_linear --launch-skip 96 --launch-count 3 --section SourceCounters \
  --section WarpStateStats --section LaunchStats --page source --print-source sass --csv $RUN > $OUT/ncu-src-fused.csv 2> $OUT/ncu-src-fused.err
echo "ncu fused rc $? at $(el) s" >> $S
timeout 50 $NCU --clock-control none -k regex:fused_linear --launch-skip 96 --launch-count 3 --section LaunchStats \
  --section WarpStateStats --section MemoryWorkloadAnalysis $RUN > $OUT/ncu-fused-details.txt 2>&1
echo "ncu fused details rc $? at $(el) s" >> $S
grep -a -E 'fused_linear|Block Size|Grid Size|Duration|Warp Cycles Per Issued|Stall|Throughput' $OUT/ncu-fused-details.txt | head -40 >> $S
cd $OUT && gzip -f *.csv
cat $S
