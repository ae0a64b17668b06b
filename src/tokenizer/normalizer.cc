#include "tokenizer/normalizer.h"

#include "tokenizer/pcre2_regex.h"

namespace pagoda {
namespace {

class Replace final : public Normalizer {
 public:
  Replace(const std::string& pattern, bool literal, std::string content)
      : regex_(pattern, "normalizer Replace", literal), content_(std::move(content)) {}
  std::string Apply(std::string text) const override {
    std::string out;
    size_t last = 0;
    regex_.ForEachMatch(text, [&](size_t start, size_t end) {
      if (end == start) return;
      out.append(text, last, start - last);
      out.append(content_);
      last = end;
    });
    out.append(text, last, std::string::npos);
    return out;
  }

 private:
  Pcre2Regex regex_;
  std::string content_;
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string Apply(std::string text) const override {
    return text.empty() ? text : prefix_ + text;
  }

 private:
  std::string prefix_;
};

class Lowercase final : public Normalizer {
 public:
  std::string Apply(std::string text) const override {
    for (char& c : text) {
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
    return text;
  }
};

class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  std::string Apply(std::string text) const override {
    auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
    size_t b = 0, e = text.size();
    if (left_) {
      while (b < e && space(text[b])) ++b;
    }
    if (right_) {
      while (e > b && space(text[e - 1])) --e;
    }
    return text.substr(b, e - b);
  }

 private:
  bool left_, right_;
};

class Identity final : public Normalizer {
 public:
  std::string Apply(std::string text) const override { return text; }
};

}  // namespace

std::unique_ptr<Normalizer> MakeReplaceNormalizer(const std::string& pattern, bool literal,
                                                  const std::string& content) {
  return std::make_unique<Replace>(pattern, literal, content);
}
std::unique_ptr<Normalizer> MakePrependNormalizer(const std::string& prefix) {
  return std::make_unique<Prepend>(prefix);
}
std::unique_ptr<Normalizer> MakeLowercaseNormalizer() { return std::make_unique<Lowercase>(); }
std::unique_ptr<Normalizer> MakeStripNormalizer(bool left, bool right) {
  return std::make_unique<Strip>(left, right);
}
std::unique_ptr<Normalizer> MakeIdentityNormalizer() { return std::make_unique<Identity>(); }

}  // namespace pagoda
