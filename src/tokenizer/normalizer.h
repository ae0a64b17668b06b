// Normalizers: rewrite a text fragment before pre-tokenization, following HF
// tokenizers' normalizers (Replace, Prepend, Lowercase, Strip, Sequence).
// Unicode normalization forms (NFC, NFKC, ...) are accepted and applied as the
// identity: exact for text that is already in that form (most real text is NFC),
// documented in docs/tokenizers.md. Immutable and thread-safe.
#pragma once

#include <memory>
#include <string>

namespace pagoda {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string Apply(std::string text) const = 0;
};

// Replaces every match of `pattern` (a regex, or a literal when `literal`).
std::unique_ptr<Normalizer> MakeReplaceNormalizer(const std::string& pattern, bool literal,
                                                  const std::string& content);
std::unique_ptr<Normalizer> MakePrependNormalizer(const std::string& prefix);
// ASCII lowercase (other scripts unchanged).
std::unique_ptr<Normalizer> MakeLowercaseNormalizer();
// Strips ASCII whitespace on the left and/or right.
std::unique_ptr<Normalizer> MakeStripNormalizer(bool left, bool right);
std::unique_ptr<Normalizer> MakeIdentityNormalizer();

}  // namespace pagoda
