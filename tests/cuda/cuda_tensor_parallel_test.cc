// Tensor parallelism across GPUs: qwen2-bias read on the host and sharded over the GPUs this
// machine has (2 at most, NCCL between them) gives the single-GPU model's greedy tokens; on a
// one-GPU machine the same path runs at size 1 (NCCL initialized, the shard the whole model)
// and must give the single-GPU bits.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "backend/cuda_backend.h"
#include "model/model.h"
#include "model/tensor_parallel_model.h"
#include "parallel/cuda/nccl_group.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/test_util.h"

namespace pagoda {
namespace {

TEST(CudaTensorParallelTest, ShardsOverTheGpusGiveTheSingleGpuTokens) {
  CudaBackend* gpu = testing::Gpu();
  ASSERT_NE(gpu, nullptr);
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
  const int size = std::min(devices, 2);
  const std::string path = testing::Fixture("models/hf/qwen2-bias");
  LoadOptions on_gpu;
  on_gpu.backend = gpu;
  auto single = LoadModel(path, on_gpu);
  auto tp = TensorParallelModel::Make(LoadModel(path), std::make_unique<NcclGroup>(size),
                                      [](int rank) { return std::make_unique<CudaBackend>(rank); });
  ASSERT_EQ(tp->size(), size);
  const std::vector<int32_t> prompt = {3, 17, 29, 5, 11, 42, 7};
  const auto want = testing::GreedyAlone(*single, prompt, 16, DType::kBF16, 64);
  const auto got = testing::GreedyAlone(*tp, prompt, 16, DType::kBF16, 64);
  EXPECT_EQ(got, want) << "over " << size << " GPU(s)";
  std::printf("[measured] tensor parallel over %d GPU(s): %zu greedy tokens equal the single GPU's\n", size,
              got.size());
}

}  // namespace
}  // namespace pagoda
