// Decoders: turn the pieces of a token sequence back into text, following HF
// tokenizers' decoders (ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace).
// A pipeline applies each decoder's chain step to the whole list of pieces in
// order, as HF's Sequence decoder does; the result is their concatenation.
// Immutable and thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace pagoda {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void DecodeChain(std::vector<std::string>* pieces) const = 0;
};

// GPT-2 byte-level characters back to bytes (byte_level.h); fuses all pieces.
std::unique_ptr<Decoder> MakeByteLevelDecoder();
// Replaces every occurrence of the literal `pattern` with `content` in each piece.
std::unique_ptr<Decoder> MakeReplaceDecoder(const std::string& pattern, const std::string& content);
// Runs of <0xXX> pieces become their bytes (kept as raw bytes even when not UTF-8).
std::unique_ptr<Decoder> MakeByteFallbackDecoder();
// Joins all pieces into one.
std::unique_ptr<Decoder> MakeFuseDecoder();
// Removes up to `start` leading and `stop` trailing copies of `content` per piece.
std::unique_ptr<Decoder> MakeStripDecoder(const std::string& content, int start, int stop);
// `replacement` back to ' '; the first piece loses its leading space when
// `strip_first` (prepend_scheme is not "never").
std::unique_ptr<Decoder> MakeMetaspaceDecoder(const std::string& replacement, bool strip_first);

}  // namespace pagoda
