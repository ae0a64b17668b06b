// Weights repacked at load time into panels of rows, for the CPU MatMul's fast path.
//
// A row-major (ggml) weight puts the k values of one output next to each other, so a
// register tile has to sum each output's lanes horizontally at the end and reloads the
// same weights for every few tokens. A panel stores `panel_rows` consecutive rows
// interleaved along k instead, so one vector load gives one k of many rows ("rows in
// lanes"): the kernel broadcasts an activation, does one FMA (or vpdpbusd) per vector
// of rows and token, and never reduces across lanes. Each output is then a single
// accumulator walked over k in order, the same for GEMV and GEMM (batch invariance).
//
// Formats (p = panel_rows, rows padded to a multiple of p with zero rows):
//   kFloat (F32, F16, BF16 weights; element type unchanged, values exact):
//     panel = [cols][p] elements. BF16 pairs rows: at each k the p values are ordered
//     row 0, row p/2, row 1, row p/2+1, ... so that a 32-bit lane holds rows i and
//     i + p/2 and one shift / one AND widen a whole vector of each half.
//     F32 and F16 keep row order.
//   kQ8 (Q8_0 weights; codes and scales exact): panel = [num_blocks] blocks, one after the
//     other, so a panel is one sequential stream; a block = for each group of 16 rows the codes
//     [8 quads][16 rows][4 bytes], then the p scales f16. Each code is stored as u8 = q + 128
//     (vpdpbusd multiplies unsigned by signed). One 32-bit lane = 4 consecutive k of one row.
//     With p = 32 a block is 2 x 512 + 64 = 1088 bytes, 17 cache lines.
//   kQ4 (Q4_0 weights; nibbles and scales exact): the same with [4 quads] of nibbles per group,
//     quad u holding the row's block bytes 4u..4u+3 unchanged (ggml: low nibble = k, high
//     nibble = k + 16). A lane's low nibbles are k = 4u..4u+3, its high ones k = 16+4u..16+4u+3;
//     weights are nibble - 8. With p = 32 a block is 2 x 256 + 64 = 576 bytes.
// Panels follow each other; panel i starts at data + i * panel_bytes (64-byte aligned).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/matmul.h"
#include "kernels/params/matmul_params.h"

namespace pagoda {

struct PackedWeights {
  enum class Format { kFloat, kQ8, kQ4 };
  Format format = Format::kFloat;
  DType dtype = DType::kF32;  // the source dtype (F32/F16/BF16: kFloat; Q8_0: kQ8; Q4_0: kQ4)
  int isa_level = 0;          // matmul_internal::IsaLevel the panels are shaped for
  int64_t rows = 0, cols = 0;
  int64_t panel_rows = 0;
  int64_t num_panels = 0;
  int64_t panel_bytes = 0;
  bool pairs16 = false;          // rows of two parts alternate 16 at a time (StackOrder::kPairs16)
  const void* source = nullptr;  // the WeightMatrix::data it was packed from
  std::shared_ptr<uint8_t> storage;

  const uint8_t* panel(int64_t i) const { return storage.get() + i * panel_bytes; }
  int64_t num_blocks() const { return cols / 32; }
  // kQ8 / kQ4: code bytes of one block of one row; bytes of one block of a panel; block b of
  // panel i (the codes of rows 16g.. 16g+15 at + g * 16 * block_code_bytes()); its scales.
  int64_t block_code_bytes() const { return format == Format::kQ4 ? 16 : 32; }
  int64_t q_block_bytes() const { return panel_rows * (block_code_bytes() + 2); }
  const uint8_t* q_block(int64_t i, int64_t b) const { return panel(i) + b * q_block_bytes(); }
  const uint16_t* q_block_scales(int64_t i, int64_t b) const {
    return reinterpret_cast<const uint16_t*>(q_block(i, b) + panel_rows * block_code_bytes());
  }
  int64_t bytes() const { return num_panels * panel_bytes; }
};

// The panels the MatMul level in use (matmul.h) runs fastest, or null when it has no
// packed kernel for w.dtype (or PAGODA_PACK_WEIGHTS=0; PAGODA_PACK_WEIGHTS=force packs every
// F32/F16/BF16/Q8_0/Q4_0 weight, the portable packed kernels running where the level has none). Packing reads every weight
// once; the result does not alias w.
std::shared_ptr<const PackedWeights> PackWeightsForCpu(const WeightMatrix& w);

// Several matrices with the same dtype and cols stacked along rows into ONE packed matrix
// (fused projections: q|k|v, gate|up), or null as PackWeightsForCpu. Its `source` is its
// own panels: PackedOnlyView makes the matching view.
// kPairs16 (two parts of equal rows, a multiple of 16; else null): the parts' rows alternate
// 16 at a time, row 32i + j = part 0 row 16i + j and row 32i + 16 + j = part 1 row 16i + j,
// so every 32 rows (one panel at the AVX-512 level) hold matching gate and up rows
// (MatMulEpilogue::kSiluMulPairs).
std::shared_ptr<const PackedWeights> PackStackedForCpu(const std::vector<WeightMatrix>& parts,
                                                       StackOrder order = StackOrder::kConcat);

// A WeightMatrix that exists only as panels (a stacked pack): MatMul uses the panels; it has
// no row-major data (data points at the panels, which only identifies them).
CpuWeight PackedOnlyView(const PackedWeights& p);

// Packs w into panels of `panel_rows` rows (a multiple of 16). REQUIRES: w.dtype in
// {F32, F16, BF16, Q8_0, Q4_0}. For tests and benchmarks that choose the shape.
std::shared_ptr<const PackedWeights> PackWeights(const WeightMatrix& w, int64_t panel_rows,
                                                 int isa_level);
std::shared_ptr<const PackedWeights> PackStackedWeights(const std::vector<WeightMatrix>& parts,
                                                        int64_t panel_rows, int isa_level,
                                                        StackOrder order = StackOrder::kConcat);

// w with its packed form attached (MatMul then uses the panels).
inline CpuWeight WithPacked(const WeightMatrix& w, const PackedWeights* p) { return CpuWeight(w, p); }

}  // namespace pagoda
