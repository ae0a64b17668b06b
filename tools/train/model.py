"""pagoda-tiny models in PyTorch: a Llama-style GQA model and a DeepSeek-V2-style MLA model.

Both follow the Hugging Face transformers implementations exactly (LlamaForCausalLM and
DeepseekV2ForCausalLM), so the exported directories load there and in pagoda unchanged:
  llama  RMSNorm (computed in float32), RoPE rotating halves (rotate_half), SwiGLU MLP,
         tied embeddings; the GGUF export permutes q/k rows to llama.cpp's interleaved pairs.
  mla    q = W_q x (no q LoRA); [c_kv | k_pe] = W_kv_a x; c_kv = RMSNorm(c_kv);
         [k_nope | v] per head = W_kv_b c_kv; RoPE on q_pe and the shared k_pe rotating
         interleaved pairs (DeepSeek-V2's complex form); softmax scale 1/sqrt(nope + rope).
"""
from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclasses.dataclass
class Config:
    arch: str = "llama"  # "llama" (GQA) or "mla" (DeepSeek-V2 style)
    vocab_size: int = 4096
    dim: int = 256
    n_layers: int = 6
    n_heads: int = 8
    n_kv_heads: int = 2  # llama only
    head_dim: int = 64  # llama only
    ffn_dim: int = 768
    max_position: int = 4096
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    # MLA
    kv_lora_rank: int = 128
    qk_nope_head_dim: int = 32
    qk_rope_head_dim: int = 32
    v_head_dim: int = 64
    dropout: float = 0.0  # residual dropout while training (not part of the exported model)


GQA_CONFIG = Config(arch="llama")
MLA_CONFIG = Config(arch="mla")


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # transformers: normalize in float32, cast back, then scale.
    dtype = x.dtype
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(dtype)


class RMSNorm(nn.Module):
    def __init__(self, n: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)


def rope_tables(dim: int, theta: float, positions: torch.Tensor, dtype=torch.float32):
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64, device=positions.device) / dim))
    freqs = positions.to(torch.float64)[:, None] * inv_freq[None, :]  # [T, dim/2]
    return freqs.cos().to(dtype), freqs.sin().to(dtype)


