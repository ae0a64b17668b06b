#include "kernels/cpu/matmul.h"

#include <vector>

#include "core/parallel.h"

namespace pagoda {

void MatMul(const WeightMatrix& w, const float* x, int64_t num_tokens, float* y) {
  ParallelFor(w.rows, 16, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(w.cols);
    for (int64_t r = r0; r < r1; ++r) {
      DequantizeRow(w.dtype, w.row(r), row.data(), w.cols);
      for (int64_t t = 0; t < num_tokens; ++t) {
        const float* xt = x + t * w.cols;
        // 8 partial sums, combined in a fixed order: independent of the batch.
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int64_t k = 0;
        for (; k + 8 <= w.cols; k += 8) {
          for (int j = 0; j < 8; ++j) acc[j] += row[k + j] * xt[k + j];
        }
        for (; k < w.cols; ++k) acc[k & 7] += row[k] * xt[k];
        y[t * w.rows + r] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
      }
    }
  });
}

}  // namespace pagoda
