// A read-only memory-mapped file. Weights are used in place from the mapping, so
// a model never holds a second full copy of its file in memory.
//
// Thread-safe after construction (read-only). Not copyable; movable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace pagoda {

class MappedFile {
 public:
  // Maps the whole file. Throws pagoda::Error (kNotFound) naming the path when it
  // cannot be opened or mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Reads a whole (small) text file such as config.json; throws kNotFound naming the path.
std::string ReadTextFile(const std::string& path);
bool FileExists(const std::string& path);

}  // namespace pagoda
