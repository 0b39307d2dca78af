#!/bin/bash
# Session 67, with ~440 s of device time left (too few for the official command's ~440 s): on an H200, the 0.5B's
# acceptance row alone, three rounds (bench/results/2026-12-06-s65-calls/call-row05.sh: the bandwidth probe and kiln's
# decode, batch 1, context 128, 5 repeats; no torch) on 9bd4644 (KILN_QKV_ATTN_MERGE64 on by default); elsewhere the
# full `kiln gate` with the same binary (call-official2.sh's H100 half).
# Carry: [".device/bin/kiln-s67c.xz", ".device/kc67c"].
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 &&
  { BIN=.device/bin/kiln-s67c.xz KC=.device/kc67c ROUNDS=3 bash bench/results/2026-12-06-s65-calls/call-row05.sh; exit; }
GATE_BEFORE=0 bash bench/results/2026-12-07-s67-calls/call-official2.sh
