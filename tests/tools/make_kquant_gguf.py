#!/usr/bin/env python3
"""Writes tests/data/kquants.gguf: Q4_K, Q5_K and Q6_K tensors with their expected floats.

For each type T in (q4_k, q5_k, q6_k) the file holds
  T            [rows, 256 * blocks_per_row] in GGML type T
  T.expected   the same shape in F32: gguf.quants.dequantize of T's bytes
so tests/kquants_test.cc can compare pagoda's dequantizer with the gguf package's
(an independent numpy implementation of ggml's layouts).

gguf.quants.quantize does not implement the K-quants (NotImplementedError in gguf 0.17),
so the blocks are packed here: the first half of the rows are real data quantized with a
simple min/max scheme (the script checks that gguf dequantizes them back close to the
input, which proves the packing matches ggml's layout), the second half are random bytes
(every bit pattern of scales, mins, low and high bits), with finite fp16 super-scales.

Usage: .venv/bin/python tests/tools/make_kquant_gguf.py [out.gguf]
Requires: pip install gguf numpy (deterministic: fixed seed).
"""
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT
from gguf.quants import dequantize

QK = 256
ROWS = 8           # 4 quantized from floats + 4 random
BLOCKS_PER_ROW = 2


def f16_bytes(x):
    return np.asarray(x, dtype=np.float16).reshape(-1, 1).view(np.uint8)


def pack_scale_min_k4(sc, m):
    """sc, m: [n, 8] ints in [0, 63] -> [n, 12] bytes (ggml's get_scale_min_k4 inverse)."""
    sc = sc.astype(np.uint8)
    m = m.astype(np.uint8)
    out = np.zeros((sc.shape[0], 12), dtype=np.uint8)
    for j in range(4):
        out[:, j] = (sc[:, j] & 63) | ((sc[:, j + 4] >> 4) << 6)
        out[:, j + 4] = (m[:, j] & 63) | ((m[:, j + 4] >> 4) << 6)
        out[:, j + 8] = (sc[:, j + 4] & 0xF) | ((m[:, j + 4] & 0xF) << 4)
    return out


def qk_min_max(x, qmax):
    """x: [n, 256] -> d, dmin [n], sc, m [n, 8], q [n, 256] in [0, qmax]."""
    sub = x.reshape(-1, 8, 32)
    lo = np.minimum(sub.min(axis=2), 0.0)
    hi = sub.max(axis=2)
    scale = (hi - lo) / qmax
    d = (scale.max(axis=1) / 63).astype(np.float16).astype(np.float32)
    dmin = ((-lo).max(axis=1) / 63).astype(np.float16).astype(np.float32)
    sc = np.clip(np.rint(scale / d[:, None]), 0, 63)
    m = np.clip(np.rint(-lo / dmin[:, None]), 0, 63)
    eff_d = np.where(d[:, None] * sc == 0, 1.0, d[:, None] * sc)
    q = np.clip(np.rint((sub + (dmin[:, None] * m)[:, :, None]) / eff_d[:, :, None]), 0, qmax)
    return d, dmin, sc, m, q.reshape(-1, QK).astype(np.uint8)


def pack_q4_k(d, dmin, sc, m, q):
    qs = np.zeros((q.shape[0], 128), dtype=np.uint8)
    for j in range(4):
        qs[:, 32 * j:32 * j + 32] = q[:, 64 * j:64 * j + 32] | (q[:, 64 * j + 32:64 * j + 64] << 4)
    return np.concatenate([f16_bytes(d), f16_bytes(dmin), pack_scale_min_k4(sc, m), qs], axis=1)


