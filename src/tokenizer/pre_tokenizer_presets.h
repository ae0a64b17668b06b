// The pre-tokenizer regexes of the common byte-level BPE families, by the name
// llama.cpp stores in `tokenizer.ggml.pre`. Each list is applied in order, every
// regex splitting the pieces the previous one produced (HF's Sequence of Isolated
// Splits); the patterns are those of the models' tokenizer.json files.
#pragma once

#include <string>
#include <vector>

namespace pagoda {

// Throws kUnsupported naming `context` and the type when it is unknown.
std::vector<std::string> PreTokenizerRegexes(const std::string& pre_type,
                                             const std::string& context);

}  // namespace pagoda
