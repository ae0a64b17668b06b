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

}  // namespace

CUtensorMap Bf16TensorMap(const void* base, int64_t rows, int64_t cols, int64_t row_stride, int box_rows) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(row_stride) * 2};
  const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = Encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims, strides, box,
                               element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  PAGODA_CHECK(r == CUDA_SUCCESS) << "cuTensorMapEncodeTiled failed (" << static_cast<int>(r) << ") for a " << rows
                                  << " x " << cols << " bf16 matrix, row stride " << row_stride << ", boxes of "
                                  << box_rows << " rows";
  return map;
}

CUtensorMap PitchedRowsTensorMap(const void* base, int64_t rows, int64_t row_bytes, int64_t row_stride, int box_bytes,
                                 int box_rows) {
  PAGODA_CHECK(box_bytes % 16 == 0 && box_bytes <= 256) << "PitchedRowsTensorMap: boxes of " << box_bytes << " bytes";
  CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(row_bytes), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(row_stride)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_bytes), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = Encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides, box,
                               element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  PAGODA_CHECK(r == CUDA_SUCCESS) << "cuTensorMapEncodeTiled failed (" << static_cast<int>(r) << ") for " << rows
                                  << " rows of " << row_bytes << " bytes, " << row_stride << " apart, boxes of "
                                  << box_rows << " x " << box_bytes << " bytes";
  return map;
}

}  // namespace pagoda::cuda
