#include "kv/kv_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "core/fp4.h"
#include "core/fp8.h"

namespace pagoda {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t Groups(const KVArrayFormat& f) {
  return CeilDiv(f.head_dim, std::min(f.group, f.head_dim));
}
int64_t GroupSize(const KVArrayFormat& f) { return std::min(f.group, f.head_dim); }

float LoadF32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}
void StoreF32(uint8_t* p, float v) { std::memcpy(p, &v, 4); }
float LoadF16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return F16ToF32(h);
}
// Stores v as f16 (clamped to the finite range) and returns the stored value.
float StoreF16(uint8_t* p, float v) {
  const uint16_t h = F32ToF16(std::min(v, 65504.0f));
  std::memcpy(p, &h, 2);
  return F16ToF32(h);
}

float AbsMax(const float* x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

void QuantizeFp8(const KVArrayFormat& f, const float* x, uint8_t* row) {
  const int64_t d = f.head_dim;
  const bool e4m3 = f.quant == KVQuant::kFp8E4M3;
  const float max = e4m3 ? kFp8E4M3Max : kFp8E5M2Max;
  float scale = f.tensor_scale > 0.0f ? f.tensor_scale : AbsMax(x, d) / max;
  if (!(scale > 0.0f) || !std::isfinite(scale)) scale = scale > 0.0f ? 3.0e38f / max : 1.0f;
  const float inv = 1.0f / scale;
  for (int64_t i = 0; i < d; ++i)
    row[i] = e4m3 ? F32ToFp8E4M3(x[i] * inv) : F32ToFp8E5M2(x[i] * inv);
  StoreF32(row + d, scale);
}

// Symmetric integer codes in -qmax..qmax, one f16 scale per group.
void QuantizeInt(const KVArrayFormat& f, const float* x, uint8_t* row) {
  const int64_t d = f.head_dim, g = GroupSize(f);
  const bool int8 = f.quant == KVQuant::kInt8;
  const float qmax = int8 ? 127.0f : 7.0f;
  uint8_t* scales = row + (int8 ? d : CeilDiv(d, 2));
  if (!int8) std::memset(row, 0, CeilDiv(d, 2));
  for (int64_t j = 0; j * g < d; ++j) {
    const int64_t a = j * g, n = std::min(g, d - a);
    const float scale = StoreF16(scales + 2 * j, AbsMax(x + a, n) / qmax);
    const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    for (int64_t i = a; i < a + n; ++i) {
      const int q = static_cast<int>(std::clamp(std::nearbyint(x[i] * inv), -qmax, qmax));
      if (int8) {
        row[i] = static_cast<uint8_t>(static_cast<int8_t>(q));
      } else {
        row[i / 2] |= static_cast<uint8_t>((q + 8) << (4 * (i % 2)));
      }
    }
  }
}

void QuantizeNvfp4(const KVArrayFormat& f, const float* x, uint8_t* row) {
  const int64_t d = f.head_dim;
  const float global = f.tensor_scale > 0.0f ? f.tensor_scale : 1.0f;
  uint8_t* scales = row + CeilDiv(d, 2);
  std::memset(row, 0, CeilDiv(d, 2));
  for (int64_t j = 0; j * 16 < d; ++j) {
    const int64_t a = j * 16, n = std::min<int64_t>(16, d - a);
    scales[j] = F32ToFp8E4M3(AbsMax(x + a, n) / (kFp4E2M1Max * global));
    const float s = Fp8E4M3ToF32(scales[j]) * global;
    const float inv = s > 0.0f ? 1.0f / s : 0.0f;
    for (int64_t i = a; i < a + n; ++i) row[i / 2] |= F32ToFp4E2M1(x[i] * inv) << (4 * (i % 2));
  }
}

// Asymmetric 2-bit: codes 0..3 over [min, max] of n values at stride `stride`.
void Quantize2Bit(const float* x, int64_t n, int64_t stride, uint8_t* scale_min, uint8_t* codes,
                  int64_t code_stride, int64_t first) {
  float lo = INFINITY, hi = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    lo = std::min(lo, x[i * stride]);
    hi = std::max(hi, x[i * stride]);
  }
  const float scale = StoreF16(scale_min, (hi - lo) / 3.0f);
  const float mn = StoreF16(scale_min + 2, lo);
  const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const int q =
        static_cast<int>(std::clamp(std::nearbyint((x[i * stride] - mn) * inv), 0.0f, 3.0f));
    // Token i's row; `first` is the channel, i.e. the value index inside the row.
    uint8_t* c = codes + i * code_stride + first / 4;
    *c = static_cast<uint8_t>(*c | (q << (2 * (first % 4))));
  }
}

