// `pagoda tokenize`: text -> ids with the model's tokenizer, or ids -> text with
// --detokenize.
//   pagoda tokenize --model PATH [--tokenizer PATH] [--text TEXT | stdin] [--no-bos]
//                   [--parse-special]
//   pagoda tokenize --model PATH --detokenize [--ids 1,2,3 | stdin] [--keep-special]
// Ids are printed separated by single spaces, then a newline.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::cli {
namespace {

struct TokenizeFlags {
  std::string model;
  std::string tokenizer;
  std::string text;
  std::string ids;
  bool no_bos = false;
  bool parse_special = false;
  bool detokenize = false;
  bool keep_special = false;
};

std::string ReadStdin() {
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

// Ids separated by commas and/or whitespace.
std::vector<int32_t> ParseIds(const std::string& s) {
  std::vector<int32_t> ids;
  std::string token;
  auto flush = [&] {
    if (token.empty()) return;
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(token, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    PAGODA_ENSURE(used == token.size() && v >= 0 && v <= INT32_MAX, ErrorCode::kInvalidArgument,
                  "--ids: \"" << token << "\" is not a token id");
    ids.push_back(static_cast<int32_t>(v));
    token.clear();
  };
  for (char c : s) {
    if (c == ',' || c == ' ' || c == '\n' || c == '\t' || c == '\r') {
      flush();
    } else {
      token.push_back(c);
    }
  }
  flush();
  return ids;
}

int RunTokenize(const TokenizeFlags& flags, bool text_given, bool ids_given) {
  std::unique_ptr<Tokenizer> tokenizer = LoadTokenizerForModel(flags.model, flags.tokenizer, 0);
  PAGODA_ENSURE(tokenizer != nullptr, ErrorCode::kInvalidArgument,
                flags.model << " has no tokenizer; pass --tokenizer PATH");
  if (flags.detokenize) {
    std::vector<int32_t> ids = ParseIds(ids_given ? flags.ids : ReadStdin());
    std::string text = tokenizer->Decode(ids, !flags.keep_special);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
    return 0;
  }
  std::string text = text_given ? flags.text : ReadStdin();
  EncodeOptions options;
  options.add_special_tokens = !flags.no_bos;
  options.parse_special = flags.parse_special;
  std::vector<int32_t> ids = tokenizer->Encode(text, options);
  std::ostringstream out;
  for (size_t i = 0; i < ids.size(); ++i) out << (i ? " " : "") << ids[i];
  out << '\n';
  std::fputs(out.str().c_str(), stdout);
  return 0;
}

}  // namespace

void AddTokenizeCommand(CLI::App& root, Action* action) {
  auto flags = std::make_shared<TokenizeFlags>();
  CLI::App* cmd =
      root.add_subcommand("tokenize", "Print the token ids of a text (or the text of ids)");
  cmd->add_option("--model", flags->model,
                  "a .gguf, a llama2.c .bin (with --tokenizer) or a Hugging Face directory")
      ->required();
  cmd->add_option("--tokenizer", flags->tokenizer,
                  "tokenizer file: tok*.bin, tokenizer.json, tokenizer.model or a directory");
  CLI::Option* text = cmd->add_option("--text", flags->text, "text to tokenize (default: stdin)");
  cmd->add_flag("--no-bos", flags->no_bos, "do not add BOS/EOS special tokens");
  cmd->add_flag("--parse-special", flags->parse_special,
                "match special tokens such as <s> written in the text");
  cmd->add_flag("--detokenize", flags->detokenize, "print the text of --ids (or of ids on stdin)");
  CLI::Option* ids = cmd->add_option("--ids", flags->ids, "ids for --detokenize, e.g. 1,2,3");
  cmd->add_flag("--keep-special", flags->keep_special, "--detokenize: keep special tokens' text");
  cmd->callback([flags, action, text, ids] {
    bool text_given = text->count() > 0;
    bool ids_given = ids->count() > 0;
    if (ids_given && !flags->detokenize) throw CLI::ValidationError("--ids", "needs --detokenize");
    if (text_given && flags->detokenize)
      throw CLI::ValidationError("--text", "not with --detokenize");
    *action = [flags, text_given, ids_given] { return RunTokenize(*flags, text_given, ids_given); };
  });
}

}  // namespace pagoda::cli
