#!/usr/bin/python3
"""An independent PyTorch implementation of the decoders kiln runs (Qwen3, Qwen2, Llama), used as
a reference oracle by the tests and as a peer by the benchmarks (bench/peers/torch_bench.py).

Written from the architectures as Transformers defines them (its modelling code is not packaged in
Debian 12; Debian's python3-torch is): RMSNorm computed in f32, optional per-head q/k RMSNorm
(Qwen3), optional q/k/v (Qwen2) or q/k/v/o (attention_bias) biases, rotate-half RoPE with the
`default`, `linear` and `llama3` frequency rules, grouped-query attention over a preallocated KV
cache with a causal mask, SwiGLU, tied or untied lm_head.

  torch_causal_lm.py make-model OUT_DIR --variant qwen3|qwen2|llama3|llama-linear-bias [--seed S]
  torch_causal_lm.py check MODEL_DIR --kiln KILN [--dtype f32|bf16] [--tokens N] [--new-tokens N]

`check` compares kiln with this model in f32: every prompt token's log-probability (`kiln perplexity
--logprobs`), a greedy continuation (`kiln generate`), and the same prompt batched with a shorter
one (`--prompts-file`, left padding), each row against this model on it alone. With --dtype bf16,
kiln runs in bf16 and its log-probabilities are held to the issue's bound on the mean deviation from
f32.
Exit status 0 when they agree, 1 when not.
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

# safetensors dtype -> (numpy dtype of the same width, torch dtype to view it as, if different)
STORED = {"BF16": (np.int16, torch.bfloat16), "F16": (np.float16, None), "F32": (np.float32, None)}


def load_safetensors(path):
    """The tensors of one safetensors file (copied out of a memory map)."""
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + header_len)
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        np_dtype, view_as = STORED[info["dtype"]]
        begin, end = info["data_offsets"]
        t = torch.from_numpy(np.frombuffer(data[begin:end], dtype=np_dtype).reshape(info["shape"]).copy())
        tensors[name] = t.view(view_as) if view_as is not None else t
    return tensors


def save_safetensors(path, tensors):
    """Writes f32 or bf16 tensors as one safetensors file (header, then the data in order)."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.contiguous()
        raw = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        header[name] = {"dtype": "BF16" if t.dtype == torch.bfloat16 else "F32",
                        "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for raw in blobs:
            f.write(raw)


def load_weights(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if not os.path.exists(index):
        return load_safetensors(os.path.join(model_dir, "model.safetensors"))
    with open(index) as f:
        files = sorted(set(json.load(f)["weight_map"].values()))
    weights = {}
    for name in files:
        weights.update(load_safetensors(os.path.join(model_dir, name)))
    return weights


def rope_inv_freq(cfg, head_dim):
    """RoPE's inverse frequencies, with Transformers' `linear` and `llama3` rules."""
    theta = cfg.get("rope_theta", 10000.0)
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    scaling = cfg.get("rope_scaling") or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "linear":
        inv_freq = inv_freq / scaling["factor"]
    elif kind == "llama3":
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old_context = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > old_context / low, inv_freq / factor, inv_freq)
        smooth = (old_context / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= old_context / high) & (wavelen <= old_context / low)
        inv_freq = torch.where(medium, smoothed, scaled)
    elif kind != "default":
        raise ValueError(f"rope type {kind!r} is not implemented here")
    return inv_freq.float()


def rms_norm(x, weight, eps):
    variance = x.float().pow(2).mean(-1, keepdim=True)
    return weight * (x.float() * torch.rsqrt(variance + eps)).to(x.dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class CausalLM:
    """One sequence (batch 1) with a static KV cache of max_length positions."""

    def __init__(self, model_dir, dtype, max_length):
        with open(os.path.join(model_dir, "config.json")) as f:
            self.cfg = cfg = json.load(f)
        self.w = {k: v.to(dtype) for k, v in load_weights(model_dir).items()}
        self.dtype = dtype
        self.layers = cfg["num_hidden_layers"]
        self.heads = cfg["num_attention_heads"]
        self.kv_heads = cfg.get("num_key_value_heads", self.heads)
        self.head_dim = cfg.get("head_dim") or cfg["hidden_size"] // self.heads
        self.eps = cfg["rms_norm_eps"]
        self.embed = self.w["model.embed_tokens.weight"]
        self.lm_head = self.w.get("lm_head.weight", self.embed)
        positions = torch.arange(max_length, dtype=torch.float32)
        angles = torch.outer(positions, rope_inv_freq(cfg, self.head_dim))
        angles = torch.cat((angles, angles), dim=-1)
        self.cos, self.sin = angles.cos().to(dtype), angles.sin().to(dtype)
        shape = (self.layers, 1, self.kv_heads, max_length, self.head_dim)
        self.k_cache = torch.zeros(shape, dtype=dtype)
        self.v_cache = torch.zeros(shape, dtype=dtype)

    def linear(self, x, name):
        y = x @ self.w[name + ".weight"].T
        bias = self.w.get(name + ".bias")
        return y if bias is None else y + bias

    def forward(self, ids, start, all_logits=False):
        """f32 logits for positions [start, start + ids.shape[1]) (only the last one unless
        all_logits), writing their keys and values into the cache from `start`."""
        t = ids.shape[1]
        end = start + t
        x = self.embed[ids]
        cos, sin = self.cos[start:end], self.sin[start:end]
        mask = torch.full((t, end), float("-inf")).triu(start + 1)
        group = self.heads // self.kv_heads
        for layer in range(self.layers):
            p = f"model.layers.{layer}."
            h = rms_norm(x, self.w[p + "input_layernorm.weight"], self.eps)
            q = self.linear(h, p + "self_attn.q_proj").view(1, t, self.heads, self.head_dim)
            k = self.linear(h, p + "self_attn.k_proj").view(1, t, self.kv_heads, self.head_dim)
            v = self.linear(h, p + "self_attn.v_proj").view(1, t, self.kv_heads, self.head_dim)
            if p + "self_attn.q_norm.weight" in self.w:
                q = rms_norm(q, self.w[p + "self_attn.q_norm.weight"], self.eps)
                k = rms_norm(k, self.w[p + "self_attn.k_norm.weight"], self.eps)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            self.k_cache[layer, :, :, start:end] = k
            self.v_cache[layer, :, :, start:end] = v
            keys = self.k_cache[layer, :, :, :end].repeat_interleave(group, dim=1)
            values = self.v_cache[layer, :, :, :end].repeat_interleave(group, dim=1)
            scores = (q @ keys.transpose(-1, -2)).float() / math.sqrt(self.head_dim) + mask
            attn = torch.softmax(scores, dim=-1).to(self.dtype) @ values
            attn = attn.transpose(1, 2).reshape(1, t, self.heads * self.head_dim)
            x = x + self.linear(attn, p + "self_attn.o_proj")
            h = rms_norm(x, self.w[p + "post_attention_layernorm.weight"], self.eps)
            gate = torch.nn.functional.silu(self.linear(h, p + "mlp.gate_proj"))
            x = x + self.linear(gate * self.linear(h, p + "mlp.up_proj"), p + "mlp.down_proj")
        if not all_logits:
            x = x[:, -1:]
        return (rms_norm(x, self.w["model.norm.weight"], self.eps) @ self.lm_head.T).float()

    def greedy(self, ids, new_tokens):
        token = self.forward(ids, 0)[:, -1].argmax(-1, keepdim=True)
        out = [token.item()]
        for i in range(new_tokens - 1):
            token = self.forward(token, ids.shape[1] + i)[:, -1].argmax(-1, keepdim=True)
            out.append(token.item())
        return out


# Small configurations of each family, in the fields Transformers writes. The rope scaling rules
# are chosen so that they move every frequency band the test's positions reach.
BASE = {"vocab_size": 1000, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu", "bos_token_id": 1,
        "eos_token_id": 2, "torch_dtype": "float32"}
VARIANTS = {
    "qwen3": dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3", head_dim=64,
                  attention_bias=False, tie_word_embeddings=True, rope_scaling=None,
                  rope_theta=1000000.0),
    "qwen2": dict(architectures=["Qwen2ForCausalLM"], model_type="qwen2",
                  tie_word_embeddings=False, rope_scaling=None, use_sliding_window=False),
    "llama3": dict(architectures=["LlamaForCausalLM"], model_type="llama", attention_bias=False,
                   mlp_bias=False, tie_word_embeddings=False, rope_theta=500000.0,
                   rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
    "llama-linear-bias": dict(architectures=["LlamaForCausalLM"], model_type="llama",
                              attention_bias=True, mlp_bias=False, tie_word_embeddings=True,
                              rope_scaling={"rope_type": "linear", "factor": 4.0}),
}


def make_model(out_dir, variant, seed):
    cfg = dict(BASE, **VARIANTS[variant])
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    hidden, inter = cfg["hidden_size"], cfg["intermediate_size"]
    q, kv = cfg["num_attention_heads"] * head_dim, cfg["num_key_value_heads"] * head_dim
    qkv_bias = cfg["model_type"] == "qwen2" or cfg.get("attention_bias", False)
    o_bias = cfg["model_type"] != "qwen2" and cfg.get("attention_bias", False)
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape, std):
        return torch.randn(*shape, generator=gen) * std

    def norm(n):  # around 1, so that a norm's weight is not a no-op
        return 1 + rand(n, std=0.2)

    # Logits of a few units either way (tied or not), as in a trained model: far larger ones would
    # make bf16's rounding of them, not kiln, the measure of a bf16 run.
    w = {"model.embed_tokens.weight": rand(cfg["vocab_size"], hidden, std=hidden ** -0.5)}
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        w[p + "input_layernorm.weight"] = norm(hidden)
        for name, rows, cols, bias in (("q_proj", q, hidden, qkv_bias), ("k_proj", kv, hidden, qkv_bias),
                                       ("v_proj", kv, hidden, qkv_bias), ("o_proj", hidden, q, o_bias)):
            w[p + f"self_attn.{name}.weight"] = rand(rows, cols, std=cols ** -0.5)
            if bias:
                w[p + f"self_attn.{name}.bias"] = rand(rows, std=0.5)
        if cfg["model_type"] == "qwen3":
            w[p + "self_attn.q_norm.weight"] = norm(head_dim)
            w[p + "self_attn.k_norm.weight"] = norm(head_dim)
        w[p + "post_attention_layernorm.weight"] = norm(hidden)
        w[p + "mlp.gate_proj.weight"] = rand(inter, hidden, std=hidden ** -0.5)
        w[p + "mlp.up_proj.weight"] = rand(inter, hidden, std=hidden ** -0.5)
        w[p + "mlp.down_proj.weight"] = rand(hidden, inter, std=inter ** -0.5)
    w["model.norm.weight"] = norm(hidden)
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = rand(cfg["vocab_size"], hidden, std=hidden ** -0.5)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    save_safetensors(os.path.join(out_dir, "model.safetensors"), w)


def run_kiln(kiln, *args):
    return json.loads(subprocess.run([kiln, *args], check=True, capture_output=True, text=True).stdout)


def check(model_dir, kiln, dtype, tokens, new_tokens, seed):
    """kiln against this model; True when they agree within the issue's tolerances."""
    model = CausalLM(model_dir, torch.float32, tokens + new_tokens)
    ids = torch.randint(3, model.cfg["vocab_size"], (1, tokens), generator=torch.Generator().manual_seed(seed))
    ids_arg = ",".join(map(str, ids[0].tolist()))
    logprobs = torch.log_softmax(model.forward(ids, 0, all_logits=True)[0, :-1], dim=-1)
    expected = logprobs.gather(1, ids[0, 1:, None])[:, 0].double()
    got = torch.tensor(run_kiln(kiln, "perplexity", model_dir, "--ids", ids_arg, "--dtype", dtype,
                                "--logprobs", "--json")["logprobs"], dtype=torch.float64)
    diff = (got - expected).abs()
    print(f"{model_dir}: kiln {dtype} against PyTorch f32, {len(diff)} log-probabilities "
          f"(spread {expected.min().item():.2f} .. {expected.max().item():.2f}): "
          f"max |diff| {diff.max().item():.2e}, mean {diff.mean().item():.2e}")
    if dtype == "f32":
        ok = diff.max().item() < 1e-4
        expected_ids = model.greedy(ids, new_tokens)
        got_ids = run_kiln(kiln, "generate", model_dir, "--prompt-ids", ids_arg, "--dtype", "f32",
                           "--max-new-tokens", str(new_tokens), "--json")["output_ids"]
        print(f"  greedy: PyTorch {expected_ids}\n          kiln    {got_ids}")
        # eos (id 2) ends kiln's generation early; the prefix must still agree
        ok = ok and got_ids == expected_ids[:len(got_ids)] and len(got_ids) > 0
        # The same prompt batched with a shorter one (kiln pads it on the left): each row must
        # continue as this model does on that prompt alone.
        short = ids[:, : tokens // 3]
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl") as prompts:
            for row in (ids, short):
                prompts.write(json.dumps({"prompt_ids": row[0].tolist()}) + "\n")
            prompts.flush()
            out = subprocess.run([kiln, "generate", model_dir, "--prompts-file", prompts.name,
                                  "--dtype", "f32", "--max-new-tokens", str(new_tokens), "--json"],
                                 check=True, capture_output=True, text=True).stdout
        rows = [json.loads(line)["output_ids"] for line in out.splitlines() if line.strip()]
        expected_rows = [expected_ids, model.greedy(short, new_tokens)]  # rewrites the cache from 0
        for name, got_row, want in zip(("long", "short"), rows, expected_rows):
            print(f"  batched, {name} row: PyTorch alone {want}\n                     kiln batched  {got_row}")
            ok = ok and len(got_row) > 0 and got_row == want[:len(got_row)]
        ok = ok and len(rows) == 2
    else:
        # The bound, beside what PyTorch's own bf16 path deviates by on the same prompt.
        bf16 = CausalLM(model_dir, torch.bfloat16, tokens)
        own = torch.log_softmax(bf16.forward(ids, 0, all_logits=True)[0, :-1], dim=-1)
        own_diff = (own.gather(1, ids[0, 1:, None])[:, 0].double() - expected).abs()
        print(f"  PyTorch's own bf16 path: max |diff| {own_diff.max().item():.2e}, "
              f"mean {own_diff.mean().item():.2e}")
        ok = diff.mean().item() < 3e-2
    print("  agree" if ok else "  DISAGREE")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    mk = sub.add_parser("make-model", help="write a small random checkpoint of one family")
    mk.add_argument("out_dir")
    mk.add_argument("--variant", choices=sorted(VARIANTS), required=True)
    mk.add_argument("--seed", type=int, default=0)
    ck = sub.add_parser("check", help="compare kiln's log-probabilities and greedy ids with this model")
    ck.add_argument("model_dir")
    ck.add_argument("--kiln", required=True)
    ck.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    ck.add_argument("--tokens", type=int, default=48)
    ck.add_argument("--new-tokens", type=int, default=8)
    ck.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    if args.command == "make-model":
        make_model(args.out_dir, args.variant, args.seed)
    else:
        sys.exit(0 if check(args.model_dir, args.kiln, args.dtype, args.tokens, args.new_tokens,
                            args.seed) else 1)


if __name__ == "__main__":
    main()
