#include "tokenizer/pre_tokenizer_presets.h"

#include "core/error.h"
#include "tokenizer/pre_tokenizer.h"

namespace pagoda {
namespace {

// Llama 3 (and DBRX, Smaug, ChatGLM4).
constexpr char kLlama3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Qwen2 (and StableLM2): like Llama 3 with single digits.
constexpr char kQwen2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr char kDeepseekLlmLetters[] =
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+";

}  // namespace

std::vector<std::string> PreTokenizerRegexes(const std::string& pre, const std::string& context) {
  if (pre == "llama-bpe" || pre == "llama3" || pre == "dbrx" || pre == "smaug-bpe" ||
      pre == "chatglm-bpe") {
    return {kLlama3};
  }
  if (pre == "qwen2" || pre == "stablelm2") return {kQwen2};
  if (pre == "deepseek-llm") {
    return {"[\\r\\n]", kDeepseekLlmLetters, "\\s?[!-/:-~！-／：-～‘-‟　-。]+", "\\s+$",
            "[一-龥ࠀ-一가-퟿]+", "\\p{N}+"};
  }
  if (pre == "deepseek-coder") {
    return {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", "\\p{N}"};
  }
  if (pre == "deepseek-v3") {
    return {"\\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+",
            "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}"
            "\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
  }
  if (pre == "falcon") {
    return {"[\\p{P}\\$\\+<=>\\^~\\|`]+", kGpt2Pattern, "[0-9][0-9][0-9]"};
  }
  if (pre == "starcoder" || pre == "refact" || pre == "command-r" || pre == "smollm" ||
      pre == "codeshell" || pre == "exaone" || pre == "minerva-7b") {
    return {"\\p{N}", kGpt2Pattern};
  }
  if (pre == "gpt-2" || pre == "gpt2" || pre == "mpt" || pre == "olmo" || pre == "jais" ||
      pre == "phi-2" || pre == "jina-es" || pre == "jina-de") {
    return {kGpt2Pattern};
  }
  if (pre == "default") {
    return {"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2Pattern, "\\p{N}+", "[0-9][0-9][0-9]"};
  }
  (ErrorBuilder(ErrorCode::kUnsupported)
   << context << ": tokenizer.ggml.pre \"" << pre
   << "\" is not a known pre-tokenizer (pagoda knows gpt-2, llama-bpe, qwen2, deepseek-llm, "
      "deepseek-coder, deepseek-v3, falcon, starcoder, mpt, refact, command-r, default)")
      .Raise();
}

}  // namespace pagoda
