#include "kernels/cpu/packed_weights.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"
#include "kernels/cpu/matmul_internal.h"

namespace pagoda {

using matmul_internal::IsaLevel;

namespace {

int64_t RoundUp(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// The rows of one matrix, or of several stacked (same dtype and cols), concatenated or two
// parts alternating 16 rows at a time (StackOrder::kPairs16).
struct RowSource {
  DType dtype = DType::kF32;
  int64_t rows = 0, cols = 0;
  std::vector<WeightMatrix> parts;
  bool pairs16 = false;

  const uint8_t* row(int64_t r) const {
    if (pairs16) return r < rows ? parts[(r / 16) % 2].row(r / 32 * 16 + r % 16) : nullptr;
    for (const WeightMatrix& p : parts) {
      if (r < p.rows) return p.row(r);
      r -= p.rows;
    }
    return nullptr;
  }
};

void PackFloatPanel(const RowSource& w, int64_t panel_rows, int64_t p, uint8_t* dst) {
  const int64_t es = w.dtype == DType::kF32 ? 4 : 2;
  const int64_t half = panel_rows / 2;
  for (int64_t j = 0; j < panel_rows; ++j) {
    const int64_t r = p * panel_rows + j;
    // BF16: row j goes to slot 2j (j < half) or 2(j - half) + 1.
    const int64_t slot = w.dtype == DType::kBF16 ? (j < half ? 2 * j : 2 * (j - half) + 1) : j;
    for (int64_t k = 0; k < w.cols; ++k) {
      uint8_t* d = dst + (k * panel_rows + slot) * es;
      if (r < w.rows) {
        std::memcpy(d, w.row(r) + k * es, es);
      } else {
        std::memset(d, 0, es);
      }
    }
  }
}

// Q8_0 / Q4_0 panels (packed_weights.h): per block the code bytes of each group of 16 rows
// (Q8_0: 32 codes stored as q + 128, i.e. XOR 0x80; Q4_0: 16 nibble bytes unchanged), 4 bytes
// per row and quad, then the panel's f16 scales. Padding rows get scale 0 and the codes of
// weight 0.
void PackIntPanel(const RowSource& w, int64_t panel_rows, int64_t p, uint8_t* dst) {
  const bool q4 = w.dtype == DType::kQ4_0;
  const int64_t code_bytes = q4 ? 16 : 32, block_bytes = code_bytes + 2, quads = code_bytes / 4;
  const uint8_t flip = q4 ? 0x00 : 0x80, zero = q4 ? 0x88 : 0x00;  // zero: weight 0 as stored
  const int64_t nb = w.cols / 32;
  const int64_t panel_block_bytes = panel_rows * (code_bytes + 2);
  for (int64_t j = 0; j < panel_rows; ++j) {
    const int64_t r = p * panel_rows + j;
    const int64_t group = j / 16, lane = j % 16;
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* block_dst = dst + b * panel_block_bytes;
      uint8_t* codes = block_dst + group * 16 * code_bytes;
      uint16_t* scales = reinterpret_cast<uint16_t*>(block_dst + panel_rows * code_bytes);
      uint16_t d = 0;
      uint8_t c[32];
      std::memset(c, zero, sizeof(c));
      if (r < w.rows) {
        const uint8_t* block = w.row(r) + b * block_bytes;
        std::memcpy(&d, block, 2);
        std::memcpy(c, block + 2, code_bytes);
      }
      scales[j] = d;
      for (int64_t quad = 0; quad < quads; ++quad) {
        for (int64_t i = 0; i < 4; ++i) codes[(quad * 16 + lane) * 4 + i] = c[quad * 4 + i] ^ flip;
      }
    }
  }
}

// PAGODA_PACK_WEIGHTS: "0" off; unset / "1" the dtypes the level has packed kernels for;
// "force" every packable dtype (the portable packed kernels run where the level has none:
// tests use it to run the AVX-512 machines' model path on any CPU).
enum class PackMode { kOff, kAuto, kForce };
PackMode GetPackMode() {
  static const PackMode mode = [] {
    const char* env = std::getenv("PAGODA_PACK_WEIGHTS");
    if (env == nullptr) return PackMode::kAuto;
    const std::string v(env);
    return v == "0" ? PackMode::kOff : v == "force" ? PackMode::kForce : PackMode::kAuto;
  }();
  return mode;
}

}  // namespace

std::shared_ptr<const PackedWeights> PackWeights(const WeightMatrix& w, int64_t panel_rows,
                                                 int isa_level) {
  return PackStackedWeights({w}, panel_rows, isa_level);
}

std::shared_ptr<const PackedWeights> PackStackedWeights(const std::vector<WeightMatrix>& parts,
                                                        int64_t panel_rows, int isa_level, StackOrder order) {
  PAGODA_CHECK(panel_rows > 0 && panel_rows % 16 == 0) << "panel_rows " << panel_rows;
  PAGODA_CHECK(!parts.empty()) << "PackStackedWeights: no matrices";
  RowSource w;
  w.dtype = parts[0].dtype;
  w.cols = parts[0].cols;
  w.parts = parts;
  w.pairs16 = order == StackOrder::kPairs16;
  for (const WeightMatrix& p : parts) {
    PAGODA_CHECK(p.dtype == w.dtype && p.cols == w.cols) << "PackStackedWeights: mixed shapes";
    w.rows += p.rows;
  }
  PAGODA_CHECK(!w.pairs16 || (parts.size() == 2 && parts[0].rows == parts[1].rows && parts[0].rows % 16 == 0))
      << "PackStackedWeights: kPairs16 needs two parts of equal rows, a multiple of 16";
  auto pw = std::make_shared<PackedWeights>();
  pw->dtype = w.dtype;
  pw->isa_level = isa_level;
  pw->rows = w.rows;
  pw->cols = w.cols;
  pw->panel_rows = panel_rows;
  pw->pairs16 = w.pairs16;
  pw->num_panels = RoundUp(w.rows, panel_rows) / panel_rows;
  pw->source = parts.size() == 1 ? parts[0].data : nullptr;  // stacked: the panels, below
  switch (w.dtype) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
      pw->format = PackedWeights::Format::kFloat;
      pw->panel_bytes = RoundUp(w.cols * panel_rows * (w.dtype == DType::kF32 ? 4 : 2), 64);
      break;
    case DType::kQ8_0:
      if (w.cols % 32 != 0) ThrowInvalidArgument("PackWeights: q8_0 cols not a multiple of 32");
      pw->format = PackedWeights::Format::kQ8;
      pw->panel_bytes = RoundUp(w.cols / 32 * panel_rows * (32 + 2), 64);
      break;
    case DType::kQ4_0:
      if (w.cols % 32 != 0) ThrowInvalidArgument("PackWeights: q4_0 cols not a multiple of 32");
      pw->format = PackedWeights::Format::kQ4;
      pw->panel_bytes = RoundUp(w.cols / 32 * panel_rows * (16 + 2), 64);
      break;
    default:
      ThrowUnsupported("PackWeights: no packed layout for " + std::string(DTypeName(w.dtype)));
  }
  const int64_t total = pw->num_panels * pw->panel_bytes;
  uint8_t* mem = static_cast<uint8_t*>(std::aligned_alloc(64, total > 0 ? total : 64));
  if (mem == nullptr) ThrowError(ErrorCode::kResourceExhausted, "PackWeights: cannot allocate " + std::to_string(total) + " bytes");
  pw->storage.reset(mem, [](uint8_t* m) { std::free(m); });
  if (pw->source == nullptr) pw->source = mem;
  ParallelFor(pw->num_panels, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      uint8_t* dst = mem + p * pw->panel_bytes;
      switch (pw->format) {
        case PackedWeights::Format::kFloat: PackFloatPanel(w, panel_rows, p, dst); break;
        case PackedWeights::Format::kQ8:
        case PackedWeights::Format::kQ4: PackIntPanel(w, panel_rows, p, dst); break;
      }
    }
  });
  return pw;
}

