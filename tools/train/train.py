"""Trains one pagoda-tiny model and exports it (see docs/models.md, "pagoda-tiny").

  python3 tools/train/train.py tokenizer --corpora DIR --out OUT         # OUT/tokenizer.json
  python3 tools/train/train.py train --arch llama|mla --corpora DIR --tokenizer OUT/tokenizer.json \
      --out OUT/llama --seconds 360                                         # train + export

`train` writes OUT/<arch>/: loss.csv (one line per logging step), model files
(pagoda-tiny.gguf for llama; hf/ for both), golden*.safetensors, summary.json (sizes, time,
final losses, PyTorch retrieval accuracy at 1K/2K/4K in kv_eval.cc's prompt format).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data import (FILLER, QUESTION, Encoder, Sampler, corpus_stream, load_tokenizer,  # noqa: E402
                  read_documents, retrieval_prompt, train_tokenizer)
from export import write_gguf_llama, write_golden, write_hf_dir  # noqa: E402
from model import GQA_CONFIG, MLA_CONFIG, TinyLM  # noqa: E402


def cmd_tokenizer(a):
    held_out, docs = read_documents(os.path.join(a.corpora, "tinystories-first2MiB.txt"),
                                    os.path.join(a.corpora, "tinyshakespeare.txt"))
    t0 = time.time()
    text = train_tokenizer(docs, a.vocab_size)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(text)
    tok = load_tokenizer(os.path.join(a.out, "tokenizer.json"))
    enc = Encoder(tok)
    print(f"tokenizer: {tok.get_vocab_size()} tokens in {time.time() - t0:.1f}s; filler "
          f"{len(enc(FILLER))} tokens, question {len(enc(QUESTION))}; "
          f"' 12345.' -> {tok.encode(' 12345.', add_special_tokens=False).tokens}", flush=True)


BUCKETS = [(512, 0.15), (1024, 0.2), (2048, 0.25), (4096, 0.4)]


@torch.no_grad()
def eval_retrieval(model, enc, context: int, trials: int, seed: int, device):
    """kv_eval.cc's Retrieval with PyTorch: greedy 8 tokens, correct when the key is in them."""
    rng = np.random.default_rng(seed)
    filler, question = enc(FILLER), enc(QUESTION)
    correct = 0
    was_training = model.training
    model.eval()
    for _ in range(trials):
        key = str(10000 + int(rng.integers(0, 90000)))
        ids = retrieval_prompt(enc, filler, question, key, context, rng).tolist()
        out = []
        for _ in range(8):
            with torch.autocast("cuda", torch.bfloat16, enabled=device.type == "cuda"):
                lg = model(torch.tensor([ids], device=device))[0, -1]
            t = int(lg.argmax())
            out.append(t)
            ids.append(t)
        if key in enc.tok.decode(out):
            correct += 1
    model.train(was_training)
    return correct / trials


