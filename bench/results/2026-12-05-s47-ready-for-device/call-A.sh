#!/bin/bash
# Written in session 47 (seven starts refused, one machine taken back, then no device lent; never run).
# The attention recomputed inside every o-projection block (scripts/probe_attn_o_fold.{py,cu}), the Qwen2.5-0.5B
# shape: kiln's QKV -> attention cluster -> o chain against QKV -> the fold, and against QKV -> o (the attention
# free) and the fold without its arithmetic (`nomath`), at p = 129, 200, 255, 383 (the official bench's ctx-128
# rows run p = 128..383). No carry: the probe builds its kernel and kiln's linear.cu / attention_split.cu with
# NVRTC on the device (~1-2 min; three rounds ~4-5 min in all). Reads: `kiln - fold` is what the fold saves per layer (x 24 per step; the 0.5B
# needs ~4.9 us per layer for 0.50 of the roofline); PASS = the fold's o output within 2e-2 of kiln's.
# If it saves >= ~2 us per layer at every p, the landing plan is in bench/NOTES-decode.md (session 47).
set -u
T0=$(date +%s)
S=$OUT/a-summary.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } > $S
export KILN_CUDA_INCLUDE=/usr/local/cuda/include KILN_CHECK_CACHE=/tmp/kcc47  # rounds 2-3 reuse the kiln CUBIN
# Rounds 1-2: whole layers (QKV, attention/o, gate/up and down stand-ins); round 3: QKV and attention/o only.
for round in 1 2 3; do
  A=""; [ $round = 3 ] && A=--no-mlp
  timeout 240 python3 scripts/probe_attn_o_fold.py --positions 129,200,255,383 $A > $OUT/probe-$round.txt 2>&1
  echo "probe round $round ($A) rc $? at $(( $(date +%s) - T0 )) s" >> $S
  cat $OUT/probe-$round.txt >> $S
done
cat $S
