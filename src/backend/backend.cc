#include "backend/backend.h"

#include "core/error.h"

namespace pagoda {

void Backend::AllReduce(const TensorView& x) {
  if (comm_ == nullptr || comm_->size() == 1 || x.rows == 0 || x.cols == 0) return;
  PAGODA_CHECK(x.dtype == DType::kF32) << "AllReduce: f32 only";
  if (x.contiguous()) {
    comm_->AllReduceSum(x.f32(), x.rows * x.cols);
    return;
  }
  for (int64_t r = 0; r < x.rows; ++r) comm_->AllReduceSum(x.f32() + r * x.row_stride, x.cols);
}

}  // namespace pagoda
