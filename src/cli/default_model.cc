#include "cli/default_model.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/logging.h"

// The GGUF itself. PAGODA_SOURCE_DIR is the absolute source root (CMake). The assembler does
// not record the file as a dependency: kSha256 below changes with it, which recompiles this
// file (tools/train/README.md, "Replacing the default model"; tests/pagoda_tiny_test.cc checks
// that the two agree).
asm(".section .rodata\n"
    ".balign 64\n"
    ".type pagoda_default_model_start, @object\n"
    "pagoda_default_model_start:\n"
    ".incbin \"" PAGODA_SOURCE_DIR "/models/pagoda-tiny.gguf\"\n"
    "pagoda_default_model_end:\n"
    ".byte 0\n"
    ".previous\n");
extern "C" const char pagoda_default_model_start[];
extern "C" const char pagoda_default_model_end[];

namespace pagoda::cli {
namespace {

constexpr char kSha256[] = "d14b15bc14ca6d50e7657763b8e97ddc6084451c9db3d50e851cb22146b6b27d";

std::string CacheDir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x == '/') return std::string(x) + "/pagoda";
  if (const char* h = std::getenv("HOME"); h != nullptr && *h == '/') return std::string(h) + "/.cache/pagoda";
  return "";
}

bool WriteAll(int fd, std::string_view bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// The cached copy, written once; "" when the cache directory is not writable.
std::string CachedCopy(std::string_view bytes) {
  namespace fs = std::filesystem;
  const std::string dir = CacheDir();
  if (dir.empty()) return "";
  const std::string path = dir + "/" + std::string(kDefaultModelName) + "-" +
                           std::string(kSha256).substr(0, 16) + ".gguf";
  std::error_code ec;
  if (fs::is_regular_file(path, ec) && fs::file_size(path, ec) == bytes.size()) return path;
  fs::create_directories(dir, ec);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return "";
  const bool ok = WriteAll(fd, bytes);
  ::close(fd);
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return "";
  }
  return path;
}

std::string InMemoryCopy(std::string_view bytes) {
  const int fd = ::memfd_create("pagoda-tiny.gguf", MFD_CLOEXEC);
  PAGODA_ENSURE(fd >= 0, ErrorCode::kInternal,
                "the embedded default model: memfd_create failed (" << std::strerror(errno) << ")");
  PAGODA_ENSURE(WriteAll(fd, bytes), ErrorCode::kInternal, "the embedded default model: cannot write it to memory");
  // The descriptor stays open for the life of the process: the loaders open and mmap the path.
  return "/proc/self/fd/" + std::to_string(fd);
}

}  // namespace

std::string_view EmbeddedDefaultModel() {
  // Addresses compared as integers: the two labels are distinct objects to the compiler.
  const auto size = reinterpret_cast<uintptr_t>(pagoda_default_model_end) -
                    reinterpret_cast<uintptr_t>(pagoda_default_model_start);
  return {pagoda_default_model_start, static_cast<size_t>(size)};
}

std::string_view EmbeddedDefaultModelSha256() { return kSha256; }

std::string EmbeddedDefaultModelPath() {
  static const std::string path = [] {
    const std::string_view bytes = EmbeddedDefaultModel();
    std::string p = CachedCopy(bytes);
    if (p.empty()) p = InMemoryCopy(bytes);
    PAGODA_LOG(kInfo) << "no --model: the embedded default " << kDefaultModelName << " ("
                      << bytes.size() / (1 << 20) << " MiB), read from " << p;
    return p;
  }();
  return path;
}

}  // namespace pagoda::cli
