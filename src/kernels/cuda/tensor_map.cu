#include "kernels/cuda/tensor_map.h"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"

namespace pagoda::cuda {
namespace {

// The driver's encoder, found through the runtime (pagoda links the runtime statically and
// opens no driver library itself).
PFN_cuTensorMapEncodeTiled_v12000 Encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    PAGODA_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found));
    PAGODA_CHECK(found == cudaDriverEntryPointSuccess && f != nullptr) << "the CUDA driver has no cuTensorMapEncodeTiled";
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// A 2-D tiled map: `cols` x `rows` elements of `type`, rows `stride_bytes` apart, boxes of
// box_cols x box_rows; `what` names the tensor in the error.
CUtensorMap Encode2D(CUtensorMapDataType type, const void* base, int64_t cols, int64_t rows, int64_t stride_bytes,
                     int box_cols, int box_rows, CUtensorMapSwizzle swizzle, const char* what) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(stride_bytes)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = Encoder()(&map, type, 2, const_cast<void*>(base), dims, strides, box, element_strides,
                               CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  PAGODA_CHECK(r == CUDA_SUCCESS) << "cuTensorMapEncodeTiled failed (" << static_cast<int>(r) << ") for " << what << ": "
                                  << rows << " rows of " << cols << " elements, " << stride_bytes
                                  << " bytes apart, boxes of " << box_rows << " x " << box_cols;
  return map;
}

}  // namespace

CUtensorMap Bf16TensorMap(const void* base, int64_t rows, int64_t cols, int64_t row_stride, int box_rows) {
  return Encode2D(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, base, cols, rows, row_stride * 2, 64, box_rows,
                  CU_TENSOR_MAP_SWIZZLE_128B, "a bf16 matrix");
}

CUtensorMap PitchedRowsTensorMap(const void* base, int64_t rows, int64_t row_bytes, int64_t row_stride, int box_bytes,
                                 int box_rows) {
  PAGODA_CHECK(box_bytes % 16 == 0 && box_bytes <= 256) << "PitchedRowsTensorMap: boxes of " << box_bytes << " bytes";
  return Encode2D(CU_TENSOR_MAP_DATA_TYPE_UINT8, base, row_bytes, rows, row_stride, box_bytes, box_rows,
                  CU_TENSOR_MAP_SWIZZLE_NONE, "rows of bytes");
}

}  // namespace pagoda::cuda
