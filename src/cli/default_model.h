// The default model: models/pagoda-tiny.gguf, compiled into the pagoda binary (.incbin), so
// `pagoda generate` / `serve` / `eval` / `bench` without --model work from any copy of the
// binary with no other file (docs/models.md, "pagoda-tiny").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace pagoda::cli {

// The name --model shows in logs and help.
inline constexpr std::string_view kDefaultModelName = "pagoda-tiny";

// The embedded GGUF bytes.
std::string_view EmbeddedDefaultModel();
// SHA-256 (hex) of models/pagoda-tiny.gguf when this binary was built (tests compare it with
// the file; changing it is what makes the build pick up a retrained model).
std::string_view EmbeddedDefaultModelSha256();

// A path the loaders can open that holds the embedded model (they mmap files):
// $XDG_CACHE_HOME/pagoda (or ~/.cache/pagoda)/pagoda-tiny-<sha256 prefix>.gguf, written once
// (atomically) and reused while its size matches; where that directory cannot be written, an
// anonymous in-memory file (memfd, /proc/self/fd/N).
std::string EmbeddedDefaultModelPath();

}  // namespace pagoda::cli
