#!/bin/bash
# Session 63's first call: on an H200, the official command on main's machine code (87dd512's kiln-s62c and
# kc62c; e8269fb's kernels have the same .text); on anything else, call-default.sh (the 0.5B's ids, the full
# `kiln gate` and kernel_check's qkv_attention on the MMA default). Carry [".device/bin/kiln-s62c.xz", ".device/kc62c"].
# (Never started a machine; its guard later moved into scripts/device_official_if_h200.sh.)
set -u
source scripts/device_official_if_h200.sh .device/bin/kiln-s62c.xz .device/kc62c && exit
bash bench/results/2026-12-06-s62-calls/call-default.sh
