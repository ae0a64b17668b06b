"""KV channel equalization for pagoda-tiny: function-preserving rescalings that make the KV
cache easier to quantize (SmoothQuant's idea applied to what the cache stores).

  GQA keys:   k_i -> k_i * s_i and q_i -> q_i / s_i for both members of a RoPE pair (i, i + d/2),
              per KV head (the query heads of the group share s): q.k is unchanged, RoPE commutes
              with a scale shared by a pair. s_i = (rms q_i / rms k_i) ** alpha.
  GQA values: v_j -> v_j * s_j, o_proj column j -> / s_j.  s_j = (|o_proj[:, j]| / rms v_j) ** alpha.
  MLA latent: c_kv_j -> c_kv_j * s_j (kv_a_layernorm weight), kv_b_proj column j -> / s_j.
              s_j = (|kv_b_proj[:, j]| / rms c_kv_j) ** alpha.
The s are normalized to geometric mean 1. In exact arithmetic the model computes the same
function; the weights are then rounded again (bf16 / Q8_0) by the exporters.

  python3 tools/train/kv_equalize.py apply --hf DIR --arch llama --tokenizer T --out OUT
writes the equalized model (alpha_k = 1, keys only: what models/pagoda-tiny.gguf is) as GGUF,
HF directory and goldens.
  python3 tools/train/kv_equalize.py sim --hf DIR --arch llama|mla --tokenizer T   # GPU/CPU
simulates nvfp4 / int4 KV (per token, blocks as pagoda stores them) on pass-key retrieval at
2K with and without equalization.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as M  # noqa: E402
from data import FILLER, QUESTION, Encoder, load_tokenizer, retrieval_prompt  # noqa: E402
from model import GQA_CONFIG, MLA_CONFIG, TinyLM, rope_halves, rope_interleaved  # noqa: E402

# ---- activation statistics --------------------------------------------------------------
CAPTURE = {}


def _gqa_forward(self, x, cos, sin):
    c = self.c
    B, T, _ = x.shape
    q = self.q_proj(x).view(B, T, c.n_heads, c.head_dim).transpose(1, 2)
    k = self.k_proj(x).view(B, T, c.n_kv_heads, c.head_dim).transpose(1, 2)
    v = self.v_proj(x).view(B, T, c.n_kv_heads, c.head_dim).transpose(1, 2)
    q, k = rope_halves(q, cos, sin), rope_halves(k, cos, sin)
    if CAPTURE.get("on"):
        CAPTURE.setdefault(id(self), []).append((q.detach(), k.detach(), v.detach()))
    if CAPTURE.get("quant"):
        k, v = CAPTURE["quant"](k, "k_gqa"), CAPTURE["quant"](v, "v")
    rep = c.n_heads // c.n_kv_heads
    o = M.attend(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1), c.head_dim ** -0.5)
    return self.o_proj(o.transpose(1, 2).reshape(B, T, -1))


def _mla_forward(self, x, cos, sin):
    c = self.c
    B, T, _ = x.shape
    dq = c.qk_nope_head_dim + c.qk_rope_head_dim
    q = self.q_proj(x).view(B, T, c.n_heads, dq).transpose(1, 2)
    q_nope, q_pe = q.split([c.qk_nope_head_dim, c.qk_rope_head_dim], dim=-1)
    ckv, k_pe = self.kv_a_proj_with_mqa(x).split([c.kv_lora_rank, c.qk_rope_head_dim], dim=-1)
    ckv = self.kv_a_layernorm(ckv)
    if CAPTURE.get("on"):
        CAPTURE.setdefault(id(self), []).append(ckv.detach())
    if CAPTURE.get("quant"):
        ckv = CAPTURE["quant"](ckv, "latent")
    kv = self.kv_b_proj(ckv).view(B, T, c.n_heads, c.qk_nope_head_dim + c.v_head_dim).transpose(1, 2)
    k_nope, v = kv.split([c.qk_nope_head_dim, c.v_head_dim], dim=-1)
    k_pe = k_pe.view(B, 1, T, c.qk_rope_head_dim)
    q_pe, k_pe = rope_interleaved(q_pe, cos, sin), rope_interleaved(k_pe, cos, sin)
    q = torch.cat([q_nope, q_pe], dim=-1)
    k = torch.cat([k_nope, k_pe.expand(B, c.n_heads, T, c.qk_rope_head_dim)], dim=-1)
    o = M.attend(q, k, v, dq ** -0.5)
    return self.o_proj(o.transpose(1, 2).reshape(B, T, c.n_heads * c.v_head_dim))


M.GqaAttention.forward = _gqa_forward
M.MlaAttention.forward = _mla_forward


def calibration_ids(enc, rng):
    return retrieval_prompt(enc, enc(FILLER), enc(QUESTION), "12345", 2048, rng)


@torch.no_grad()
def stats(model, ids_list):
    CAPTURE.clear()
    CAPTURE["on"] = True
    for ids in ids_list:
        model(torch.tensor([list(ids)], device=next(model.parameters()).device))
    CAPTURE["on"] = False
    out = []
    for layer in model.layers:
        out.append(CAPTURE.get(id(layer.self_attn)))
    CAPTURE.clear()
    return out


def _gm1(s):
    return s / torch.exp(torch.log(s).mean(-1, keepdim=True))


@torch.no_grad()
def equalize(sd: dict, cfg, caps, alpha_k: float, alpha_v: float) -> dict:
    sd = {k: v.clone().float().cpu() for k, v in sd.items()}
    for l, cap in enumerate(caps):
        p = f"layers.{l}.self_attn."
        if cfg.arch == "llama":
            hd, kvh, rep = cfg.head_dim, cfg.n_kv_heads, cfg.n_heads // cfg.n_kv_heads
            q = torch.cat([c[0] for c in cap], 2).float().cpu()  # [1, H, T, hd]
            k = torch.cat([c[1] for c in cap], 2).float().cpu()
            v = torch.cat([c[2] for c in cap], 2).float().cpu()
            def pair_rms(x):  # [.., hd] -> [.., hd/2]
                r = x.pow(2).mean(dim=-2)
                return (r[..., : hd // 2] + r[..., hd // 2:]).div(2).sqrt()
            qr = pair_rms(q[0]).view(kvh, rep, hd // 2).amax(1)  # [kvh, hd/2]
            kr = pair_rms(k[0])  # [kvh, hd/2]
            if alpha_k:
                s = _gm1((qr / kr.clamp_min(1e-6)) ** alpha_k)
                s2 = torch.cat([s, s], -1)  # [kvh, hd]
                wk = sd[p + "k_proj.weight"].view(kvh, hd, -1)
                sd[p + "k_proj.weight"] = (wk * s2[..., None]).reshape(kvh * hd, -1)
                wq = sd[p + "q_proj.weight"].view(kvh, rep, hd, -1)
                sd[p + "q_proj.weight"] = (wq / s2[:, None, :, None]).reshape(kvh * rep * hd, -1)
            if alpha_v:
                vr = v[0].pow(2).mean(dim=-2).sqrt()  # [kvh, hd]
                wo = sd[p + "o_proj.weight"]  # [dim, H*hd]; head h reads kv head h // rep
                won = wo.view(wo.shape[0], kvh, rep, hd).norm(dim=(0, 2))  # [kvh, hd]
                s = _gm1((won / vr.clamp_min(1e-6)) ** alpha_v)
                wv = sd[p + "v_proj.weight"].view(kvh, hd, -1)
                sd[p + "v_proj.weight"] = (wv * s[..., None]).reshape(kvh * hd, -1)
                sd[p + "o_proj.weight"] = (wo.view(wo.shape[0], kvh, rep, hd) / s[None, :, None, :]).reshape(wo.shape)
        else:
            if alpha_k:
                ckv = torch.cat(cap, 1).float().cpu()[0]  # [T, r]
                cr = ckv.pow(2).mean(0).sqrt()
                wb = sd[p + "kv_b_proj.weight"]  # [H*(nope+v), r]
                s = _gm1((wb.norm(dim=0) / cr.clamp_min(1e-6)) ** alpha_k)
                sd[p + "kv_a_layernorm.weight"] = sd[p + "kv_a_layernorm.weight"] * s
                sd[p + "kv_b_proj.weight"] = wb / s[None, :]
    return sd


# ---- fake quantization (per token; blocks as pagoda's cache holds them) -------------------
E2M1 = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6])


def _e2m1(y):
    lv = E2M1.to(y.device)
    a = y.abs().clamp(max=6)
    return y.sign() * lv[(a[..., None] - lv).abs().argmin(-1)]


def _gguf_order(d):  # GGUF llama stores q/k rows as interleaved pairs: position -> HF dim
    return torch.tensor([j + (d // 2) * t for j in range(d // 2) for t in range(2)])


def fake_quant(kind: str):
    def q(x, what):
        d = x.shape[-1]
        perm = _gguf_order(d).to(x.device) if what == "k_gqa" else torch.arange(d, device=x.device)
        inv = torch.argsort(perm)
        g = x.float()[..., perm]
        if kind == "nvfp4":
            b = g.reshape(*g.shape[:-1], d // 16, 16)
            sc = (b.abs().amax(-1, keepdim=True) / 6).to(torch.float8_e4m3fn).float()
            out = torch.where(sc > 0, _e2m1(b / torch.where(sc > 0, sc, torch.ones_like(sc))) * sc, torch.zeros_like(b))
        elif kind == "int4":
            b = g.reshape(*g.shape[:-1], d // 32, 32)
            sc = (b.abs().amax(-1, keepdim=True) / 7).half().float()
            out = torch.where(sc > 0, torch.round(b / torch.where(sc > 0, sc, torch.ones_like(sc))).clamp(-7, 7) * sc, torch.zeros_like(b))
        else:
            raise ValueError(kind)
        return out.reshape(g.shape)[..., inv].to(x.dtype)
    return q


@torch.no_grad()
def retrieval(model, enc, quant, trials=48, ctx=2048, seed=11):
    CAPTURE["quant"] = quant
    rng = np.random.default_rng(seed)
    f, qq = enc(FILLER), enc(QUESTION)
    dev = next(model.parameters()).device
    ok = 0
    for _ in range(trials):
        key = str(10000 + int(rng.integers(0, 90000)))
        ids = retrieval_prompt(enc, f, qq, key, ctx, rng).tolist()
        out = []
        for _ in range(7):
            t = int(model(torch.tensor([ids], device=dev))[0, -1].argmax())
            out.append(t)
            ids.append(t)
        ok += key in enc.tok.decode(out)
    CAPTURE.pop("quant", None)
    return ok


def load_hf(path, cfg):
    from safetensors.torch import load_file
    return {k[len("model."):]: v.float() for k, v in load_file(os.path.join(path, "model.safetensors")).items()}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("cmd", choices=["sim", "apply"])
    p.add_argument("--alpha-k", type=float, default=1.0)
    p.add_argument("--out", help="apply: output directory (pagoda-tiny.gguf, golden, hf/)")
    p.add_argument("--hf", required=True)
    p.add_argument("--arch", choices=["llama", "mla"], required=True)
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--trials", type=int, default=48)
    p.add_argument("--ctx", type=int, default=2048)
    a = p.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cfg = GQA_CONFIG if a.arch == "llama" else MLA_CONFIG
    enc = Encoder(load_tokenizer(a.tokenizer))
    sd = load_hf(a.hf, cfg)
    m = TinyLM(cfg).to(dev).eval()
    m.load_state_dict(sd)
    rng = np.random.default_rng(3)
    caps = stats(m, [calibration_ids(enc, rng) for _ in range(2)])
    if a.cmd == "apply":
        from export import write_gguf_llama, write_golden, write_hf_dir
        eq = equalize(sd, cfg, caps, a.alpha_k, 0.0)
        os.makedirs(a.out, exist_ok=True)
        tok_json = open(a.tokenizer, encoding="utf-8").read()
        if a.arch == "llama":
            rb = write_gguf_llama(os.path.join(a.out, "pagoda-tiny.gguf"), cfg, eq, tok_json, "pagoda-tiny", q8=True)
            print(write_golden(os.path.join(a.out, "golden-gguf.safetensors"), cfg, rb, enc.tok))
        rb = write_hf_dir(os.path.join(a.out, "hf"), cfg, eq, tok_json)
        print(write_golden(os.path.join(a.out, "golden-hf.safetensors"), cfg, rb, enc.tok))
        return
    variants = {"none": (0, 0), "k0.5": (0.5, 0), "k0.5v0.5": (0.5, 0.5), "k1": (1.0, 0), "k1v0.5": (1.0, 0.5)}
    if a.arch == "mla":
        variants = {"none": (0, 0), "lat0.5": (0.5, 0), "lat1": (1.0, 0)}
    res = {"bf16": retrieval(m, enc, None, a.trials, a.ctx)}
    probe = torch.tensor([list(calibration_ids(enc, rng))], device=dev)
    with torch.no_grad():
        ref = m(probe)
    for name, (ak, av) in variants.items():
        m.load_state_dict(equalize(sd, cfg, caps, ak, av) if (ak or av) else sd)
        with torch.no_grad():
            res[f"{name} max|dlogit| f32"] = float((m(probe) - ref).abs().max())
        for kind in ("nvfp4", "int4"):
            res[f"{name} {kind}"] = retrieval(m, enc, fake_quant(kind), a.trials, a.ctx)
        print(a.arch, name, {k: v for k, v in res.items() if k.startswith(name) or k == "bf16"}, flush=True)
    print(json.dumps({a.arch: res}), flush=True)


if __name__ == "__main__":
    main()
