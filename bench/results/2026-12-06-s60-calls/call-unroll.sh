#!/bin/bash
# Session 60: the fused QKV-attention's loop over keys not unrolled (KILN_QKV_ATTN_UNROLL=1, 787a598; a compile-time
# define: half the loop's code, 4 keys a warp per pass, the first pass's K/V loaded before the wait) against main's 2:
# does the last-ending block's slow loop (call-probe2.sh) come from instruction fetch? Greedy ids, the 0.5B A/B over
# four placements at contexts 128 and 1024, kiln gate 1,2,5 with the define (scripts/device_ab_define.sh). Carry
# [".device/bin/kiln-s60u.xz", ".device/kc60u"] (scripts/device_cache.sh /tmp/kiln-s60u .device/kc60u, then again with
# KILN_QKV_ATTN_UNROLL=1). ~130 s.
CTXS=${CTXS:-128,1024} AB_BY=${AB_BY:-230} bash scripts/device_ab_define.sh unroll1 KILN_QKV_ATTN_UNROLL=1 \
  .device/bin/kiln-s60u.xz .device/kc60u