void QuantizeKivi2Row(const KVArrayFormat& f, const float* x, uint8_t* row) {
  const int64_t d = f.head_dim, g = GroupSize(f);
  uint8_t* meta = row + CeilDiv(d, 4);
  std::memset(row, 0, CeilDiv(d, 4));
  for (int64_t j = 0; j * g < d; ++j) {
    const int64_t a = j * g, n = std::min(g, d - a);
    // One group along the row: stride 1, codes of value a + i at bit position a + i.
    float lo = INFINITY, hi = -INFINITY;
    for (int64_t i = a; i < a + n; ++i) {
      lo = std::min(lo, x[i]);
      hi = std::max(hi, x[i]);
    }
    const float scale = StoreF16(meta + 4 * j, (hi - lo) / 3.0f);
    const float mn = StoreF16(meta + 4 * j + 2, lo);
    const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    for (int64_t i = a; i < a + n; ++i) {
      const int q = static_cast<int>(std::clamp(std::nearbyint((x[i] - mn) * inv), 0.0f, 3.0f));
      row[i / 4] |= static_cast<uint8_t>(q << (2 * (i % 4)));
    }
  }
}

int64_t KiviKeyHeaderBytes(const KVArrayFormat& f) { return f.num_heads * f.head_dim * 4; }

}  // namespace

int64_t KVRowBytes(const KVArrayFormat& f) {
  const int64_t d = f.head_dim;
  switch (f.quant) {
    case KVQuant::kNone: return d * DTypeBlockBytes(f.dtype);
    case KVQuant::kFp8E4M3:
    case KVQuant::kFp8E5M2: return d + 4;
    case KVQuant::kInt8: return d + 2 * Groups(f);
    case KVQuant::kInt4: return CeilDiv(d, 2) + 2 * Groups(f);
    case KVQuant::kNvfp4: return CeilDiv(d, 2) + CeilDiv(d, 16);
    case KVQuant::kKivi2: return f.per_channel ? CeilDiv(d, 4) : CeilDiv(d, 4) + 4 * Groups(f);
  }
  return 0;
}

namespace {
// Bytes before the heavy-row tail.
int64_t CodeBytes(const KVArrayFormat& f) {
  const int64_t rows = f.block_size * f.num_heads * KVRowBytes(f);
  if (f.quant != KVQuant::kKivi2 || !f.per_channel) return rows;
  return CeilDiv(KiviKeyHeaderBytes(f) + rows, f.block_size) * f.block_size;
}
int64_t HeavyBytes(const KVArrayFormat& f) {
  if (f.heavy_rows <= 0 || f.quant == KVQuant::kNone) return 0;
  const int64_t raw = 1 + f.heavy_rows + f.heavy_rows * f.num_heads * f.head_dim * 2;
  return CeilDiv(raw, f.block_size) * f.block_size;
}
// The bf16 heavy copy of (offset, head), or null.
const uint8_t* HeavyRow(const KVArrayFormat& f, const uint8_t* block, int64_t offset,
                        int64_t head) {
  if (HeavyBytes(f) == 0) return nullptr;
  const uint8_t* tail = block + CodeBytes(f);
  if (tail[0] == 0) return nullptr;
  for (int64_t i = 0; i < f.heavy_rows; ++i) {
    if (tail[1 + i] == offset) {
      return tail + 1 + f.heavy_rows + (i * f.num_heads + head) * f.head_dim * 2;
    }
  }
  return nullptr;
}
}  // namespace

int64_t KVBlockBytes(const KVArrayFormat& f) { return CodeBytes(f) + HeavyBytes(f); }

int64_t KVRowIndex(const KVArrayFormat& f, int64_t offset, int64_t head) {
  return f.quant == KVQuant::kNone ? offset * f.num_heads + head : head * f.block_size + offset;
}

void SetHeavyRows(const KVArrayFormat& f, uint8_t* block, const int64_t* offsets,
                  const float* rows) {
  if (HeavyBytes(f) == 0) return;
  uint8_t* tail = block + CodeBytes(f);
  tail[0] = 1;
  for (int64_t i = 0; i < f.heavy_rows; ++i) tail[1 + i] = static_cast<uint8_t>(offsets[i]);
  QuantizeRow(DType::kBF16, rows, tail + 1 + f.heavy_rows, f.heavy_rows * f.num_heads * f.head_dim);
}

void ClearHeavyRows(const KVArrayFormat& f, uint8_t* block) {
  if (HeavyBytes(f) > 0) block[CodeBytes(f)] = 0;
}

