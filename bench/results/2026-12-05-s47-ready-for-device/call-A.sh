#!/bin/bash
# Written in session 47 (seven starts refused, one machine taken back, then no device lent; never run).
# The attention recomputed inside every o-projection block (scripts/probe_attn_o_fold.{py,cu}), the Qwen2.5-0.5B
# shape: kiln's QKV -> attention cluster -> o chain against QKV -> the fold, and against QKV -> o (the attention
# free) and the fold without its arithmetic (`nomath`), at p = 129, 200, 255, 383 (the official bench's ctx-128
# rows run p = 128..383). No carry: the probe builds its kernel and kiln's linear.cu / attention_split.cu with
# NVRTC on the device (~1-2 min). Reads: `kiln - fold` is what the fold saves per layer (x 24 per step; the 0.5B
# needs ~4.9 us per layer for 0.50 of the roofline); PASS = the fold's o output within 2e-2 of kiln's.
# If it saves >= ~2 us per layer at every p, the landing plan is in bench/NOTES-decode.md (session 47).
set -u
T0=$(date +%s)
S=$OUT/a-summary.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } > $S
export KILN_CUDA_INCLUDE=/usr/local/cuda/include
for round in 1 2; do
  timeout 240 python3 scripts/probe_attn_o_fold.py --positions 129,200,255,383 > $OUT/probe-$round.txt 2>&1
  echo "probe round $round rc $? at $(( $(date +%s) - T0 )) s" >> $S
  cat $OUT/probe-$round.txt >> $S
done
cat $S
