#include "tokenizer/decoder.h"

#include "tokenizer/byte_level.h"

namespace pagoda {
namespace {

std::string ReplaceAll(const std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  std::string out;
  size_t last = 0;
  for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, last)) {
    out.append(s, last, pos - last);
    out.append(to);
    last = pos + from.size();
  }
  out.append(s, last, std::string::npos);
  return out;
}

int ParseByte(const std::string& piece) {
  if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>') return -1;
  int v = 0;
  for (int i = 3; i < 5; ++i) {
    char c = piece[i];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

class ByteLevelDec final : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* pieces) const override {
    std::string out;
    for (const std::string& p : *pieces) out.append(ByteLevelDecode(p));
    pieces->assign(1, std::move(out));
  }
};

class ReplaceDec final : public Decoder {
 public:
  ReplaceDec(std::string pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void DecodeChain(std::vector<std::string>* pieces) const override {
    for (std::string& p : *pieces) p = ReplaceAll(p, pattern_, content_);
  }

 private:
  std::string pattern_, content_;
};

class ByteFallbackDec final : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* pieces) const override {
    std::vector<std::string> out;
    std::string bytes;
    bool in_bytes = false;
    for (std::string& p : *pieces) {
      int b = ParseByte(p);
      if (b >= 0) {
        bytes.push_back(static_cast<char>(b));
        in_bytes = true;
        continue;
      }
      if (in_bytes) out.push_back(std::move(bytes));
      bytes.clear();
      in_bytes = false;
      out.push_back(std::move(p));
    }
    if (in_bytes) out.push_back(std::move(bytes));
    pieces->swap(out);
  }
};

class FuseDec final : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* pieces) const override {
    std::string out;
    for (const std::string& p : *pieces) out.append(p);
    pieces->assign(1, std::move(out));
  }
};

class StripDec final : public Decoder {
 public:
  StripDec(std::string content, int start, int stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void DecodeChain(std::vector<std::string>* pieces) const override {
    if (content_.empty()) return;
    for (std::string& p : *pieces) {
      for (int i = 0; i < start_ && p.compare(0, content_.size(), content_) == 0; ++i) {
        p.erase(0, content_.size());
      }
      for (int i = 0; i < stop_ && p.size() >= content_.size() &&
                      p.compare(p.size() - content_.size(), content_.size(), content_) == 0;
           ++i) {
        p.erase(p.size() - content_.size());
      }
    }
  }

 private:
  std::string content_;
  int start_, stop_;
};

class MetaspaceDec final : public Decoder {
 public:
  MetaspaceDec(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void DecodeChain(std::vector<std::string>* pieces) const override {
    for (size_t i = 0; i < pieces->size(); ++i) {
      std::string& p = (*pieces)[i];
      p = ReplaceAll(p, replacement_, " ");
      if (i == 0 && strip_first_ && !p.empty() && p[0] == ' ') p.erase(0, 1);
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

}  // namespace

std::unique_ptr<Decoder> MakeByteLevelDecoder() { return std::make_unique<ByteLevelDec>(); }
std::unique_ptr<Decoder> MakeReplaceDecoder(const std::string& pattern,
                                            const std::string& content) {
  return std::make_unique<ReplaceDec>(pattern, content);
}
std::unique_ptr<Decoder> MakeByteFallbackDecoder() { return std::make_unique<ByteFallbackDec>(); }
std::unique_ptr<Decoder> MakeFuseDecoder() { return std::make_unique<FuseDec>(); }
std::unique_ptr<Decoder> MakeStripDecoder(const std::string& content, int start, int stop) {
  return std::make_unique<StripDec>(content, start, stop);
}
std::unique_ptr<Decoder> MakeMetaspaceDecoder(const std::string& replacement, bool strip_first) {
  return std::make_unique<MetaspaceDec>(replacement, strip_first);
}

}  // namespace pagoda
