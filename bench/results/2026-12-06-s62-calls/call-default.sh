#!/bin/bash
# Session 62: main with KILN_QKV_ATTN_MMA=1 by default (87dd512): the greedy ids of the 0.5B, the full `kiln gate`,
# then kernel_check's qkv_attention checks with the default kernels, on whatever GPU comes (too little device time
# was left for the official command). Carry [".device/bin/kiln-s62c.xz", ".device/kc62c"]
# (scripts/device_cache.sh /tmp/kiln-s62c .device/kc62c). ~300 s.
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
source scripts/device_prep.sh .device/bin/kiln-s62c.xz .device/kc62c > /tmp/prep.txt
B=$PWD/target/kiln S=$OUT/default-summary.txt D=target/synth/qwen2.5-0.5b-seed1
{ date -u; $B --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat /tmp/prep.txt; } > $S
[ -f $D/config.json ] || timeout 120 $B synth --shape qwen2.5-0.5b --seed 1 --out $D > /dev/null 2>&1
timeout 40 $B run --model $D --fuse --prompt-ids $(seq -s, 1 128) --max-tokens 64 --temperature 0 --device cuda > /tmp/ids.txt 2>&1
echo "qwen2.5-0.5b ids default rc $? $(grep -a -v '^\[kiln\]\|^kiln:' /tmp/ids.txt | md5sum | cut -c1-12) at $(el) s" >> $S
timeout $((${GATE_BY:-230} - $(el))) $B gate --synth-dir target/synth > $OUT/gate.log 2>&1
echo "gate (all checks) rc $? at $(el) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate.log | tail -6 >> $S
timeout $((${LIMIT:-320} - $(el))) python3 scripts/kernel_check.py --only qkv_attention > $OUT/kcheck-default.txt 2>&1
echo "kernel_check rc $? at $(el) s: $(grep -a -E '^[0-9]+ passed' $OUT/kcheck-default.txt)" >> $S
cat $S
