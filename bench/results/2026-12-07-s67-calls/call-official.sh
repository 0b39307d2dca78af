#!/bin/bash
# Session 67, call 1: on an H200, the official command and the full gate on af6de7a (main's kernels since
# c583ac7; the output norm releases the logits GEMV before its wait, KILN_RELEASE_EARLY's default since eaccd22);
# on an H100, a block trace of the 0.5B with the same binary's KILN_TRACE=1 kernels instead.
# Carry: [".device/bin/kiln-s67a.xz", ".device/kc67a", ".device/kc67t"] (scripts/device_cache.sh /tmp/kiln-s67a
# .device/kc67a, and .device/kc67t KILN_TRACE=1).
source scripts/device_official_if_h200.sh .device/bin/kiln-s67a.xz .device/kc67a && exit
bash scripts/device_trace.sh .device/bin/kiln-s67a.xz .device/kc67t trace-summary.txt qwen2.5-0.5b:128
