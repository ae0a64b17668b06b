// tokenizer.json (HF tokenizers' serialization) -> BpeTokenizer, plus
// tokenizer_config.json for BOS/EOS rules. Every field is type-checked: a wrong
// type or an unknown component raises pagoda::Error naming the file and the field.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/mapped_file.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/tokenizer_loaders.h"

namespace pagoda {
namespace {

using nlohmann::json;

// Reading context: the file and the path of the JSON value being read.
struct Ctx {
  const std::string& file;
  std::string where;
  Ctx At(const std::string& key) const { return {file, where + "." + key}; }
  [[noreturn]] void Fail(const std::string& what) const {
    ThrowCorrupt(file + ": " + where + ": " + what);
  }
  [[noreturn]] void Unsupported(const std::string& what) const {
    ThrowUnsupported(file + ": " + where + ": " + what);
  }
};

const json& Member(const json& j, const char* key, const Ctx& ctx) {
  if (!j.is_object()) ctx.Fail("expected an object");
  auto it = j.find(key);
  if (it == j.end()) ctx.At(key).Fail("missing");
  return *it;
}

std::string Str(const json& j, const char* key, const Ctx& ctx, const std::string& fallback) {
  if (!j.is_object()) ctx.Fail("expected an object");
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_string()) ctx.At(key).Fail("expected a string");
  return it->get<std::string>();
}

bool Bool(const json& j, const char* key, const Ctx& ctx, bool fallback) {
  if (!j.is_object()) ctx.Fail("expected an object");
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) ctx.At(key).Fail("expected true or false");
  return it->get<bool>();
}

int64_t Int(const json& j, const Ctx& ctx) {
  if (!j.is_number_integer()) ctx.Fail("expected an integer");
  return j.get<int64_t>();
}

const json& Array(const json& j, const char* key, const Ctx& ctx) {
  const json& a = Member(j, key, ctx);
  if (!a.is_array()) ctx.At(key).Fail("expected an array");
  return a;
}

// {"String": "..."} or {"Regex": "..."}; sets *literal.
std::string Pattern(const json& j, const Ctx& ctx, bool* literal) {
  const json& p = Member(j, "pattern", ctx);
  Ctx pc = ctx.At("pattern");
  if (p.is_object() && p.contains("String") && p["String"].is_string()) {
    *literal = true;
    return p["String"].get<std::string>();
  }
  if (p.is_object() && p.contains("Regex") && p["Regex"].is_string()) {
    *literal = false;
    return p["Regex"].get<std::string>();
  }
  pc.Fail("expected {\"String\": ...} or {\"Regex\": ...}");
}

PrependScheme Scheme(const json& j, const Ctx& ctx) {
  if (j.contains("prepend_scheme")) {
    std::string s = Str(j, "prepend_scheme", ctx, "always");
    if (s == "always") return PrependScheme::kAlways;
    if (s == "first") return PrependScheme::kFirst;
    if (s == "never") return PrependScheme::kNever;
    ctx.At("prepend_scheme").Fail("unknown value \"" + s + "\"");
  }
  return Bool(j, "add_prefix_space", ctx, true) ? PrependScheme::kAlways : PrependScheme::kNever;
}

void AddNormalizers(const json& j, const Ctx& ctx, std::vector<std::unique_ptr<Normalizer>>* out) {
  if (j.is_null()) return;
  std::string type = Str(j, "type", ctx, "");
  if (type == "Sequence") {
    const json& list = Array(j, "normalizers", ctx);
    for (size_t i = 0; i < list.size(); ++i) {
      AddNormalizers(list[i], ctx.At("normalizers[" + std::to_string(i) + "]"), out);
    }
  } else if (type == "Prepend") {
    out->push_back(MakePrependNormalizer(Str(j, "prepend", ctx, "")));
  } else if (type == "Replace") {
    bool literal = true;
    std::string pattern = Pattern(j, ctx, &literal);
    out->push_back(MakeReplaceNormalizer(pattern, literal, Str(j, "content", ctx, "")));
  } else if (type == "NFC" || type == "NFKC" || type == "NFD" || type == "NFKD") {
    out->push_back(MakeIdentityNormalizer());  // see normalizer.h
  } else if (type == "Lowercase") {
    out->push_back(MakeLowercaseNormalizer());
  } else if (type == "Strip") {
    out->push_back(
        MakeStripNormalizer(Bool(j, "strip_left", ctx, true), Bool(j, "strip_right", ctx, true)));
  } else {
    ctx.Unsupported("normalizer \"" + type + "\" is not supported");
  }
}

