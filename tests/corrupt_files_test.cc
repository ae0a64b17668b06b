// Truncated and bit-flipped model files give a pagoda::Error, never a crash (CI runs
// this under AddressSanitizer and UBSan).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "core/error.h"
#include "engine/generator.h"
#include "model/model.h"
#include "tests/test_util.h"

namespace pagoda {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class TempFile {
 public:
  TempFile(const std::string& suffix, const std::string& bytes) {
    path_ = ::testing::TempDir() + "pagoda_corrupt_" + std::to_string(::getpid()) + "_" +
            std::to_string(counter_++) + suffix;
    std::ofstream out(path_, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  std::string path_;
};

enum class Outcome { kLoaded, kError };

// Loads the file and, if that works, runs a few decode steps: either may throw
// pagoda::Error; anything else (a crash, another exception) fails the test.
Outcome TryLoadAndRun(const std::string& path) {
  try {
    auto model = LoadModel(path);
    GeneratorOptions options;
    options.max_model_len = 8;
    options.kv_dtype = DType::kF32;
    Generator gen(*model, options);
    GenerateRequest req;
    req.prompt = {1};
    req.sampling.temperature = 0.0;
    req.max_tokens = 4;
    gen.Generate(req);
    return Outcome::kLoaded;
  } catch (const Error& e) {
    EXPECT_FALSE(std::string(e.what()).empty());
    return Outcome::kError;
  }
}

void TruncationsFail(const std::string& fixture, const std::string& suffix) {
  const std::string bytes = ReadAll(testing::Fixture(fixture));
  ASSERT_FALSE(bytes.empty());
  // Every cut in the first 4 KiB (the headers) and a spread of cuts through the data.
  std::vector<size_t> cuts;
  for (size_t n = 0; n < std::min<size_t>(bytes.size(), 4096); n += 7) cuts.push_back(n);
  for (int i = 1; i < 64; ++i) cuts.push_back(bytes.size() * i / 64);
  cuts.push_back(bytes.size() - 1);
  for (size_t n : cuts) {
    TempFile f(suffix, bytes.substr(0, n));
    EXPECT_EQ(TryLoadAndRun(f.path()), Outcome::kError) << fixture << " cut at " << n;
  }
}

void BitFlipsNeverCrash(const std::string& fixture, const std::string& suffix, size_t header_bytes) {
  const std::string bytes = ReadAll(testing::Fixture(fixture));
  std::mt19937_64 rng(1234);
  int errors = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::string b = bytes;
    // Mostly in the header/metadata region, where a flip changes the structure.
    const size_t limit = trial % 4 == 0 ? b.size() : std::min(header_bytes, b.size());
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < flips; ++k) {
      const size_t at = rng() % limit;
      b[at] = static_cast<char>(b[at] ^ (1u << (rng() % 8)));
    }
    TempFile f(suffix, b);
    if (TryLoadAndRun(f.path()) == Outcome::kError) ++errors;
  }
  // Most header flips are caught; the rest change only values (which is allowed).
  EXPECT_GT(errors, 0);
}

TEST(CorruptFilesTest, TruncatedGgufIsAnError) { TruncationsFail("models/stories260K/stories260K.gguf", ".gguf"); }
TEST(CorruptFilesTest, TruncatedLlama2cIsAnError) { TruncationsFail("models/stories260K/stories260K.bin", ".bin"); }
TEST(CorruptFilesTest, TruncatedQ8GgufIsAnError) { TruncationsFail("models/hf/llama-gqa/llama-gqa.q8_0.gguf", ".gguf"); }

TEST(CorruptFilesTest, BitFlippedGgufNeverCrashes) {
  BitFlipsNeverCrash("models/stories260K/stories260K.gguf", ".gguf", 24 * 1024);
}
TEST(CorruptFilesTest, BitFlippedLlama2cNeverCrashes) {
  BitFlipsNeverCrash("models/stories260K/stories260K.bin", ".bin", 28);
}

TEST(CorruptFilesTest, MissingFileNamesThePath) {
  try {
    LoadModel("/nonexistent/model.gguf");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/model.gguf"), std::string::npos) << e.what();
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  }
}

TEST(CorruptFilesTest, NotAModelFileIsAnError) {
  TempFile f(".gguf", "this is not a model file at all, just some text");
  EXPECT_EQ(TryLoadAndRun(f.path()), Outcome::kError);
}

}  // namespace
}  // namespace pagoda
