#!/usr/bin/env python3
"""bench/hf_generate.py — the Hugging Face transformers baseline of issue 7,
measured on the card plumb runs on: eager-attention fp16 `generate`, greedy,
on a random-weight model of the shape of a Llama GGUF plumb measures (read
from `plumb info`, so it is the same shape as plumb's run; speed does not
depend on the weights' values), built on the GPU without a download.

For each batch size it times `generate` of --new tokens after a --prompt-token
prompt (every sequence the same length, EOS suppressed so all run to the end)
and of 1 token (the prefill and its first token), --reps times each, and prints
  generate tok/s   batch x new / the whole call (the figure issue 7 quotes)
  decode tok/s     batch x (new - 1) / (whole call - 1-token call): the steps
                   after the first, comparable to plumb bench's decode tok/s
as the median with [min-max] of the reps, and one JSON line a batch size.

  python3 bench/hf_generate.py --model models-cache/llama2-7b-q4_0.gguf --batch 1,64 --prompt 128 --new 32 --reps 3
"""
import argparse
import json
import os
import statistics
import subprocess
import time

try:
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError as e:  # a machine without them: say so, not a traceback
    raise SystemExit(f"hf_generate.py: needs PyTorch and transformers ({e})")

def gguf_shape(plumb, path):
    """LlamaConfig arguments of a Llama GGUF, from its metadata as `plumb info --json` gives it"""
    try:
        info = json.loads(subprocess.run([plumb, "info", path, "--json"], check=True, capture_output=True, text=True).stdout)
    except OSError as e:
        raise SystemExit(f"hf_generate.py: cannot run {plumb} ({e}); --plumb names the binary")
    except subprocess.CalledProcessError as e:
        raise SystemExit(f"hf_generate.py: {plumb} info {path}: {e.stderr.strip() or f'exit status {e.returncode}'}")
    except json.JSONDecodeError as e:
        raise SystemExit(f"hf_generate.py: {plumb} info --json gave no JSON ({e}); a plumb built before --json?")
    meta, tok = info["metadata"], info.get("tokenizer")
    if info.get("architecture") != "llama" or not tok:
        raise SystemExit(f"hf_generate.py: {path} is not a Llama model with a vocabulary (architecture {info.get('architecture') or 'unknown'})")
    try:
        heads = int(meta["llama.attention.head_count"])
        cfg = dict(hidden_size=int(meta["llama.embedding_length"]), intermediate_size=int(meta["llama.feed_forward_length"]),
                   num_hidden_layers=int(meta["llama.block_count"]), num_attention_heads=heads,
                   num_key_value_heads=int(meta.get("llama.attention.head_count_kv", heads)),
                   vocab_size=int(tok["tokens"]), rms_norm_eps=float(meta.get("llama.attention.layer_norm_rms_epsilon", 1e-5)),
                   rope_theta=float(meta.get("llama.rope.freq_base", 10000)),
                   max_position_embeddings=int(meta.get("llama.context_length", 2048)))
    except (KeyError, TypeError, ValueError) as e:
        raise SystemExit(f"hf_generate.py: {path}: no usable {e} in its metadata")
    cfg["tie_word_embeddings"] = not any(t["name"] == "output.weight" for t in info["tensors"])
    return cfg


def build(shape):
    cfg = LlamaConfig(**shape, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.float16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg)
    torch.set_default_dtype(prev)
    model.eval()
    with torch.no_grad():  # small weights, as trained models have: no inf/nan in fp16
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.02)
    return model


def timed(model, ids, new):
    torch.cuda.synchronize()
    t = time.perf_counter()
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t
    assert out.shape[1] == ids.shape[1] + new, out.shape
    return dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="the Llama GGUF plumb measures (its shape; the weights are not read)")
    ap.add_argument("--plumb", default="./plumb", help="the plumb binary whose `info` reads the shape")
    ap.add_argument("--batch", default="1,64")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("hf_generate.py: no CUDA device (it measures transformers on the GPU plumb is measured on)")
    if a.prompt < 1 or a.new < 2 or a.reps < 1:
        raise SystemExit("hf_generate.py: --prompt >= 1, --new >= 2 (decode tok/s is of the steps after the first) and --reps >= 1")
    try:
        batches = [int(x) for x in a.batch.split(",")]
    except ValueError:
        raise SystemExit(f"hf_generate.py: --batch takes sizes joined by commas, not {a.batch!r}")
    if min(batches) < 1:
        raise SystemExit("hf_generate.py: batch sizes are >= 1")
    shape = gguf_shape(a.plumb, a.model)
    name = os.path.basename(a.model)
    model = build(shape)
    print(f"# transformers {transformers.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name(0)}, {name}'s shape fp16 eager, "
          f"prompt {a.prompt}, new {a.new}, reps {a.reps}")
    print("| model | batch | generate tok/s | decode tok/s | peak VRAM MiB |")
    print("|---|---:|---|---|---:|")
    g = torch.Generator().manual_seed(1)
    for b in batches:
        ids = torch.randint(3, shape["vocab_size"], (b, a.prompt), generator=g).cuda()
        timed(model, ids, 2)  # warm-up
        torch.cuda.reset_peak_memory_stats()
        full, first = [], []
        for _ in range(a.reps):
            first.append(timed(model, ids, 1))
            full.append(timed(model, ids, a.new))
        gen = [b * a.new / t for t in full]
        dec = [b * (a.new - 1) / (f - p) for f, p in zip(full, first)]
        vram = torch.cuda.max_memory_allocated() / 2**20
        fmt = lambda v: f"{statistics.median(v):.1f} [{min(v):.1f}-{max(v):.1f}]"
        print(f"| {name} | {b} | {fmt(gen)} | {fmt(dec)} | {vram:.0f} |")
        print(json.dumps(dict(model=a.model, shape=shape, batch=b, prompt=a.prompt, new=a.new, generate_tok_s=gen, decode_tok_s=dec,
                              generate_s=full, first_token_s=first, peak_vram_mib=vram, device=torch.cuda.get_device_name(0),
                              transformers=transformers.__version__, torch=torch.__version__)))


if __name__ == "__main__":
    main()