def rope_halves(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x [B, H, T, d]; pairs (i, i + d/2) rotate by frequency i.
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    c, s = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def rope_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x [B, H, T, d]; pairs (2i, 2i + 1) rotate by frequency i.
    x1, x2 = x[..., 0::2], x[..., 1::2]
    c, s = cos.to(x.dtype), sin.to(x.dtype)
    return torch.stack([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).flatten(-2)


class Mlp(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.gate_proj = nn.Linear(c.dim, c.ffn_dim, bias=False)
        self.up_proj = nn.Linear(c.dim, c.ffn_dim, bias=False)
        self.down_proj = nn.Linear(c.ffn_dim, c.dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def attend(q, k, v, scale):
    # Causal attention; flash/efficient kernels on the GPU, plain math elsewhere (float64 golden).
    if q.dtype == torch.float64 or not q.is_cuda:
        T = q.shape[-2]
        s = (q @ k.transpose(-1, -2)) * scale
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        s = s.masked_fill(~mask, float("-inf"))
        return torch.softmax(s, dim=-1) @ v
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)


class GqaAttention(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        self.q_proj = nn.Linear(c.dim, c.n_heads * c.head_dim, bias=False)
        self.k_proj = nn.Linear(c.dim, c.n_kv_heads * c.head_dim, bias=False)
        self.v_proj = nn.Linear(c.dim, c.n_kv_heads * c.head_dim, bias=False)
        self.o_proj = nn.Linear(c.n_heads * c.head_dim, c.dim, bias=False)

    def forward(self, x, cos, sin):
        c = self.c
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, c.n_heads, c.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, c.n_kv_heads, c.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, c.n_kv_heads, c.head_dim).transpose(1, 2)
        q, k = rope_halves(q, cos, sin), rope_halves(k, cos, sin)
        rep = c.n_heads // c.n_kv_heads
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        o = attend(q, k, v, c.head_dim ** -0.5)
        return self.o_proj(o.transpose(1, 2).reshape(B, T, c.n_heads * c.head_dim))


class MlaAttention(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        dq = c.qk_nope_head_dim + c.qk_rope_head_dim
        self.q_proj = nn.Linear(c.dim, c.n_heads * dq, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(c.dim, c.kv_lora_rank + c.qk_rope_head_dim, bias=False)
        self.kv_a_layernorm = RMSNorm(c.kv_lora_rank, c.norm_eps)
        self.kv_b_proj = nn.Linear(c.kv_lora_rank, c.n_heads * (c.qk_nope_head_dim + c.v_head_dim), bias=False)
        self.o_proj = nn.Linear(c.n_heads * c.v_head_dim, c.dim, bias=False)

    def forward(self, x, cos, sin):
        c = self.c
        B, T, _ = x.shape
        dq = c.qk_nope_head_dim + c.qk_rope_head_dim
        q = self.q_proj(x).view(B, T, c.n_heads, dq).transpose(1, 2)
        q_nope, q_pe = q.split([c.qk_nope_head_dim, c.qk_rope_head_dim], dim=-1)
        ckv, k_pe = self.kv_a_proj_with_mqa(x).split([c.kv_lora_rank, c.qk_rope_head_dim], dim=-1)
        kv = self.kv_b_proj(self.kv_a_layernorm(ckv))
        kv = kv.view(B, T, c.n_heads, c.qk_nope_head_dim + c.v_head_dim).transpose(1, 2)
        k_nope, v = kv.split([c.qk_nope_head_dim, c.v_head_dim], dim=-1)
        k_pe = k_pe.view(B, 1, T, c.qk_rope_head_dim)
        q_pe, k_pe = rope_interleaved(q_pe, cos, sin), rope_interleaved(k_pe, cos, sin)
        q = torch.cat([q_nope, q_pe], dim=-1)
        k = torch.cat([k_nope, k_pe.expand(B, c.n_heads, T, c.qk_rope_head_dim)], dim=-1)
        if v.shape[-1] != dq and q.is_cuda and q.dtype != torch.float64:
            # flash attention wants one head dim: pad v, then drop the padding.
            o = attend(q, k, F.pad(v, (0, dq - v.shape[-1])), dq ** -0.5)[..., : c.v_head_dim]
        else:
            o = attend(q, k, v, dq ** -0.5)
        return self.o_proj(o.transpose(1, 2).reshape(B, T, c.n_heads * c.v_head_dim))


class Layer(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.input_layernorm = RMSNorm(c.dim, c.norm_eps)
        self.self_attn = GqaAttention(c) if c.arch == "llama" else MlaAttention(c)
        self.post_attention_layernorm = RMSNorm(c.dim, c.norm_eps)
        self.mlp = Mlp(c)
        self.drop = nn.Dropout(c.dropout)

    def forward(self, x, cos, sin):
        x = x + self.drop(self.self_attn(self.input_layernorm(x), cos, sin))
        return x + self.drop(self.mlp(self.post_attention_layernorm(x)))


class TinyLM(nn.Module):
    """Parameter names follow transformers (model.* prefix dropped; tied lm_head)."""

    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c.vocab_size, c.dim)
        self.layers = nn.ModuleList(Layer(c) for _ in range(c.n_layers))
        self.norm = RMSNorm(c.dim, c.norm_eps)
        self.rope_dim = c.head_dim if c.arch == "llama" else c.qk_rope_head_dim
        self.reset_parameters()

    def reset_parameters(self):
        std = 0.02
        for name, p in self.named_parameters():
            if p.dim() == 2:
                s = std / math.sqrt(2 * self.c.n_layers) if name.endswith(("o_proj.weight", "down_proj.weight")) else std
                nn.init.normal_(p, 0.0, s)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        T = ids.shape[1]
        pos = torch.arange(T, device=ids.device)
        dtype = torch.float64 if self.embed_tokens.weight.dtype == torch.float64 else torch.float32
        cos, sin = rope_tables(self.rope_dim, self.c.rope_theta, pos, dtype)
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, cos, sin)
        x = self.norm(x)
        return x @ self.embed_tokens.weight.t().to(x.dtype)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())
