// A warmed-up step allocates no memory: the model's activations come from its workspace
// (sized by ReserveWorkspace), the backend's step plan and the kernels' scratch keep their
// capacity, and the parallel loops take non-owning callables. Checked with a counting
// operator new in this test binary (every thread's allocations count while a step runs) and
// with the workspace's own counter, for Llama (GQA, biases, sliding window, packed and
// quantized weights), DeepSeek MLA and DeepSeek MoE.
//
// Its own executable (pagoda_allocation_tests): replacing operator new / delete is global to a
// binary. Every form is replaced (throwing, nothrow, aligned, sized), so memory is always
// released by the family that allocated it, under AddressSanitizer too.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>
#include <numeric>
#include <string>
#include <vector>

#include "backend/step_description.h"
#include "model/model.h"
#include "tests/test_util.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocations{0};
}  // namespace

namespace {
void* Allocate(std::size_t n, std::size_t align) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (n == 0) n = 1;
  if (align <= alignof(std::max_align_t)) return std::malloc(n);
  return std::aligned_alloc(align, (n + align - 1) / align * align);
}
void* AllocateOrThrow(std::size_t n, std::size_t align) {
  if (void* p = Allocate(n, align)) return p;
  throw std::bad_alloc();
}
constexpr std::size_t kPlain = alignof(std::max_align_t);
}  // namespace

void* operator new(std::size_t n) { return AllocateOrThrow(n, kPlain); }
void* operator new[](std::size_t n) { return AllocateOrThrow(n, kPlain); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return Allocate(n, kPlain); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return Allocate(n, kPlain); }
void* operator new(std::size_t n, std::align_val_t a) { return AllocateOrThrow(n, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return AllocateOrThrow(n, static_cast<std::size_t>(a)); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return Allocate(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return Allocate(n, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }

namespace pagoda {
namespace {

struct Case {
  std::string name;
  std::string path;  // fixture-relative, or dummy:...
  std::string dtype = "bf16";
};

class StepAllocationTest : public ::testing::TestWithParam<Case> {};

// Prefill `prompt` tokens and decode one, on a fresh cache through a reversed block table,
// into `logits`.
void PrefillAndDecode(Model& model, KVCache& cache, StepBuilder& builder, const std::vector<int32_t>& tokens,
                      int64_t prompt, const std::vector<int32_t>& table, std::vector<float>& logits) {
  ForwardSequence(model, cache, builder, tokens, 0, prompt, table, LogitRows::kLast, logits.data());
  ForwardSequence(model, cache, builder, tokens, prompt, 1, table, LogitRows::kLast, logits.data());
}

TEST_P(StepAllocationTest, AWarmedUpStepAllocatesNothing) {
  const Case& c = GetParam();
  LoadOptions o;
  o.dtype = c.dtype;
  std::unique_ptr<Model> model =
      LoadModel(c.path.rfind("dummy:", 0) == 0 ? c.path : testing::Fixture(c.path), o);
  const int64_t prompt = 40, bs = 16, vocab = model->spec().vocab_size;
  const int64_t num_blocks = (prompt + 1 + bs - 1) / bs;
  std::unique_ptr<KVCache> cache = model->backend().CreateKVCache(model->KVShapeFor(num_blocks, bs, DType::kBF16));
  std::vector<int32_t> table(num_blocks);
  std::iota(table.rbegin(), table.rend(), 0);
  std::vector<int32_t> tokens(prompt + 1);
  for (int64_t i = 0; i < prompt + 1; ++i) tokens[i] = static_cast<int32_t>((i * 7919 + 3) % (vocab - 3) + 3);
  std::vector<float> logits(vocab), warm(vocab);
  StepBuilder builder;
  model->ReserveWorkspace(prompt, 1);
  const int64_t reserved = model->workspace_allocations();

  // Kernel scratch is kept per thread and grows the first time a thread runs an item of a
  // shape, and which thread takes which item is decided at run time: a few warm-up rounds let
  // every thread meet every shape. Then the same steps again, counted.
  for (int round = 0; round < 4; ++round) PrefillAndDecode(*model, *cache, builder, tokens, prompt, table, warm);
  int64_t fewest = -1;
  for (int round = 0; round < 3 && fewest != 0; ++round) {
    g_allocations = 0;
    g_counting = true;
    PrefillAndDecode(*model, *cache, builder, tokens, prompt, table, logits);
    g_counting = false;
    fewest = fewest < 0 ? g_allocations.load() : std::min<int64_t>(fewest, g_allocations.load());
  }

  EXPECT_EQ(fewest, 0) << c.name << ": heap allocations in every warmed-up prefill and decode";
  EXPECT_EQ(model->workspace_allocations(), reserved) << c.name << ": the workspace grew past its reservation";
  EXPECT_EQ(logits, warm) << c.name << ": the repeated steps gave other logits";
}

INSTANTIATE_TEST_SUITE_P(
    Models, StepAllocationTest,
    ::testing::Values(Case{"llama_tiny_bf16", "dummy:llama-tiny", "bf16"},
                      Case{"llama_tiny_q8_0", "dummy:llama-tiny", "q8_0"},
                      Case{"llama_tiny_f32", "dummy:llama-tiny", "f32"},
                      Case{"qwen2_bias", "models/hf/qwen2-bias"},
                      Case{"mistral_swa", "models/hf/mistral-swa"},
                      Case{"llama_gqa_q8_0_gguf", "models/hf/llama-gqa/llama-gqa.q8_0.gguf"},
                      Case{"deepseek_v2_mla", "models/hf/deepseek-v2-mla"},
                      Case{"deepseek_v3_moe", "models/hf/deepseek-v3-moe"}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace pagoda
