#!/bin/bash
# Session 67: whatever machine comes does work. On an H200: the official command and the full gate on
# af6de7a (call-official.sh's H200 half). Elsewhere: the A/B of KILN_QKV_ATTN_MERGE64=1 on c5e08a3 (call-ab-m64.sh;
# traced when .device/kc67bt was carried).
# Carry: [".device/bin/kiln-s67a.xz", ".device/kc67a", ".device/bin/kiln-s67b.xz", ".device/kc67b", ".device/kc67bt"]
# (carry lists files and directories; .device/bin/ holds both binaries).
source scripts/device_official_if_h200.sh .device/bin/kiln-s67a.xz .device/kc67a && exit
[ -d .device/kc67bt ] && export TRACE=1
bash bench/results/2026-12-07-s67-calls/call-ab-m64.sh
