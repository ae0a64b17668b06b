// Splits a Jinja template into tokens, reproducing jinja2's lexer with
// trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False:
//
//   - newlines (\r\n, \r, \n) are normalized to \n and one trailing newline of
//     the source is dropped;
//   - `{%-`/`{{-`/`{#-` strip all whitespace before the tag, `-%}`/`-}}`/`-#}`
//     all whitespace after it;
//   - lstrip_blocks: spaces and tabs between a line start and a `{%` or `{#`
//     are removed (`{%+` disables it);
//   - trim_blocks: the first newline after `%}` or `#}` is removed (`+%}`
//     disables it);
//   - comments vanish; `{% raw %}...{% endraw %}` becomes one data token.
//
// Errors (an unclosed tag or string, an unexpected character) throw
// pagoda::Error naming origin:line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::jinja {

enum class TokenType : uint8_t {
  kData,        // literal template text
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,        // identifier or keyword
  kString,      // string literal, text already unescaped
  kInt,
  kFloat,
  kOperator,    // + - * / // % ** ~ ( ) [ ] { } == != < <= > >= = . : | ,
  kEof,
};

struct Token {
  TokenType type;
  int line;
  std::string text;
};

// REQUIRES: nothing; `origin` names the template in error messages.
std::vector<Token> Tokenize(std::string_view source, const std::string& origin);

}  // namespace pagoda::jinja
