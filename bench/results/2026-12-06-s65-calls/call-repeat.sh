#!/bin/bash
# Session 65's second device call, after request 1 ran the official command on an H200 (0.5B 0.501 of the roofline,
# 0.26% over the 0.50 target, less than that run's bandwidth spread). On an H200: the acceptance row again (batch 1,
# context 128, the three shapes, torch.compile in the same run: session 64's call-final.sh without its gate), a repeat
# reported beside the first whatever it gives; then a block trace of the 0.5B (where the time goes). Elsewhere: the
# trace only (TRACE_ELSEWHERE=0: nothing; request 8 ran the trace on an H100).
# Carry: [".device/bin/kiln-s64c.xz", ".device/kc64c", ".device/kc64t"] (6533db6, main's kernels; kc64t:
# scripts/device_cache.sh /tmp/kiln-s64c /tmp/kc64t KILN_TRACE=1). Requests 2-12 ran it with the H200 branch written out
# in full (f474a4a); it now calls call-final.sh, the same commands. No request reached that branch.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
grep -q H200 $OUT/gpu.txt && ROW_GATE_BEFORE=0 bash bench/results/2026-12-06-s64-calls/call-final.sh > /dev/null
[ "${TRACE_ELSEWHERE:-1}" = 1 ] || grep -q H200 $OUT/gpu.txt || exit 0
[ $(el) -lt 480 ] && timeout $((560 - $(el))) bash scripts/device_trace.sh .device/bin/kiln-s64c.xz .device/kc64t trace-summary.txt qwen2.5-0.5b:128 > /dev/null 2>&1
echo "trace done at $(el) s" >> $S
cat $S; head -60 $OUT/trace-summary.txt 2>/dev/null