def cmd_train(a):
    torch.manual_seed(a.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cfg = dataclasses.replace(GQA_CONFIG if a.arch == "llama" else MLA_CONFIG)
    if a.tiny:  # CPU smoke test
        cfg = dataclasses.replace(cfg, n_layers=2, max_position=a.max_len)
    cfg = dataclasses.replace(cfg, dropout=a.dropout)
    tok = load_tokenizer(a.tokenizer)
    with open(a.tokenizer, encoding="utf-8") as f:
        tok_json = f.read()
    enc = Encoder(tok)
    held_out, docs = read_documents(os.path.join(a.corpora, "tinystories-first2MiB.txt"),
                                    os.path.join(a.corpora, "tinyshakespeare.txt"))
    stream = corpus_stream(enc, docs)
    sampler = Sampler(enc, stream, a.seed, tail=a.tail, story_filler_weight=a.story_filler_weight)
    model = TinyLM(cfg).to(device)
    n_params = model.num_params()
    print(f"[{a.arch}] {n_params / 1e6:.2f}M parameters; {len(stream)} training text tokens; {device}", flush=True)
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=device.type == "cuda")
    os.makedirs(a.out, exist_ok=True)
    log = open(os.path.join(a.out, "loss.csv"), "w")
    log.write("step,seconds,tokens,lr,loss,text_loss,answer_loss,answer_acc\n")
    buckets = [(L, p) for L, p in BUCKETS if L <= a.max_len] or [(a.max_len, 1.0)]
    lens = np.array([L for L, _ in buckets])
    probs = np.array([p for _, p in buckets]) / sum(p for _, p in buckets)
    rng = np.random.default_rng(a.seed + 1)
    t0 = time.time()
    step, tokens = 0, 0
    acc = {"loss": [], "text": [], "ans": [], "acc": []}
    while True:
        elapsed = time.time() - t0
        if elapsed >= a.seconds or (a.max_steps and step >= a.max_steps):
            break
        frac = elapsed / a.seconds
        lr = a.lr * min(1.0, (step + 1) / a.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))
        for g in opt.param_groups:
            g["lr"] = lr
        L = int(rng.choice(lens, p=probs))
        B = max(1, a.batch_tokens // L)
        ids_np, w_np = sampler.batch(B, L, a.retrieval_prob)
        has_answer = w_np > 1
        has_text = bool((~has_answer.any(axis=1)).any())
        pin = device.type == "cuda"
        ids = torch.from_numpy(ids_np.astype(np.int64))
        w = torch.from_numpy(w_np)
        ids = (ids.pin_memory() if pin else ids).to(device, non_blocking=True)
        w = (w.pin_memory() if pin else w).to(device, non_blocking=True)
        x, y = ids[:, :-1], ids[:, 1:]
        with torch.autocast(device.type, torch.bfloat16, enabled=device.type == "cuda"):
            logits = model(x)
        ce = F.cross_entropy(logits.float().reshape(-1, cfg.vocab_size), y.reshape(-1), reduction="none").view(B, L)
        loss = (ce * w).sum() / w.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens += B * L
        with torch.no_grad():
            ans = w > 1
            text_rows = ~ans.any(dim=1)
            acc["loss"].append(loss.detach())
            if has_text:
                acc["text"].append(ce[text_rows].mean())
            if has_answer.any():
                acc["ans"].append(ce[ans].mean())
                acc["acc"].append((logits.argmax(-1)[ans] == y[ans]).float().mean())
        if step % a.log_every == 0:
            vals = {k: (torch.stack(v).mean().item() if v else float("nan")) for k, v in acc.items()}
            acc = {k: [] for k in acc}
            line = (f"{step},{time.time() - t0:.1f},{tokens},{lr:.3g},{vals['loss']:.4f},{vals['text']:.4f},"
                    f"{vals['ans']:.4f},{vals['acc']:.4f}")
            log.write(line + "\n")
            log.flush()
            print(f"[{a.arch}] {line}", flush=True)
    train_seconds = time.time() - t0
    log.close()
    model.eval()
    results = {}
    for ctx in [c for c in (1024, 2048, 4088) if c <= cfg.max_position - 8]:
        results[str(ctx)] = eval_retrieval(model, enc, ctx, a.eval_trials, 7, device)
    print(f"[{a.arch}] PyTorch retrieval (kv_eval.cc's format): {results}", flush=True)
    # held-out perplexity (first 400 stories, windows of 256 like pagoda eval perplexity's default)
    hs = corpus_stream(enc, held_out)[:16384]
    with torch.no_grad():
        nll, n = 0.0, 0
        for s in range(0, len(hs) - 1, 256):
            win = torch.tensor(hs[s:s + 257], device=device).long()[None]
            with torch.autocast(device.type, torch.bfloat16, enabled=device.type == "cuda"):
                lg = model(win[:, :-1])
            ce = F.cross_entropy(lg.float()[0], win[0, 1:], reduction="none")
            keep = win[0, 1:] != 0
            nll += ce[keep].sum().item()
            n += int(keep.sum())
    ppl = math.exp(nll / max(n, 1))
    sd = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}
    model.cpu()
    summary = {"arch": a.arch, "config": dataclasses.asdict(cfg), "params": n_params, "steps": step,
               "tokens": tokens, "train_seconds": round(train_seconds, 1), "retrieval_pytorch": results,
               "held_out_perplexity_w256_nonoverlapping": ppl, "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu"}
    name = "pagoda-tiny" if a.arch == "llama" else "pagoda-tiny-mla"
    if a.arch == "llama":
        rb = write_gguf_llama(os.path.join(a.out, name + ".gguf"), cfg, sd, tok_json, name, q8=True)
        summary["golden_gguf"] = write_golden(os.path.join(a.out, "golden-gguf.safetensors"), cfg, rb, tok)
    rb = write_hf_dir(os.path.join(a.out, "hf"), cfg, sd, tok_json)
    summary["golden_hf"] = write_golden(os.path.join(a.out, "golden-hf.safetensors"), cfg, rb, tok)
    # a sample
    m = TinyLM(cfg)
    m.load_state_dict(sd)
    m.eval()
    ids = tok.encode("Once upon a time").ids
    with torch.no_grad():
        for _ in range(60):
            ids.append(int(m(torch.tensor([ids]))[0, -1].argmax()))
    summary["sample"] = tok.decode(ids)
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps(summary, indent=2), flush=True)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tokenizer")
    t.add_argument("--corpora", required=True)
    t.add_argument("--out", required=True)
    t.add_argument("--vocab-size", type=int, default=4096)
    r = sub.add_parser("train")
    r.add_argument("--arch", choices=["llama", "mla"], required=True)
    r.add_argument("--corpora", required=True)
    r.add_argument("--tokenizer", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--seconds", type=float, default=400)
    r.add_argument("--max-steps", type=int, default=0)
    r.add_argument("--lr", type=float, default=2e-3)
    r.add_argument("--warmup", type=int, default=100)
    r.add_argument("--weight-decay", type=float, default=0.1)
    r.add_argument("--batch-tokens", type=int, default=96 * 1024)
    r.add_argument("--retrieval-prob", type=float, default=0.7)
    r.add_argument("--max-len", type=int, default=4096)
    r.add_argument("--eval-trials", type=int, default=24)
    r.add_argument("--log-every", type=int, default=20)
    r.add_argument("--seed", type=int, default=1)
    # The defaults made the committed models. A second run with --dropout 0.1 --tail filler
    # --story-filler-weight 0 --retrieval-prob 0.9 reached a held-out perplexity of 25 instead of
    # ~1000 but never learned to retrieve in 400 s (docs/models.md).
    r.add_argument("--dropout", type=float, default=0.0)
    r.add_argument("--tail", choices=["text", "filler"], default="text",
                   help="what fills a row after a retrieval document")
    r.add_argument("--story-filler-weight", type=float, default=1.0,
                   help="loss weight of story text used as retrieval filler")
    r.add_argument("--tiny", action="store_true", help="2 layers, short rows: a CPU smoke test")
    a = p.parse_args()
    {"tokenizer": cmd_tokenizer, "train": cmd_train}[a.cmd](a)


if __name__ == "__main__":
    main()
