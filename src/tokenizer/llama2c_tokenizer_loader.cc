// llama2.c tok*.bin: int32 max_token_length, then per token: float32 score,
// int32 length, `length` bytes (spaces stored as ' ', bytes as "<0xXX>").
// BOS = 1, EOS = 2, <unk> = 0, as run.c assumes.
#include <cstring>

#include "core/error.h"
#include "io/mapped_file.h"
#include "tokenizer/spm_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

constexpr int32_t kMaxPieceBytes = 1 << 16;

std::string SpaceToMeta(std::string_view piece) {
  std::string out;
  for (char c : piece) {
    if (c == ' ') {
      out.append("\xE2\x96\x81");
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace

std::unique_ptr<Tokenizer> LoadLlama2cTokenizer(const std::string& path, int64_t vocab_size) {
  MappedFile file(path);
  const uint8_t* data = file.data();
  const size_t size = file.size();
  size_t pos = 0;
  auto read_i32 = [&](const char* what, int64_t index) {
    if (size - pos < 4) {
      (ErrorBuilder(ErrorCode::kCorruptData)
       << path << ": truncated at byte " << pos << " reading the " << what << " of token " << index
       << " (a llama2.c tok*.bin needs " << vocab_size << " tokens)")
          .Raise();
    }
    int32_t v;
    std::memcpy(&v, data + pos, 4);
    pos += 4;
    return v;
  };
  if (size < 4) {
    (ErrorBuilder(ErrorCode::kCorruptData)
     << path << ": " << size << " bytes is too short for a llama2.c tokenizer header")
        .Raise();
  }
  int32_t max_token_length = read_i32("header", -1);
  PAGODA_ENSURE(max_token_length > 0 && max_token_length <= kMaxPieceBytes, ErrorCode::kCorruptData,
                path << ": max_token_length " << max_token_length
                     << " is implausible; is this a llama2.c tok*.bin?");
  PAGODA_ENSURE(vocab_size <= (int64_t{1} << 24), ErrorCode::kInvalidArgument,
                path << ": vocab size " << vocab_size << " is implausible");

  SpmVocab vocab;
  vocab.source = path;
  vocab.llama2c_mode = true;
  // vocab_size <= 0: read tokens until the end of the file.
  for (int64_t i = 0; vocab_size > 0 ? i < vocab_size : pos < size; ++i) {
    float score;
    int32_t bits = read_i32("score", i);
    std::memcpy(&score, &bits, 4);
    int32_t len = read_i32("length", i);
    if (len < 0 || len > kMaxPieceBytes || static_cast<size_t>(len) > size - pos) {
      (ErrorBuilder(ErrorCode::kCorruptData)
       << path << ": token " << i << " at byte " << pos - 4 << " claims " << len << " bytes but "
       << size - pos << " remain")
          .Raise();
    }
    std::string_view piece(reinterpret_cast<const char*>(data + pos), len);
    pos += len;
    TokenType type = TokenType::kNormal;
    if (i == 0) {
      type = TokenType::kUnknown;
    } else if (i == 1 || i == 2) {
      type = TokenType::kControl;
    } else if (piece.size() == 6 && piece.substr(0, 3) == "<0x" && piece[5] == '>') {
      type = TokenType::kByte;
    }
    vocab.pieces.push_back(SpaceToMeta(piece));
    vocab.scores.push_back(score);
    vocab.types.push_back(type);
  }
  PAGODA_ENSURE(
      vocab.pieces.size() >= 3, ErrorCode::kCorruptData,
      path << ": only " << vocab.pieces.size() << " tokens; llama2.c needs <unk>, <s>, </s>");
  vocab.unk_id = 0;
  vocab.bos_id = 1;
  vocab.eos_ids = {2};
  vocab.add_bos = true;
  vocab.add_space_prefix = true;
  return std::make_unique<SpmTokenizer>(std::move(vocab));
}

}  // namespace pagoda
