#!/bin/bash
# Written in session 48, extended in session 49 (no device lent in either). Session 50 ran part 1's rounds 1 and 4
# through call-E (results/2026-12-05-h100-decode-ab-s50, H100): fold saves 0.20-0.61 us per layer, fold+o no more than
# fold (the o tail costs what the o launch did). Left: rounds 2-3 and part 2, low priority (after call-B). Prices the folds that would
# take the 0.5B's layer from five dependent launches to four, or three (bench/NOTES-decode.md, sessions 47-49),
# Qwen2.5-0.5B shape, 24 layers per chain, PDL graphs, gate/up and down stand-ins of the real bytes unless --no-mlp:
#   part 1: scripts/probe_qkv_attn_fold.py: QKV-RoPE computed inside kiln's cluster attention (one launch and one
#           boundary fewer; any context), kiln's own `kiln_qkv_attention_bf16` (kernels/attention_qkv.cu, the knob
#           KILN_FUSE_QKV_ATTN=1) in stand-in layers, and (session 49) the same kernel with the o projection as a
#           tail (scripts/probe_qkv_attn_o.cu, compiled on the device in ~1 s): per-head o terms added into an
#           int64 fixed-point accumulator by L2 reductions, no o launch. Columns kiln / noattn / fold / fold+o;
#           `kiln-fold` and `kiln-fold+o` = the savings per layer (`fold - fold+o`: what the o launch still
#           costs once QKV is in the attention). Rounds: 1-2 as built (202 / 208 registers, one block per SM),
#           3 with KILN_QKV_ATTN_MIN_BLOCKS=2 (at most 128 registers), 4 without the MLP stand-ins.
#   part 2: scripts/probe_attn_o_fold.py (session 47's call A): the attention recomputed inside every o block
#           (p < 384 only). Rounds 1-2 whole layers, 3 without the MLP stand-ins.
# Both check their outputs (PASS/FAIL per line): part 1 against a float64 reference at layer 0 and against kiln's
# chain on every layer; part 2 against kiln's chain. No binary: the probes compile kiln's kernels (from the cache).
# Carry: .device/kcc49.tar.xz (kernel_check's CUBINs of the kiln units the probes and call-B's kernel_check
# compile, built by NVRTC 13.0 on the CPU machine, so nothing spends ~90 s per unit compiling on the device). If
# .device/ is gone, rebuild it (~6 min; numpy from `pip install --target /tmp/np numpy`, the CUDA wheels in
# target/ci-cuda13 as bench/README says):
#   cd scripts && PYTHONPATH=/tmp/np LD_LIBRARY_PATH=$PWD/../target/ci-cuda13/nvidia/cu13/lib \
#     KILN_CUDA_INCLUDE=$PWD/../target/ci-cuda13/nvidia/cu13/include KILN_CHECK_CACHE=$PWD/../.device/kcc49 \
#     python3 -c "import kernel_check as kc; q = ['linear.cu', 'linear_fused.cu', 'attention_split.cu', \
#     'attention_qkv.cu']; [kc.nvrtc_cubin(None, 'sm_90a', only=o, defines=d) for o, d in ((q, ()), \
#     (q, ('KILN_QKV_ATTN_MIN_BLOCKS=2',)), (['linear.cu', 'attention_split.cu'], ()), (None, ()))]" && cd .. && \
#     tar -C .device -cf - kcc49 | xz -T2 -6 > .device/kcc49.tar.xz
# (The cache key covers kernels/: after any change there, rebuild it, or the probes compile on the device.)
# Run: run(command="bash bench/results/2026-12-05-s50-ready-for-device/call-A.sh", carry=[".device/kcc49.tar.xz"])
# The 0.5B needs ~5 us per layer in all for 0.50 of its roofline (15.0 against 20.0 us); a fold saving >= ~2 us at
# every p is worth landing (part 1's landing needs no context bucket). fold+o is a probe: if `kiln-fold+o` beats
# `kiln-fold` by more than ~0.5 us, its landing (the consumers' resid + accumulator reads, down zeroing the
# accumulator; NOTES session 49) is next.
set -u
T0=$(date +%s)
S=$OUT/a-summary.txt
{ date -u; git log -1 --format='commit %H' 2>/dev/null || echo 'commit: (no .git on the device)'; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv; } > $S
mkdir -p /tmp && tar -C /tmp -xJf .device/kcc49.tar.xz && echo "kernel cache: $(ls /tmp/kcc49 | wc -l) files" >> $S
export KILN_CUDA_INCLUDE=/usr/local/cuda/include KILN_CHECK_CACHE=/tmp/kcc49
for round in 1 2 3 4; do
  [ $(( $(date +%s) - T0 )) -gt 440 ] && { echo "round $round skipped (time)" >> $S; continue; }
  A=""
  [ $round = 3 ] && A="--kiln-define KILN_QKV_ATTN_MIN_BLOCKS=2"
  [ $round = 4 ] && A=--no-mlp
  timeout 130 python3 scripts/probe_qkv_attn_fold.py $A > $OUT/qkv-fold-$round.txt 2>&1
  echo "qkv-in-attention probe round $round ($A) rc $? at $(( $(date +%s) - T0 )) s" >> $S
  grep -v "^ptxas" $OUT/qkv-fold-$round.txt >> $S
done
for round in 1 2 3; do
  [ $(( $(date +%s) - T0 )) -gt ${A_PART2_UNTIL:-460} ] && { echo "o-fold round $round skipped (time)" >> $S; continue; }
  A=""; [ $round = 3 ] && A=--no-mlp
  timeout 110 python3 scripts/probe_attn_o_fold.py --positions 129,200,255,383 $A > $OUT/o-fold-$round.txt 2>&1
  echo "attention-in-o probe round $round ($A) rc $? at $(( $(date +%s) - T0 )) s" >> $S
  grep -v "^ptxas" $OUT/o-fold-$round.txt >> $S
done
cat $S
