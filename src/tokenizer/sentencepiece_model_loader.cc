// tokenizer.model (sentencepiece's ModelProto) -> SpmTokenizer.
//
//   ModelProto      1: repeated SentencePiece {1: piece, 2: score (float), 3: type}
//                   2: TrainerSpec {3: model_type (2 = BPE), 35: byte_fallback,
//                                   40: unk_id, 41: bos_id, 42: eos_id}
//                   3: NormalizerSpec {1: name, 2: precompiled_charsmap,
//                                      3: add_dummy_prefix, 4: remove_extra_whitespaces}
// Only BPE models are read; the normalizer must be the identity (Llama, Mistral),
// with remove_extra_whitespaces applied for ASCII spaces.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/mapped_file.h"
#include "tokenizer/protobuf_reader.h"
#include "tokenizer/spm_tokenizer.h"
#include "tokenizer/tokenizer_loaders.h"

namespace pagoda {
namespace {

struct TrainerSpec {
  int64_t model_type = 1;  // UNIGRAM
  int64_t unk_id = 0;
  int64_t bos_id = 1;
  int64_t eos_id = 2;
};

struct NormalizerSpec {
  std::string name;
  bool has_charsmap = false;
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
};

void ExpectWire(const ProtobufField& f, uint32_t wire, const std::string& path, const char* what) {
  PAGODA_ENSURE(f.wire_type == wire, ErrorCode::kCorruptData,
                path << ": " << what << " has wire type " << f.wire_type << ", expected " << wire
                     << " (byte " << f.offset << ")");
}

}  // namespace

std::unique_ptr<Tokenizer> LoadSentencePieceModel(const std::string& path,
                                                  const nlohmann::json* tokenizer_config) {
  MappedFile file(path);
  std::string_view data(reinterpret_cast<const char*>(file.data()), file.size());
  ProtobufReader model(data, path);
  SpmVocab vocab;
  vocab.source = path;
  TrainerSpec trainer;
  NormalizerSpec normalizer;
  ProtobufField f;
  while (model.Next(&f)) {
    if (f.number == 1) {
      ProtobufReader piece = model.Sub(f, "piece " + std::to_string(vocab.pieces.size()));
      std::string text;
      float score = 0.0f;
      int64_t type = 1;
      ProtobufField p;
      while (piece.Next(&p)) {
        if (p.number == 1) {
          ExpectWire(p, 2, path, "SentencePiece.piece");
          text.assign(p.bytes);
        } else if (p.number == 2) {
          ExpectWire(p, 5, path, "SentencePiece.score");
          score = ProtobufFloat(p);
        } else if (p.number == 3) {
          ExpectWire(p, 0, path, "SentencePiece.type");
          type = static_cast<int64_t>(p.varint);
        }
      }
      PAGODA_ENSURE(type >= 1 && type <= 6, ErrorCode::kCorruptData,
                    path << ": piece " << vocab.pieces.size() << " has unknown type " << type);
      vocab.pieces.push_back(std::move(text));
      vocab.scores.push_back(score);
      vocab.types.push_back(TokenTypeFromInt(type));
    } else if (f.number == 2) {
      ProtobufReader spec = model.Sub(f, "trainer_spec");
      ProtobufField t;
      while (spec.Next(&t)) {
        if (t.wire_type != 0) continue;
        auto v = static_cast<int64_t>(static_cast<int32_t>(t.varint));  // int32 fields
        if (t.number == 3) trainer.model_type = v;
        if (t.number == 40) trainer.unk_id = v;
        if (t.number == 41) trainer.bos_id = v;
        if (t.number == 42) trainer.eos_id = v;
      }
    } else if (f.number == 3) {
      ProtobufReader spec = model.Sub(f, "normalizer_spec");
      ProtobufField n;
      while (spec.Next(&n)) {
        if (n.number == 1 && n.wire_type == 2) normalizer.name.assign(n.bytes);
        if (n.number == 2 && n.wire_type == 2) normalizer.has_charsmap = !n.bytes.empty();
        if (n.number == 3 && n.wire_type == 0) normalizer.add_dummy_prefix = n.varint != 0;
        if (n.number == 4 && n.wire_type == 0) normalizer.remove_extra_whitespaces = n.varint != 0;
      }
    }
  }
  PAGODA_ENSURE(!vocab.pieces.empty(), ErrorCode::kCorruptData,
                path << ": no pieces; is this a sentencepiece tokenizer.model?");
  PAGODA_ENSURE(trainer.model_type == 2, ErrorCode::kUnsupported,
                path << ": sentencepiece model_type " << trainer.model_type
                     << " is not supported (only BPE = 2; Unigram models are not)");
  PAGODA_ENSURE(!normalizer.has_charsmap || normalizer.name == "identity", ErrorCode::kUnsupported,
                path << ": normalizer \"" << normalizer.name
                     << "\" with a precompiled charsmap is not supported (only identity)");
  const auto n = static_cast<int64_t>(vocab.pieces.size());
  auto id_or_none = [&](int64_t id, const char* what) -> int32_t {
    if (id < 0) return -1;
    PAGODA_ENSURE(
        id < n, ErrorCode::kCorruptData,
        path << ": trainer_spec." << what << " = " << id << " is outside the " << n << " pieces");
    return static_cast<int32_t>(id);
  };
  vocab.unk_id = id_or_none(trainer.unk_id, "unk_id");
  vocab.bos_id = id_or_none(trainer.bos_id, "bos_id");
  int32_t eos = id_or_none(trainer.eos_id, "eos_id");
  if (eos >= 0) vocab.eos_ids.push_back(eos);
  vocab.add_space_prefix = normalizer.add_dummy_prefix;
  vocab.remove_extra_whitespaces = normalizer.remove_extra_whitespaces;
  vocab.prefix_after_special = false;
  // transformers' LlamaTokenizer: add_bos_token defaults to true, add_eos_token to false.
  int add_bos = ConfigBool(tokenizer_config, "add_bos_token");
  int add_eos = ConfigBool(tokenizer_config, "add_eos_token");
  vocab.add_bos = add_bos != 0;
  vocab.add_eos = add_eos == 1;
  return std::make_unique<SpmTokenizer>(std::move(vocab));
}

}  // namespace pagoda