std::shared_ptr<const PackedWeights> PackWeightsForCpu(const WeightMatrix& w) {
  return PackStackedForCpu({w});
}

std::shared_ptr<const PackedWeights> PackStackedForCpu(const std::vector<WeightMatrix>& parts, StackOrder order) {
  const PackMode mode = GetPackMode();
  if (mode == PackMode::kOff || parts.empty()) return nullptr;
  if (order == StackOrder::kPairs16 &&
      (parts.size() != 2 || parts[0].rows != parts[1].rows || parts[0].rows % 16 != 0)) {
    return nullptr;
  }
  WeightMatrix w = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    if (parts[i].dtype != w.dtype || parts[i].cols != w.cols) return nullptr;
    w.rows += parts[i].rows;
  }
  if (w.rows <= 0 || w.cols <= 0) return nullptr;
  const IsaLevel level = matmul_internal::DefaultIsaLevel();
  const bool is_float = w.dtype == DType::kF32 || w.dtype == DType::kF16 || w.dtype == DType::kBF16;
  const bool is_int = (w.dtype == DType::kQ8_0 || w.dtype == DType::kQ4_0) && w.cols % 32 == 0;
  if (level == IsaLevel::kAvx512 && (is_float || is_int)) {
    return PackStackedWeights(parts, 32, static_cast<int>(level), order);
  }
  if (level == IsaLevel::kAvx2 && (is_float || is_int)) {
    return PackStackedWeights(parts, is_int ? 32 : 16, static_cast<int>(level), order);
  }
  if (mode == PackMode::kForce && (is_float || is_int)) {
    const int64_t rows = is_int ? 32 : level == IsaLevel::kAvx2 ? 16 : 32;
    return PackStackedWeights(parts, rows, static_cast<int>(level), order);
  }
  return nullptr;
}

CpuWeight PackedOnlyView(const PackedWeights& p) {
  WeightMatrix w;
  w.dtype = p.dtype;
  w.rows = p.rows;
  w.cols = p.cols;
  w.row_bytes = DTypeRowBytes(p.dtype, p.cols);
  w.data = p.source;  // the panels themselves: identifies them, never read as rows
  return CpuWeight(w, &p);
}

}  // namespace pagoda
