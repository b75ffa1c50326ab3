#!/usr/bin/python3
"""PyTorch peer for `kiln bench`: prefill and decode tokens/s of the same checkpoint, prompt lengths
and token counts in PyTorch eager (Debian's python3-torch 1.13: `scripts/setup.sh --with-reference`),
so that docs/benchmarks.md puts kiln beside a peer measured on the same machine.

The model is tests/oracle/torch_causal_lm.py, the tests' reference, in its best case as a peer:
a preallocated KV cache (Transformers' default cache grows by concatenation), no autograd, logits of
the last position only, as many intra-op threads as kiln uses. bench/run_benchmarks.sh runs it
with jemalloc preloaded when libjemalloc2 is installed, as the issue's PyTorch figures were.

  bench/peers/torch_bench.py MODEL_DIR [--prompt-tokens 128,512] [--new-tokens 64] [--repeats 3]
      [--dtype bf16|f32] [--threads N] [--json]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "oracle"))
from torch_causal_lm import CausalLM  # noqa: E402


def measure(model, prompt_tokens, new_tokens, repeats):
    """Median prefill and decode tokens/s over `repeats` greedy generations after one warm-up."""
    prompt = torch.randint(0, model.cfg["vocab_size"], (1, prompt_tokens),
                           generator=torch.Generator().manual_seed(0))
    prefill, decode = [], []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        token = model.forward(prompt, 0)[:, -1].argmax(-1, keepdim=True)
        t1 = time.perf_counter()
        for i in range(new_tokens - 1):
            token = model.forward(token, prompt_tokens + i)[:, -1].argmax(-1, keepdim=True)
        t2 = time.perf_counter()
        prefill.append(prompt_tokens / (t1 - t0))
        decode.append((new_tokens - 1) / (t2 - t1))
    return statistics.median(prefill[1:]), statistics.median(decode[1:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir")
    ap.add_argument("--prompt-tokens", default="128,512")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    ap.add_argument("--threads", type=int,
                    default=int(os.environ.get("OMP_NUM_THREADS", os.cpu_count())))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    prompts = [int(p) for p in args.prompt_tokens.split(",")]
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    model = CausalLM(args.model_dir, dtype, max(prompts) + args.new_tokens)
    peer = f"pytorch {torch.__version__} eager"
    if "jemalloc" in os.environ.get("LD_PRELOAD", ""):
        peer += ", jemalloc"
    for p in prompts:
        prefill, decode = measure(model, p, args.new_tokens, args.repeats)
        row = {"peer": peer, "dtype": args.dtype, "threads": args.threads, "prompt_tokens": p,
               "new_tokens": args.new_tokens, "prefill_tokens_per_s": round(prefill, 2),
               "decode_tokens_per_s": round(decode, 2)}
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            print(f"P = {p}: prefill {prefill:.1f} tokens/s, decode {decode:.2f} tokens/s ({peer}, "
                  f"{args.dtype}, {args.threads} threads)", flush=True)


if __name__ == "__main__":
    main()