SplitBehavior Behavior(const json& j, const Ctx& ctx) {
  std::string b = Str(j, "behavior", ctx, "Isolated");
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  ctx.At("behavior").Fail("unknown value \"" + b + "\"");
}

void AddPreTokenizers(const json& j, const Ctx& ctx,
                      std::vector<std::unique_ptr<PreTokenizer>>* out) {
  if (j.is_null()) return;
  std::string type = Str(j, "type", ctx, "");
  if (type == "Sequence") {
    const json& list = Array(j, "pretokenizers", ctx);
    for (size_t i = 0; i < list.size(); ++i) {
      AddPreTokenizers(list[i], ctx.At("pretokenizers[" + std::to_string(i) + "]"), out);
    }
  } else if (type == "ByteLevel") {
    if (Bool(j, "add_prefix_space", ctx, true)) out->push_back(MakePrefixSpace());
    if (Bool(j, "use_regex", ctx, true)) {
      out->push_back(MakeRegexSplit(kGpt2Pattern, SplitBehavior::kIsolated, false));
    }
    out->push_back(MakeByteLevelMap());
  } else if (type == "Split") {
    bool literal = false;
    std::string pattern = Pattern(j, ctx, &literal);
    out->push_back(
        MakeRegexSplit(pattern, Behavior(j, ctx), Bool(j, "invert", ctx, false), literal));
  } else if (type == "Metaspace") {
    out->push_back(MakeMetaspace(Str(j, "replacement", ctx, "\xE2\x96\x81"), Scheme(j, ctx),
                                 Bool(j, "split", ctx, true)));
  } else if (type == "Digits") {
    out->push_back(MakeDigits(Bool(j, "individual_digits", ctx, false)));
  } else if (type == "Whitespace") {
    out->push_back(MakeRegexSplit("\\w+|[^\\w\\s]+", SplitBehavior::kRemoved, true));
  } else if (type == "WhitespaceSplit") {
    out->push_back(MakeRegexSplit("\\s+", SplitBehavior::kRemoved, false));
  } else if (type == "Punctuation") {
    out->push_back(MakeRegexSplit("\\p{P}", Behavior(j, ctx), false));
  } else {
    ctx.Unsupported("pre-tokenizer \"" + type + "\" is not supported");
  }
}

void AddDecoders(const json& j, const Ctx& ctx, std::vector<std::unique_ptr<Decoder>>* out) {
  if (j.is_null()) return;
  std::string type = Str(j, "type", ctx, "");
  if (type == "Sequence") {
    const json& list = Array(j, "decoders", ctx);
    for (size_t i = 0; i < list.size(); ++i) {
      AddDecoders(list[i], ctx.At("decoders[" + std::to_string(i) + "]"), out);
    }
  } else if (type == "ByteLevel") {
    out->push_back(MakeByteLevelDecoder());
  } else if (type == "Replace") {
    bool literal = true;
    std::string pattern = Pattern(j, ctx, &literal);
    if (!literal) ctx.Unsupported("Replace decoder with a regex pattern is not supported");
    out->push_back(MakeReplaceDecoder(pattern, Str(j, "content", ctx, "")));
  } else if (type == "ByteFallback") {
    out->push_back(MakeByteFallbackDecoder());
  } else if (type == "Fuse") {
    out->push_back(MakeFuseDecoder());
  } else if (type == "Strip") {
    int start = static_cast<int>(Int(Member(j, "start", ctx), ctx.At("start")));
    int stop = static_cast<int>(Int(Member(j, "stop", ctx), ctx.At("stop")));
    out->push_back(MakeStripDecoder(Str(j, "content", ctx, " "), start, stop));
  } else if (type == "Metaspace") {
    out->push_back(MakeMetaspaceDecoder(Str(j, "replacement", ctx, "\xE2\x96\x81"),
                                        Scheme(j, ctx) != PrependScheme::kNever));
  } else {
    ctx.Unsupported("decoder \"" + type + "\" is not supported");
  }
}

