// Pre-tokenizers: split a normalized text fragment into the pieces BPE runs on,
// following HF tokenizers' pre_tokenizers (Split, ByteLevel, Metaspace, Digits,
// WhitespaceSplit). A pipeline is a list applied in order to a list of pieces.
// All are immutable after construction and thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace pagoda {

// What a Split does with the matches (HF's SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Metaspace's prepend_scheme: when to put the replacement in front of a fragment.
enum class PrependScheme { kAlways, kFirst, kNever };

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Rewrites `pieces` in place. `first_fragment` is true for the fragment that starts
  // the input (before any special token), for Metaspace's "first" scheme.
  virtual void Apply(std::vector<std::string>* pieces, bool first_fragment) const = 0;
};

// Splits every piece on a regex (or a literal string) with the given behavior;
// `invert` swaps the roles of matches and the text between them.
std::unique_ptr<PreTokenizer> MakeRegexSplit(const std::string& pattern, SplitBehavior behavior,
                                             bool invert, bool literal = false);
// Maps every byte to GPT-2's byte-level alphabet (byte_level.h).
std::unique_ptr<PreTokenizer> MakeByteLevelMap();
// Puts a space in front of a fragment that does not start with one (ByteLevel's
// add_prefix_space).
std::unique_ptr<PreTokenizer> MakePrefixSpace();
// Replaces ' ' with `replacement` (U+2581 usually), prepends it per `scheme`, and
// with `split` cuts before each replacement.
std::unique_ptr<PreTokenizer> MakeMetaspace(const std::string& replacement, PrependScheme scheme,
                                            bool split);
// Splits digits off (each digit alone when `individual`).
std::unique_ptr<PreTokenizer> MakeDigits(bool individual);

// The GPT-2 pattern HF's ByteLevel pre-tokenizer uses with use_regex.
extern const char kGpt2Pattern[];

}  // namespace pagoda
