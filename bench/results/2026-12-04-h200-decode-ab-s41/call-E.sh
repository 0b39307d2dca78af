#!/bin/bash
# Session 41 call E. kernel_check --only qkv_rope,tiles on main's kernels (9d27c4e + the check cache), the
# CUBINs compiled here by kernel_check.py itself (KILN_CHECK_CACHE) so that the device skips NVRTC.
set -u
T0=$(date +%s)
(cd .device/kcc && xz -d -f *.xz)
S=$OUT/e-summary.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; } > $S
export KILN_CUDA_INCLUDE=/usr/local/cuda/include KILN_CHECK_CACHE=$PWD/.device/kcc
timeout 250 python3 scripts/kernel_check.py --only qkv_rope,tiles > $OUT/kcheck.txt 2>&1
echo "rc $? end $(( $(date +%s) - T0 )) s" >> $S
grep -a -E "FAIL|passed|compiled|nvrtc" $OUT/kcheck.txt | tail -8 >> $S
cat $S
