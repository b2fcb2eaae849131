#!/usr/bin/env python3
"""bench/hf_generate.py — the Hugging Face transformers baseline of issue 7,
measured on the card plumb runs on: eager-attention fp16 `generate`, greedy,
on a random-weight model of a real shape (speed does not depend on the
weights' values), built on the GPU without a download.

For each batch size it times `generate` of --new tokens after a --prompt-token
prompt (every sequence the same length, EOS suppressed so all run to the end)
and of 1 token (the prefill and its first token), --reps times each, and prints
  generate tok/s   batch x new / the whole call (the figure issue 7 quotes)
  decode tok/s     batch x (new - 1) / (whole call - 1-token call): the steps
                   after the first, comparable to plumb bench's decode tok/s
as the median with [min-max] of the reps, and one JSON line a batch size.

  python3 bench/hf_generate.py --shape llama2-7b --batch 1,64 --prompt 128 --new 32 --reps 3
"""
import argparse
import json
import statistics
import time

try:
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError as e:  # a machine without them: say so, not a traceback
    raise SystemExit(f"hf_generate.py: needs PyTorch and transformers ({e})")

SHAPES = {  # as plumb mkmodel --shape makes them
    "llama2-7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                      vocab_size=32000, rms_norm_eps=1e-5, rope_theta=10000.0, max_position_embeddings=4096),
    "tinyllama-1.1b": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32, num_key_value_heads=4,
                           vocab_size=32000, rms_norm_eps=1e-5, rope_theta=10000.0, max_position_embeddings=2048),
}


def build(shape):
    cfg = LlamaConfig(**SHAPES[shape], bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False)
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
    ap.add_argument("--shape", default="llama2-7b", choices=sorted(SHAPES))
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
    model = build(a.shape)
    print(f"# transformers {transformers.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name(0)}, {a.shape} fp16 eager, "
          f"prompt {a.prompt}, new {a.new}, reps {a.reps}")
    print("| shape | batch | generate tok/s | decode tok/s | peak VRAM MiB |")
    print("|---|---:|---|---|---:|")
    g = torch.Generator().manual_seed(1)
    for b in batches:
        ids = torch.randint(3, SHAPES[a.shape]["vocab_size"], (b, a.prompt), generator=g).cuda()
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
        print(f"| {a.shape} | {b} | {fmt(gen)} | {fmt(dec)} | {vram:.0f} |")
        print(json.dumps(dict(shape=a.shape, batch=b, prompt=a.prompt, new=a.new, generate_tok_s=gen, decode_tok_s=dec,
                              generate_s=full, first_token_s=first, peak_vram_mib=vram, device=torch.cuda.get_device_name(0),
                              transformers=transformers.__version__, torch=torch.__version__)))


if __name__ == "__main__":
    main()
