#include "tokenizer/bpe_model.h"

#include <cstdio>
#include <queue>

#include "tokenizer/utf8.h"

namespace pagoda {
namespace {

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

struct Symbol {
  int prev;
  int next;
  size_t start;
  size_t size;  // 0 once merged away
  int32_t id;   // -1 when the text is no piece
};

struct Candidate {
  int32_t rank;
  int left;
  int right;
  int32_t left_id;
  int32_t right_id;
};

struct CandidateOrder {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

BpeModel::BpeModel(const std::vector<std::string>& pieces,
                   const std::vector<std::pair<std::string, std::string>>& merges,
                   const BpeModelOptions& options)
    : options_(options) {
  piece_to_id_.reserve(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (!pieces[i].empty()) piece_to_id_.emplace(pieces[i], static_cast<int32_t>(i));
  }
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    int32_t l = PieceId(merges[rank].first);
    int32_t r = PieceId(merges[rank].second);
    int32_t m = PieceId(merges[rank].first + merges[rank].second);
    if (l < 0 || r < 0 || m < 0) continue;
    merges_.emplace(PairKey(l, r), std::make_pair(static_cast<int32_t>(rank), m));
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    byte_ids_[b] = PieceId(name);
  }
}

int32_t BpeModel::PieceId(std::string_view piece) const {
  auto it = piece_to_id_.find(piece);
  return it == piece_to_id_.end() ? -1 : it->second;
}

void BpeModel::Encode(std::string_view word, std::vector<int32_t>* out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    int32_t id = PieceId(word);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  }
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (size_t pos = 0; pos < word.size();) {
    size_t len = Utf8CharLength(word, pos);
    int idx = static_cast<int>(symbols.size());
    symbols.push_back({idx - 1, pos + len < word.size() ? idx + 1 : -1, pos, len,
                       PieceId(word.substr(pos, len))});
    pos += len;
  }
  std::priority_queue<Candidate, std::vector<Candidate>, CandidateOrder> queue;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[left];
    const Symbol& r = symbols[right];
    if (l.id < 0 || r.id < 0) return;
    auto it = merges_.find(PairKey(l.id, r.id));
    if (it == merges_.end()) return;
    queue.push({it->second.first, left, right, l.id, r.id});
  };
  for (size_t i = 1; i < symbols.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));
  while (!queue.empty()) {
    Candidate c = queue.top();
    queue.pop();
    Symbol& l = symbols[c.left];
    Symbol& r = symbols[c.right];
    // Stale when either side changed since the candidate was queued.
    if (l.size == 0 || r.size == 0 || l.next != c.right || l.id != c.left_id ||
        r.id != c.right_id) {
      continue;
    }
    l.size += r.size;
    l.id = merges_.at(PairKey(c.left_id, c.right_id)).second;
    r.size = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = c.left;
    try_add(l.prev, c.left);
    try_add(c.left, l.next);
  }
  bool prev_unk = false;
  for (int i = 0; i != -1; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    if (s.id >= 0) {
      out->push_back(s.id);
      prev_unk = false;
      continue;
    }
    std::string_view text = word.substr(s.start, s.size);
    if (options_.byte_fallback) {
      bool all = true;
      for (char ch : text) all = all && byte_ids_[static_cast<uint8_t>(ch)] >= 0;
      if (all) {
        for (char ch : text) out->push_back(byte_ids_[static_cast<uint8_t>(ch)]);
        prev_unk = false;
        continue;
      }
    }
    if (options_.unk_id >= 0) {
      if (!(options_.fuse_unk && prev_unk)) out->push_back(options_.unk_id);
      prev_unk = true;
      continue;
    }
    // llama.cpp: try each byte as a one-character piece, drop what is not one.
    for (char ch : text) {
      int32_t id = PieceId(std::string_view(&ch, 1));
      if (id >= 0) out->push_back(id);
    }
  }
}

}  // namespace pagoda
