"""Export of pagoda-tiny: GGUF (llama architecture, Q8_0 or F32) and Hugging Face directories
(LlamaForCausalLM / DeepseekV2ForCausalLM, bf16 safetensors), plus golden files that
tests/pagoda_tiny_test.cc checks pagoda against (the layout of ../shared's golden.safetensors).
"""
from __future__ import annotations

import json
import os
import struct

import numpy as np
import torch

from data import CHAT_TEMPLATE, EOT
from model import Config, TinyLM

# ---- GGUF ------------------------------------------------------------------------------
GGUF_UINT32, GGUF_INT32, GGUF_FLOAT32, GGUF_BOOL, GGUF_STRING, GGUF_ARRAY = 4, 5, 6, 7, 8, 9
GGML_F32, GGML_Q8_0 = 0, 8
ALIGN = 32


def _str(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _kv(key: str, value) -> bytes:
    out = _str(key)
    if isinstance(value, bool):
        return out + struct.pack("<IB", GGUF_BOOL, int(value))
    if isinstance(value, int):
        return out + struct.pack("<Ii", GGUF_INT32, value) if value < 0 else out + struct.pack("<II", GGUF_UINT32, value)
    if isinstance(value, float):
        return out + struct.pack("<If", GGUF_FLOAT32, value)
    if isinstance(value, str):
        return out + struct.pack("<I", GGUF_STRING) + _str(value)
    if isinstance(value, list):
        if all(isinstance(v, str) for v in value):
            return out + struct.pack("<IIQ", GGUF_ARRAY, GGUF_STRING, len(value)) + b"".join(_str(v) for v in value)
        return out + struct.pack("<IIQ", GGUF_ARRAY, GGUF_INT32, len(value)) + np.asarray(value, "<i4").tobytes()
    raise TypeError(f"{key}: {type(value)}")


def quantize_q8_0(w: np.ndarray):
    """llama.cpp's quantize_row_q8_0_ref: per 32 values d = amax / 127 (stored f16),
    q = round(x / d). Returns (bytes, the dequantized f32 matrix pagoda will read)."""
    rows, cols = w.shape
    assert cols % 32 == 0
    x = w.astype(np.float32).reshape(rows, cols // 32, 32)
    amax = np.abs(x).max(axis=-1)
    d = amax / 127.0
    inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1), 0.0).astype(np.float32)
    q = np.round(x * inv[..., None]).astype(np.int8)  # numpy rounds halves to even; ties are rare
    d16 = d.astype(np.float16)
    blocks = np.zeros((rows, cols // 32), dtype=[("d", "<f2"), ("qs", "i1", 32)])
    blocks["d"] = d16
    blocks["qs"] = q
    deq = (q.astype(np.float32) * d16.astype(np.float32)[..., None]).reshape(rows, cols)
    return blocks.tobytes(), deq


def permute_rope_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """convert_hf_to_gguf.py's LlamaModel.permute: HF rotates halves, GGUF llama pairs."""
    rows = w.shape[0]
    return w.reshape(n_heads, 2, rows // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf_llama(path: str, c: Config, sd: dict, tokenizer_json: str, name: str, q8: bool = True):
    """Writes the GQA model as a GGUF (llama architecture, tied embeddings). Returns the state
    dict as pagoda reads it back (q8: dequantized weights, q/k in HF row order)."""
    assert c.arch == "llama"
    tj = json.loads(tokenizer_json)
    vocab = tj["model"]["vocab"]
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    merges = [" ".join(m) for m in tj["model"]["merges"]]
    types = [3 if t == EOT else 1 for t in tokens]
    kv = {
        "general.architecture": "llama",
        "general.name": name,
        "general.license": "MIT",
        "general.file_type": 7 if q8 else 0,
        "general.alignment": ALIGN,
        "llama.context_length": c.max_position,
        "llama.embedding_length": c.dim,
        "llama.block_count": c.n_layers,
        "llama.feed_forward_length": c.ffn_dim,
        "llama.attention.head_count": c.n_heads,
        "llama.attention.head_count_kv": c.n_kv_heads,
        "llama.attention.key_length": c.head_dim,
        "llama.attention.value_length": c.head_dim,
        "llama.attention.layer_norm_rms_epsilon": float(c.norm_eps),
        "llama.rope.freq_base": float(c.rope_theta),
        "llama.rope.dimension_count": c.head_dim,
        "llama.vocab_size": c.vocab_size,
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "gpt-2",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.bos_token_id": 0,
        "tokenizer.ggml.eos_token_id": 0,
        "tokenizer.ggml.add_bos_token": True,
        "tokenizer.ggml.add_eos_token": False,
        "tokenizer.chat_template": CHAT_TEMPLATE,
    }
    hf = {k: v.detach().float().cpu().numpy() for k, v in sd.items()}
    readback = {}
    tensors = []  # (name, ggml type, shape [rows, cols], bytes)

    def add(gname, hname, permute_heads=0):
        w = hf[hname]
        wq = permute_rope_rows(w, permute_heads) if permute_heads else w
        if w.ndim == 2 and q8:
            data, deq = quantize_q8_0(wq)
            tensors.append((gname, GGML_Q8_0, wq.shape, data))
            if permute_heads:  # undo the permutation for the HF-order readback
                inv = np.empty_like(deq)
                n = w.shape[0]
                idx = permute_rope_rows(np.arange(n), permute_heads)
                inv[idx] = deq
                deq = inv
            readback[hname] = deq
        else:
            tensors.append((gname, GGML_F32, wq.shape, np.ascontiguousarray(wq, "<f4").tobytes()))
            readback[hname] = w.astype(np.float32)

    add("token_embd.weight", "embed_tokens.weight")
    add("output_norm.weight", "norm.weight")
    for l in range(c.n_layers):
        p, g = f"layers.{l}.", f"blk.{l}."
        add(g + "attn_norm.weight", p + "input_layernorm.weight")
        add(g + "ffn_norm.weight", p + "post_attention_layernorm.weight")
        add(g + "attn_q.weight", p + "self_attn.q_proj.weight", c.n_heads)
        add(g + "attn_k.weight", p + "self_attn.k_proj.weight", c.n_kv_heads)
        add(g + "attn_v.weight", p + "self_attn.v_proj.weight")
        add(g + "attn_output.weight", p + "self_attn.o_proj.weight")
        add(g + "ffn_gate.weight", p + "mlp.gate_proj.weight")
        add(g + "ffn_up.weight", p + "mlp.up_proj.weight")
        add(g + "ffn_down.weight", p + "mlp.down_proj.weight")

    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv))
    head += b"".join(_kv(k, v) for k, v in kv.items())
    offset = 0
    infos = b""
    for gname, t, shape, data in tensors:
        dims = list(reversed(shape))  # ne[0] is the row length
        infos += _str(gname) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        infos += struct.pack("<IQ", t, offset)
        offset += (len(data) + ALIGN - 1) // ALIGN * ALIGN
    with open(path, "wb") as f:
        f.write(head + infos)
        f.write(b"\0" * ((-f.tell()) % ALIGN))
        for _, _, _, data in tensors:
            f.write(data)
            f.write(b"\0" * ((-len(data)) % ALIGN))
    return {k: torch.from_numpy(v) for k, v in readback.items()}


# ---- Hugging Face directories ----------------------------------------------------------
def hf_state_dict(sd: dict) -> dict:
    out = {}
    for k, v in sd.items():
        out["model." + k] = v.detach().to(torch.bfloat16).cpu().contiguous()
    return out


def write_hf_dir(path: str, c: Config, sd: dict, tokenizer_json: str):
    """config.json, model.safetensors (bf16), tokenizer files, generation_config.json.
    Returns the state dict as read back (bf16 rounded, as float32)."""
    from safetensors.torch import save_file

    os.makedirs(path, exist_ok=True)
    common = {
        "bos_token_id": 0, "eos_token_id": 0, "pad_token_id": None, "dtype": "bfloat16",
        "hidden_act": "silu", "hidden_size": c.dim, "intermediate_size": c.ffn_dim,
        "max_position_embeddings": c.max_position, "num_attention_heads": c.n_heads,
        "num_hidden_layers": c.n_layers, "rms_norm_eps": c.norm_eps, "tie_word_embeddings": True,
        "vocab_size": c.vocab_size, "attention_bias": False, "attention_dropout": 0.0,
        "mlp_bias": False, "initializer_range": 0.02, "use_cache": True,
        "rope_parameters": {"rope_theta": c.rope_theta, "rope_type": "default"},
        "rope_theta": c.rope_theta,
    }
    if c.arch == "llama":
        cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
               "num_key_value_heads": c.n_kv_heads, "head_dim": c.head_dim, **common}
    else:
        cfg = {"architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
               "num_key_value_heads": c.n_heads, "kv_lora_rank": c.kv_lora_rank, "q_lora_rank": None,
               "qk_nope_head_dim": c.qk_nope_head_dim, "qk_rope_head_dim": c.qk_rope_head_dim,
               "qk_head_dim": c.qk_nope_head_dim + c.qk_rope_head_dim,
               "head_dim": c.qk_rope_head_dim, "v_head_dim": c.v_head_dim,
               # dense MLP in every layer (as ../shared's deepseek-v2-mla fixture)
               "first_k_dense_replace": c.n_layers, "n_routed_experts": 4, "n_shared_experts": 1,
               "moe_intermediate_size": c.ffn_dim, "num_experts_per_tok": 2, "n_group": 1,
               "topk_group": 1, "topk_method": "greedy", "norm_topk_prob": False,
               "routed_scaling_factor": 1.0, **common}
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(path, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 0, "eos_token_id": 0}, f, indent=2)
    with open(os.path.join(path, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(tokenizer_json)
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": EOT, "eos_token": EOT,
                   "model_max_length": c.max_position, "clean_up_tokenization_spaces": False,
                   "chat_template": CHAT_TEMPLATE}, f, indent=2)
    with open(os.path.join(path, "chat_template.jinja"), "w") as f:
        f.write(CHAT_TEMPLATE)
    hsd = hf_state_dict(sd)
    save_file(hsd, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    return {k[len("model."):]: v.float() for k, v in hsd.items()}


# ---- golden ----------------------------------------------------------------------------
GOLDEN_TEXTS = {
    "a": "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.",
    "b": ("The pass key is 48213. Remember it. 48213 is the pass key. The grass is green. The sky is "
          "blue. The sun is yellow. Here we go. There and back again. The grass is green. The sky is "
          "blue. What is the pass key? The pass key is"),
}


@torch.no_grad()
def write_golden(path: str, c: Config, readback: dict, tok, steps: int = 16):
    """golden.safetensors in ../shared's layout (input_ids.s with BOS, logits_last.s,
    topk_ids.s / topk_logits.s, greedy.s, greedy_margin.s), computed in float64 on the CPU
    from the weights exactly as exported (Q8_0 dequantized / bf16 rounded)."""
    from safetensors.numpy import save_file

    m = TinyLM(c).double().eval()
    m.load_state_dict({k: v.double() for k, v in readback.items()})
    out, meta = {}, {}
    for s, text in GOLDEN_TEXTS.items():
        ids = tok.encode(text).ids  # with BOS (post-processor)
        x = torch.tensor([ids])
        logits = m(x)[0]
        top = logits.topk(8, dim=-1)
        out[f"input_ids.{s}"] = np.array(ids, np.int64)
        out[f"logits_last.{s}"] = logits[-1].float().numpy()
        out[f"topk_ids.{s}"] = top.indices.numpy().astype(np.int64)
        out[f"topk_logits.{s}"] = top.values.float().numpy()
        seq, greedy, margins = list(ids), [], []
        for _ in range(steps):
            lg = m(torch.tensor([seq]))[0, -1]
            t2 = lg.topk(2)
            greedy.append(int(t2.indices[0]))
            margins.append(float(t2.values[0] - t2.values[1]))
            seq.append(greedy[-1])
        out[f"greedy.{s}"] = np.array(greedy, np.int64)
        out[f"greedy_margin.{s}"] = np.array(margins, np.float32)
        meta[s] = {"text": text, "greedy_text": tok.decode(greedy)}
    save_file(out, path)
    with open(path.replace(".safetensors", ".json"), "w") as f:
        json.dump(meta, f, indent=2)
    return meta
