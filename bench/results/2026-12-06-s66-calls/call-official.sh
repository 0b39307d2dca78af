#!/bin/bash
# Session 66, call 2: on an H200, the official command and the full gate on eaccd22 (main's kernels since
# c583ac7; the output norm releases the logits GEMV before its wait, KILN_RELEASE_EARLY's default); on an H100,
# a block trace of the 0.5B with the same binary's KILN_TRACE=1 kernels instead (the release's effect on the
# norm -> logits handoff). Carry: [".device/bin/kiln-s66b.xz", ".device/kc66a", ".device/kc66t"].
source scripts/device_official_if_h200.sh .device/bin/kiln-s66b.xz .device/kc66a && exit
bash scripts/device_trace.sh .device/bin/kiln-s66b.xz .device/kc66t trace-summary.txt qwen2.5-0.5b:128
