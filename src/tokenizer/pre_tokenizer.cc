#include "tokenizer/pre_tokenizer.h"

#include "tokenizer/byte_level.h"
#include "tokenizer/pcre2_regex.h"

namespace pagoda {

const char kGpt2Pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

namespace {

struct Segment {
  size_t start;
  size_t end;
  bool matched;
};

class RegexSplit final : public PreTokenizer {
 public:
  RegexSplit(const std::string& pattern, SplitBehavior behavior, bool invert, bool literal)
      : regex_(pattern, "pre-tokenizer Split", literal), behavior_(behavior), invert_(invert) {}

  void Apply(std::vector<std::string>* pieces, bool) const override {
    std::vector<std::string> out;
    for (const std::string& piece : *pieces) SplitOne(piece, &out);
    pieces->swap(out);
  }

 private:
  void SplitOne(const std::string& piece, std::vector<std::string>* out) const {
    std::vector<Segment> segments;
    size_t last = 0;
    regex_.ForEachMatch(piece, [&](size_t start, size_t end) {
      if (start > last) segments.push_back({last, start, false});
      if (end > start) segments.push_back({start, end, true});
      last = end;
    });
    if (last < piece.size()) segments.push_back({last, piece.size(), false});
    if (invert_) {
      for (Segment& s : segments) s.matched = !s.matched;
    }
    std::string pending;  // for kMergedWithNext
    for (size_t i = 0; i < segments.size(); ++i) {
      const Segment& s = segments[i];
      std::string text = piece.substr(s.start, s.end - s.start);
      switch (behavior_) {
        case SplitBehavior::kRemoved:
          if (!s.matched) out->push_back(std::move(text));
          break;
        case SplitBehavior::kIsolated:
          out->push_back(std::move(text));
          break;
        case SplitBehavior::kMergedWithPrevious:
          if (s.matched && i > 0 && !segments[i - 1].matched) {
            out->back().append(text);
          } else {
            out->push_back(std::move(text));
          }
          break;
        case SplitBehavior::kMergedWithNext:
          if (s.matched) {
            pending.append(text);
          } else {
            out->push_back(pending + text);
            pending.clear();
          }
          break;
        case SplitBehavior::kContiguous:
          if (s.matched && i > 0 && segments[i - 1].matched) {
            out->back().append(text);
          } else {
            out->push_back(std::move(text));
          }
          break;
      }
    }
    if (!pending.empty()) out->push_back(std::move(pending));
  }

  Pcre2Regex regex_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelMap final : public PreTokenizer {
 public:
  void Apply(std::vector<std::string>* pieces, bool) const override {
    for (std::string& p : *pieces) p = ByteLevelEncode(p);
  }
};

class PrefixSpace final : public PreTokenizer {
 public:
  void Apply(std::vector<std::string>* pieces, bool) const override {
    if (!pieces->empty() && !(*pieces)[0].empty() && (*pieces)[0][0] != ' ') {
      (*pieces)[0].insert(0, " ");
    }
  }
};

class Metaspace final : public PreTokenizer {
 public:
  Metaspace(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}

  void Apply(std::vector<std::string>* pieces, bool first_fragment) const override {
    std::vector<std::string> out;
    for (size_t i = 0; i < pieces->size(); ++i) {
      std::string s;
      for (char c : (*pieces)[i]) {
        if (c == ' ') {
          s.append(replacement_);
        } else {
          s.push_back(c);
        }
      }
      bool prepend = scheme_ == PrependScheme::kAlways ||
                     (scheme_ == PrependScheme::kFirst && first_fragment && i == 0);
      if (prepend && s.compare(0, replacement_.size(), replacement_) != 0)
        s.insert(0, replacement_);
      if (!split_) {
        out.push_back(std::move(s));
        continue;
      }
      // MergedWithNext on the replacement: each word starts with it.
      size_t start = 0;
      for (size_t pos = s.find(replacement_, 1); pos != std::string::npos;
           pos = s.find(replacement_, pos + replacement_.size())) {
        if (pos > start) out.push_back(s.substr(start, pos - start));
        start = pos;
      }
      if (start < s.size()) out.push_back(s.substr(start));
    }
    pieces->swap(out);
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

}  // namespace

std::unique_ptr<PreTokenizer> MakeRegexSplit(const std::string& pattern, SplitBehavior behavior,
                                             bool invert, bool literal) {
  return std::make_unique<RegexSplit>(pattern, behavior, invert, literal);
}
std::unique_ptr<PreTokenizer> MakeByteLevelMap() { return std::make_unique<ByteLevelMap>(); }
std::unique_ptr<PreTokenizer> MakePrefixSpace() { return std::make_unique<PrefixSpace>(); }
std::unique_ptr<PreTokenizer> MakeMetaspace(const std::string& replacement, PrependScheme scheme,
                                            bool split) {
  return std::make_unique<Metaspace>(replacement, scheme, split);
}
std::unique_ptr<PreTokenizer> MakeDigits(bool individual) {
  return MakeRegexSplit(individual ? "\\p{Nd}" : "\\p{Nd}+", SplitBehavior::kIsolated, false);
}

}  // namespace pagoda
