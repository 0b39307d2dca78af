#!/usr/bin/env python3
"""Reference logits and greedy tokens from PyTorch/transformers for `kiln gate` (check 3).

Run by the gate as a subprocess on the GPU machine:

    python3 scripts/hf_compare.py --job JOB.json

JOB.json: {"models": [{"name": ..., "dir": HF_DIR, "prompt": [token ids], "steps": N,
           "out": PREFIX}, ...]}

For each model it loads HF_DIR with AutoModelForCausalLM in bfloat16 on the GPU, runs the
prompt, then N-1 greedy decode steps with the KV cache (N greedy tokens in all), and writes:
  PREFIX.logits.f32        N rows x vocab, little-endian float32: row 0 is the logits at the
                           prompt's last position, row j the logits after feeding token j-1;
  PREFIX.fp32_logits.f32   vocab floats: the prompt's last-position logits with the same
                           weights upcast to float32 (how far bf16 itself is from exact);
  PREFIX.json              {"tokens": [N greedy tokens], "margins": [top1 - top2 per row],
                            "torch": ..., "transformers": ..., "seconds": ...}.
The gate compares kiln against these; this script only computes the reference.
"""

import argparse
import json
import sys
import time

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM


def load(path, dtype):
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    except TypeError:  # transformers < 4.56 names it torch_dtype
        model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=dtype)
    return model.to("cuda").eval()


@torch.no_grad()
def reference(job):
    t0 = time.time()
    ids = torch.tensor([job["prompt"]], dtype=torch.long, device="cuda")
    steps = int(job["steps"])

    model = load(job["dir"], torch.bfloat16)
    out = model(input_ids=ids, use_cache=True)
    rows = [out.logits[0, -1].float()]
    past = out.past_key_values
    tokens, margins = [], []
    for j in range(steps):
        top = torch.topk(rows[-1], 2)
        tokens.append(int(top.indices[0]))
        margins.append(float(top.values[0] - top.values[1]))
        if j == steps - 1:
            break
        nxt = torch.tensor([[tokens[-1]]], dtype=torch.long, device="cuda")
        out = model(input_ids=nxt, past_key_values=past, use_cache=True)
        past = out.past_key_values
        rows.append(out.logits[0, -1].float())
    logits = torch.stack(rows).cpu().numpy().astype("<f4")
    del model, out, past
    torch.cuda.empty_cache()

    model = load(job["dir"], torch.float32)
    torch.backends.cuda.matmul.allow_tf32 = False
    fp32 = model(input_ids=ids).logits[0, -1].float().cpu().numpy().astype("<f4")
    del model
    torch.cuda.empty_cache()

    prefix = job["out"]
    logits.tofile(prefix + ".logits.f32")
    fp32.tofile(prefix + ".fp32_logits.f32")
    meta = {
        "name": job["name"],
        "tokens": tokens,
        "margins": margins,
        "vocab": int(logits.shape[1]),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "gpu": torch.cuda.get_device_name(0),
        "seconds": time.time() - t0,
    }
    with open(prefix + ".json", "w") as f:
        json.dump(meta, f)
    print(f"hf_compare: {job['name']}: {steps} greedy tokens, vocab {logits.shape[1]}, {meta['seconds']:.1f} s", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--job", required=True, help="job file written by kiln gate")
    args = ap.parse_args()
    with open(args.job) as f:
        jobs = json.load(f)["models"]
    if not torch.cuda.is_available():
        print("hf_compare: PyTorch sees no GPU", file=sys.stderr)
        sys.exit(2)
    torch.manual_seed(0)
    for job in jobs:
        reference(job)


if __name__ == "__main__":
    main()