void QuantizeKVRow(const KVArrayFormat& f, const float* x, uint8_t* block, int64_t offset,
                   int64_t head) {
  PAGODA_DCHECK(!f.per_channel);
  uint8_t* row = block + KVRowIndex(f, offset, head) * KVRowBytes(f);
  switch (f.quant) {
    case KVQuant::kNone: QuantizeRow(f.dtype, x, row, f.head_dim); return;
    case KVQuant::kFp8E4M3:
    case KVQuant::kFp8E5M2: QuantizeFp8(f, x, row); return;
    case KVQuant::kInt8:
    case KVQuant::kInt4: QuantizeInt(f, x, row); return;
    case KVQuant::kNvfp4: QuantizeNvfp4(f, x, row); return;
    case KVQuant::kKivi2: QuantizeKivi2Row(f, x, row); return;
  }
}

void QuantizeKVBlock(const KVArrayFormat& f, const float* x, uint8_t* block) {
  const int64_t h = f.num_heads, d = f.head_dim;
  if (!f.per_channel) {
    for (int64_t t = 0; t < f.block_size; ++t) {
      for (int64_t k = 0; k < h; ++k) QuantizeKVRow(f, x + (t * h + k) * d, block, t, k);
    }
    return;
  }
  uint8_t* codes = block + KiviKeyHeaderBytes(f);
  const int64_t row_bytes = KVRowBytes(f);
  std::memset(codes, 0, CodeBytes(f) - KiviKeyHeaderBytes(f));
  for (int64_t k = 0; k < h; ++k) {
    for (int64_t c = 0; c < d; ++c) {
      // Channel c of head k over the block's tokens: stride h * d in x, one row per token (the
      // head's rows consecutive).
      Quantize2Bit(x + k * d + c, f.block_size, h * d, block + (k * d + c) * 4,
                   codes + KVRowIndex(f, 0, k) * row_bytes, row_bytes, c);
    }
  }
}

void DequantizeKVRow(const KVArrayFormat& f, const uint8_t* block, int64_t offset, int64_t head,
                     float* out) {
  const int64_t d = f.head_dim;
  if (const uint8_t* heavy = HeavyRow(f, block, offset, head)) {
    DequantizeRow(DType::kBF16, heavy, out, d);
    return;
  }
  if (f.per_channel) {
    const uint8_t* row = block + KiviKeyHeaderBytes(f) + KVRowIndex(f, offset, head) * KVRowBytes(f);
    const uint8_t* meta = block + head * d * 4;
    for (int64_t i = 0; i < d; ++i) {
      const int q = (row[i / 4] >> (2 * (i % 4))) & 3;
      out[i] = LoadF16(meta + 4 * i + 2) + q * LoadF16(meta + 4 * i);
    }
    return;
  }
  const uint8_t* row = block + KVRowIndex(f, offset, head) * KVRowBytes(f);
  switch (f.quant) {
    case KVQuant::kNone: DequantizeRow(f.dtype, row, out, d); return;
    case KVQuant::kFp8E4M3:
    case KVQuant::kFp8E5M2: {
      const float scale = LoadF32(row + d);
      if (f.quant == KVQuant::kFp8E4M3) {
        for (int64_t i = 0; i < d; ++i) out[i] = Fp8E4M3ToF32(row[i]) * scale;
      } else {
        for (int64_t i = 0; i < d; ++i) out[i] = Fp8E5M2ToF32(row[i]) * scale;
      }
      return;
    }
    case KVQuant::kInt8: {
      const int64_t g = GroupSize(f);
      for (int64_t i = 0; i < d; ++i) {
        out[i] = static_cast<int8_t>(row[i]) * LoadF16(row + d + 2 * (i / g));
      }
      return;
    }
    case KVQuant::kInt4: {
      const int64_t g = GroupSize(f);
      const uint8_t* scales = row + CeilDiv(d, 2);
      for (int64_t i = 0; i < d; ++i) {
        const int q = ((row[i / 2] >> (4 * (i % 2))) & 15) - 8;
        out[i] = q * LoadF16(scales + 2 * (i / g));
      }
      return;
    }
    case KVQuant::kNvfp4: {
      const float global = f.tensor_scale > 0.0f ? f.tensor_scale : 1.0f;
      const uint8_t* scales = row + CeilDiv(d, 2);
      for (int64_t i = 0; i < d; ++i) {
        const float s = Fp8E4M3ToF32(scales[i / 16]) * global;
        out[i] = Fp4E2M1ToF32((row[i / 2] >> (4 * (i % 2))) & 15) * s;
      }
      return;
    }
    case KVQuant::kKivi2: {
      const int64_t g = GroupSize(f);
      const uint8_t* meta = row + CeilDiv(d, 4);
      for (int64_t i = 0; i < d; ++i) {
        const int q = (row[i / 4] >> (2 * (i % 4))) & 3;
        out[i] = LoadF16(meta + 4 * (i / g) + 2) + q * LoadF16(meta + 4 * (i / g));
      }
      return;
    }
  }
}

}  // namespace pagoda
