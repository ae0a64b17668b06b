#include "tokenizer/protobuf_reader.h"

#include <cstring>

#include "core/error.h"

namespace pagoda {

void ProtobufReader::Fail(const std::string& what) const {
  ThrowCorrupt(context_ + ": " + what + " at byte " + std::to_string(offset()));
}

uint64_t ProtobufReader::ReadVarint() {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (pos_ >= data_.size()) Fail("truncated varint");
    auto b = static_cast<uint8_t>(data_[pos_++]);
    v |= static_cast<uint64_t>(b & 0x7F) << shift;
    if ((b & 0x80) == 0) return v;
  }
  Fail("varint longer than 10 bytes");
}

bool ProtobufReader::Next(ProtobufField* f) {
  if (pos_ >= data_.size()) return false;
  f->offset = offset();
  uint64_t key = ReadVarint();
  f->number = static_cast<uint32_t>(key >> 3);
  f->wire_type = static_cast<uint32_t>(key & 7);
  if (f->number == 0) Fail("field number 0");
  f->bytes = {};
  f->varint = 0;
  switch (f->wire_type) {
    case 0:
      f->varint = ReadVarint();
      break;
    case 1:
    case 5: {
      size_t n = f->wire_type == 1 ? 8 : 4;
      if (data_.size() - pos_ < n) Fail("truncated fixed-width field");
      uint64_t v = 0;
      std::memcpy(&v, data_.data() + pos_, n);  // little-endian hosts only
      f->varint = v;
      pos_ += n;
      break;
    }
    case 2: {
      uint64_t n = ReadVarint();
      if (n > data_.size() - pos_) {
        Fail("field " + std::to_string(f->number) + " claims " + std::to_string(n) + " bytes but " +
             std::to_string(data_.size() - pos_) + " remain");
      }
      f->bytes = data_.substr(pos_, n);
      pos_ += n;
      break;
    }
    default:
      Fail("unsupported wire type " + std::to_string(f->wire_type) + " (field " +
           std::to_string(f->number) + ")");
  }
  return true;
}

ProtobufReader ProtobufReader::Sub(const ProtobufField& f, const std::string& what) const {
  if (f.wire_type != 2) Fail(what + " is not a length-delimited field");
  size_t start = static_cast<size_t>(f.bytes.data() - data_.data()) + base_;
  return ProtobufReader(f.bytes, context_ + " (" + what + ")", start);
}

float ProtobufFloat(const ProtobufField& f) {
  auto bits = static_cast<uint32_t>(f.varint);
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

}  // namespace pagoda