void ReadModel(const json& model, const Ctx& ctx, BpeTokenizerConfig* config) {
  std::string type = Str(model, "type", ctx, "BPE");
  if (type != "BPE") ctx.Unsupported("model type \"" + type + "\" is not supported (only BPE)");
  if (!Str(model, "continuing_subword_prefix", ctx, "").empty() ||
      !Str(model, "end_of_word_suffix", ctx, "").empty()) {
    ctx.Unsupported("continuing_subword_prefix / end_of_word_suffix are not supported");
  }
  const json& vocab = Member(model, "vocab", ctx);
  Ctx vc = ctx.At("vocab");
  if (!vocab.is_object()) vc.Fail("expected an object of piece -> id");
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    int64_t id = Int(it.value(), vc.At(it.key()));
    if (id < 0 || id >= (int64_t{1} << 24)) vc.At(it.key()).Fail("id out of range");
    if (static_cast<size_t>(id) >= config->pieces.size()) config->pieces.resize(id + 1);
    config->pieces[id] = it.key();
  }
  const json& merges = Array(model, "merges", ctx);
  config->merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    Ctx mc = ctx.At("merges[" + std::to_string(i) + "]");
    if (m.is_string()) {
      std::string s = m.get<std::string>();
      size_t space = s.find(' ');
      if (space == std::string::npos) mc.Fail("expected \"left right\"");
      config->merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      config->merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      mc.Fail("expected \"left right\" or [\"left\", \"right\"]");
    }
  }
  config->model_options.byte_fallback = Bool(model, "byte_fallback", ctx, false);
  config->model_options.fuse_unk = Bool(model, "fuse_unk", ctx, false);
  config->model_options.ignore_merges = Bool(model, "ignore_merges", ctx, false);
  std::string unk = Str(model, "unk_token", ctx, "");
  if (!unk.empty()) {
    auto it = vocab.find(unk);
    if (it == vocab.end()) ctx.At("unk_token").Fail("\"" + unk + "\" is not in the vocabulary");
    config->model_options.unk_id = static_cast<int32_t>(it->get<int64_t>());
  }
}

void ReadAddedTokens(const json& root, const Ctx& ctx, BpeTokenizerConfig* config) {
  auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null()) return;
  Ctx ac = ctx.At("added_tokens");
  if (!it->is_array()) ac.Fail("expected an array");
  for (size_t i = 0; i < it->size(); ++i) {
    const json& t = (*it)[i];
    Ctx tc = ac.At(std::to_string(i));
    AddedToken a;
    a.id = static_cast<int32_t>(Int(Member(t, "id", tc), tc.At("id")));
    if (a.id < 0 || a.id >= (1 << 24)) tc.At("id").Fail("id out of range");
    a.content = Str(t, "content", tc, "");
    if (a.content.empty()) tc.At("content").Fail("missing or empty");
    a.special = Bool(t, "special", tc, false);
    a.lstrip = Bool(t, "lstrip", tc, false);
    a.rstrip = Bool(t, "rstrip", tc, false);
    if (static_cast<size_t>(a.id) >= config->pieces.size()) config->pieces.resize(a.id + 1);
    config->pieces[a.id] = a.content;
    config->added_tokens.push_back(std::move(a));
  }
}

// Post-processor ids around the text; `token_id` resolves a special token name.
void ReadPostProcessor(const json& j, const Ctx& ctx, BpeTokenizerConfig* config) {
  if (j.is_null()) return;
  std::string type = Str(j, "type", ctx, "");
  if (type == "ByteLevel") return;  // offsets only
  if (type == "Sequence") {
    const json& list = Array(j, "processors", ctx);
    for (size_t i = 0; i < list.size(); ++i) {
      ReadPostProcessor(list[i], ctx.At("processors[" + std::to_string(i) + "]"), config);
    }
    return;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    for (const char* key : {"cls", "sep"}) {
      const json& p = Member(j, key, ctx);
      if (!p.is_array() || p.size() != 2) ctx.At(key).Fail("expected [token, id]");
      int32_t id = static_cast<int32_t>(Int(p[1], ctx.At(key)));
      (std::string(key) == "cls" ? config->prefix_ids : config->suffix_ids).push_back(id);
    }
    return;
  }
  if (type != "TemplateProcessing")
    ctx.Unsupported("post-processor \"" + type + "\" is not supported");
  const json& single = Array(j, "single", ctx);
  const json& specials = Member(j, "special_tokens", ctx);
  bool after_text = false;
  config->prefix_ids.clear();
  config->suffix_ids.clear();
  for (size_t i = 0; i < single.size(); ++i) {
    const json& item = single[i];
    Ctx ic = ctx.At("single[" + std::to_string(i) + "]");
    if (item.contains("Sequence")) {
      after_text = true;
      continue;
    }
    const json& st = Member(item, "SpecialToken", ic);
    std::string name = Str(st, "id", ic.At("SpecialToken"), "");
    if (!specials.is_object() || !specials.contains(name)) {
      ctx.At("special_tokens").Fail("no entry for \"" + name + "\"");
    }
    const json& ids = Array(specials[name], "ids", ctx.At("special_tokens." + name));
    for (const json& id : ids) {
      int32_t v = static_cast<int32_t>(Int(id, ctx.At("special_tokens." + name + ".ids")));
      (after_text ? config->suffix_ids : config->prefix_ids).push_back(v);
    }
  }
}

