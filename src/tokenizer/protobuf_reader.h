// ProtobufReader: a minimal reader of the protobuf wire format (varint, 64-bit,
// length-delimited, 32-bit fields), enough for sentencepiece's ModelProto without
// depending on libprotobuf. Every length is checked against the buffer: malformed
// input raises pagoda::Error (kCorruptData) naming `context` and the byte offset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace pagoda {

struct ProtobufField {
  uint32_t number = 0;
  uint32_t wire_type = 0;  // 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32
  uint64_t varint = 0;     // wire types 0, 1 and 5 (the raw bits)
  std::string_view bytes;  // wire type 2
  size_t offset = 0;       // where the field starts, for messages
};

class ProtobufReader {
 public:
  ProtobufReader(std::string_view data, std::string context, size_t base_offset = 0)
      : data_(data), context_(std::move(context)), base_(base_offset) {}

  // Reads the next field; false at the end of the buffer.
  bool Next(ProtobufField* field);
  // A reader over a length-delimited field's bytes (a sub-message).
  ProtobufReader Sub(const ProtobufField& field, const std::string& what) const;

  size_t offset() const { return base_ + pos_; }

 private:
  uint64_t ReadVarint();
  [[noreturn]] void Fail(const std::string& what) const;

  std::string_view data_;
  std::string context_;
  size_t base_ = 0;
  size_t pos_ = 0;
};

float ProtobufFloat(const ProtobufField& field);

}  // namespace pagoda
