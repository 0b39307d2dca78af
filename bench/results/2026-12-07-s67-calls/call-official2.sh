#!/bin/bash
# Session 67, with ~530 s of device time left: on an H200, the official command on 9bd4644 (KILN_QKV_ATTN_MERGE64
# on by default, the output norm's release), no gate after it (GATE_BEFORE=0: too little time for both); elsewhere the
# full `kiln gate` (38 checks) with the same binary instead.
# Carry: [".device/bin/kiln-s67c.xz", ".device/kc67c"] (scripts/device_cache.sh /tmp/kiln-s67c .device/kc67c), or
# another build's with BIN / KC; GATE_BEFORE=450 runs the full gate after the official command where time is left.
BIN=${BIN:-.device/bin/kiln-s67c.xz} KC=${KC:-.device/kc67c}
GATE_BEFORE=${GATE_BEFORE:-0} source scripts/device_official_if_h200.sh $BIN $KC && exit
T0=$(date +%s)
source scripts/device_prep.sh $BIN $KC > /tmp/prep.txt
B=$PWD/target/kiln
S=$OUT/summary.txt; { date -u; $B --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat /tmp/prep.txt; } > $S
timeout 280 $B gate --synth-dir target/synth > $OUT/gate.log 2>&1
echo "gate (all checks) rc $? at $(( $(date +%s) - T0 )) s" >> $S; grep -a -E 'FAIL|kiln gate:' $OUT/gate.log | tail -6 >> $S
cat $S
