#!/bin/bash
# Session 64, a device call: on an H200 the official command on main (6533db6: the QKV-attention's warp-0
# pushes and no last barrier by default), through scripts/device_official_if_h200.sh; elsewhere nothing (the rest of
# the session's device time is the official command's).
# Carry: [".device/bin/kiln-s64c.xz", ".device/kc64c"] (scripts/device_cache.sh /tmp/kiln-s64c .device/kc64c).
source scripts/device_official_if_h200.sh .device/bin/kiln-s64c.xz .device/kc64c && exit
echo "not an H200: $(cat $OUT/gpu.txt); nothing run"