def pack_q5_k(d, dmin, sc, m, q):
    lo = q & 0xF
    qh = np.zeros((q.shape[0], 32), dtype=np.uint8)
    qs = np.zeros((q.shape[0], 128), dtype=np.uint8)
    for j in range(4):
        a, b = q[:, 64 * j:64 * j + 32], q[:, 64 * j + 32:64 * j + 64]
        qh |= ((a >> 4) & 1) << (2 * j)
        qh |= ((b >> 4) & 1) << (2 * j + 1)
        qs[:, 32 * j:32 * j + 32] = lo[:, 64 * j:64 * j + 32] | (lo[:, 64 * j + 32:64 * j + 64] << 4)
    return np.concatenate([f16_bytes(d), f16_bytes(dmin), pack_scale_min_k4(sc, m), qh, qs], axis=1)


def quantize_q6_k(x):
    sub = x.reshape(-1, 16, 16)
    amax = np.abs(sub).max(axis=2)
    scale = amax / 31
    d = (scale.max(axis=1) / 127).astype(np.float16).astype(np.float32)
    sc = np.clip(np.rint(scale / d[:, None]), -128, 127)
    eff = np.where(sc == 0, 1.0, d[:, None] * sc)
    q = (np.clip(np.rint(sub / eff[:, :, None]), -32, 31) + 32).reshape(-1, QK).astype(np.uint8)
    ql = np.zeros((q.shape[0], 128), dtype=np.uint8)
    qh = np.zeros((q.shape[0], 64), dtype=np.uint8)
    for h in range(2):
        v = [q[:, 128 * h + 32 * k:128 * h + 32 * k + 32] for k in range(4)]
        ql[:, 64 * h:64 * h + 32] = (v[0] & 0xF) | ((v[2] & 0xF) << 4)
        ql[:, 64 * h + 32:64 * h + 64] = (v[1] & 0xF) | ((v[3] & 0xF) << 4)
        qh[:, 32 * h:32 * h + 32] = (v[0] >> 4) | ((v[1] >> 4) << 2) | ((v[2] >> 4) << 4) | ((v[3] >> 4) << 6)
    return np.concatenate([ql, qh, sc.astype(np.int8).view(np.uint8), f16_bytes(d)], axis=1)


def random_blocks(rng, n, nbytes, scale_offsets):
    """Random bytes, with each fp16 super-scale at scale_offsets replaced by a finite value."""
    b = rng.integers(0, 256, size=(n, nbytes), dtype=np.uint8)
    for off in scale_offsets:
        b[:, off:off + 2] = f16_bytes(rng.uniform(-0.05, 0.05, size=n))
    return b


def make(qtype, rng):
    n_real = ROWS // 2 * BLOCKS_PER_ROW
    x = (rng.standard_normal((n_real, QK)) * rng.uniform(0.01, 2.0, size=(n_real, 1))).astype(np.float32)
    if qtype == QT.Q4_K:
        real = pack_q4_k(*qk_min_max(x, 15))
        rand = random_blocks(rng, n_real, 144, [0, 2])
    elif qtype == QT.Q5_K:
        real = pack_q5_k(*qk_min_max(x, 31))
        rand = random_blocks(rng, n_real, 176, [0, 2])
    else:
        real = quantize_q6_k(x)
        rand = random_blocks(rng, n_real, 210, [208])
    back = dequantize(real, qtype).reshape(-1, QK)
    err = np.abs(back - x).max(axis=1) / np.abs(x).max(axis=1)
    assert (err < 0.2).all(), f"{qtype.name}: packing disagrees with gguf's layout (rel err {err})"
    blocks = np.concatenate([real, rand]).reshape(ROWS, -1)
    expected = dequantize(blocks, qtype).astype(np.float32).reshape(ROWS, QK * BLOCKS_PER_ROW)
    assert np.isfinite(expected).all()
    return blocks, expected


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/kquants.gguf"
    rng = np.random.default_rng(20261129)
    w = gguf.GGUFWriter(out, "kquants-test")
    for qtype in (QT.Q4_K, QT.Q5_K, QT.Q6_K):
        blocks, expected = make(qtype, rng)
        name = qtype.name.lower()
        w.add_tensor(name, blocks, raw_dtype=qtype)
        w.add_tensor(name + ".expected", expected)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print("wrote", out)


if __name__ == "__main__":
    main()
