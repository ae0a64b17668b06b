#include "kernels/ref/matmul_ref.h"

#include <cmath>
#include <vector>

namespace pagoda {

void MatMulRef(const WeightMatrix& w, const float* x, int64_t num_tokens, double* y,
               double* abs_y) {
  std::vector<float> row(w.cols);
  for (int64_t r = 0; r < w.rows; ++r) {
    DequantizeRow(w.dtype, w.row(r), row.data(), w.cols);  // exact: every value fits f32
    for (int64_t t = 0; t < num_tokens; ++t) {
      const float* xt = x + t * w.cols;
      double sum = 0.0, abs_sum = 0.0;
      for (int64_t k = 0; k < w.cols; ++k) {
        const double p = static_cast<double>(row[k]) * static_cast<double>(xt[k]);
        sum += p;
        abs_sum += std::fabs(p);
      }
      y[t * w.rows + r] = sum;
      if (abs_y != nullptr) abs_y[t * w.rows + r] = abs_sum;
    }
  }
}

}  // namespace pagoda