int32_t FindToken(const BpeTokenizerConfig& c, const std::string& content) {
  for (const AddedToken& a : c.added_tokens) {
    if (a.content == content) return a.id;
  }
  for (size_t i = 0; i < c.pieces.size(); ++i) {
    if (c.pieces[i] == content) return static_cast<int32_t>(i);
  }
  return -1;
}

void ApplyTokenizerConfig(const json* cfg, BpeTokenizerConfig* c) {
  std::string bos = ConfigTokenName(cfg, "bos_token");
  std::string eos = ConfigTokenName(cfg, "eos_token");
  int32_t bos_id = bos.empty() ? -1 : FindToken(*c, bos);
  int32_t eos_id = eos.empty() ? -1 : FindToken(*c, eos);
  // Without a config, take BOS/EOS from the post-processor template.
  if (bos_id < 0 && !c->prefix_ids.empty()) bos_id = c->prefix_ids.front();
  if (eos_id < 0 && !c->suffix_ids.empty()) eos_id = c->suffix_ids.back();
  c->bos_id = bos_id;
  if (eos_id >= 0) c->eos_ids.push_back(eos_id);
  // transformers rebuilds the template from add_bos_token / add_eos_token.
  int add_bos = ConfigBool(cfg, "add_bos_token");
  int add_eos = ConfigBool(cfg, "add_eos_token");
  if (add_bos >= 0) {
    std::erase(c->prefix_ids, bos_id);
    if (add_bos == 1 && bos_id >= 0) c->prefix_ids.insert(c->prefix_ids.begin(), bos_id);
  }
  if (add_eos >= 0) {
    std::erase(c->suffix_ids, eos_id);
    if (add_eos == 1 && eos_id >= 0) c->suffix_ids.push_back(eos_id);
  }
  for (const char* t : {"<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>"}) {
    int32_t id = FindToken(*c, t);
    if (id >= 0 && std::find(c->eos_ids.begin(), c->eos_ids.end(), id) == c->eos_ids.end()) {
      c->eos_ids.push_back(id);
    }
  }
}

}  // namespace

std::unique_ptr<Tokenizer> LoadTokenizerJson(const std::string& path,
                                             const json* tokenizer_config) {
  std::string text = ReadTextFile(path);
  json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  PAGODA_ENSURE(!root.is_discarded(), ErrorCode::kCorruptData, path << ": not valid JSON");
  Ctx ctx{path, "$"};
  if (!root.is_object()) ctx.Fail("expected a JSON object");
  BpeTokenizerConfig config;
  config.source = path;
  try {
    ReadModel(Member(root, "model", ctx), ctx.At("model"), &config);
    ReadAddedTokens(root, ctx, &config);
    config.types.assign(config.pieces.size(), TokenType::kNormal);
    for (const AddedToken& a : config.added_tokens) {
      config.types[a.id] = a.special ? TokenType::kControl : TokenType::kUserDefined;
    }
    auto get = [&](const char* key) -> const json& {
      static const json kNull;
      auto it = root.find(key);
      return it == root.end() ? kNull : *it;
    };
    AddNormalizers(get("normalizer"), ctx.At("normalizer"), &config.normalizers);
    AddPreTokenizers(get("pre_tokenizer"), ctx.At("pre_tokenizer"), &config.pre_tokenizers);
    AddDecoders(get("decoder"), ctx.At("decoder"), &config.decoders);
    ReadPostProcessor(get("post_processor"), ctx.At("post_processor"), &config);
    ApplyTokenizerConfig(tokenizer_config, &config);
  } catch (const json::exception& e) {
    ThrowCorrupt(path + ": " + e.what());
  } catch (const Error& e) {
    // Errors from components (a regex that does not compile) get the file name.
    if (std::string(e.what()).find(path) != std::string::npos) throw;
    throw Error(e.code(), path + ": " + e.what());
  }
  return std::make_unique<BpeTokenizer>(std::move(config));
}

}  // namespace pagoda
