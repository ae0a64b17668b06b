#include "kv/block_hash.h"

#include <openssl/evp.h>
#include <xxhash.h>

#include <algorithm>

#include "core/error.h"

namespace pagoda {

PrefixHashAlgo ParsePrefixHashAlgo(std::string_view name) {
  if (name == "sha256") return PrefixHashAlgo::kSha256;
  if (name == "xxhash" || name == "xxh3_128") return PrefixHashAlgo::kXxh3_128;
  ThrowInvalidArgument("--prefix-caching-hash-algo: unknown value '" + std::string(name) +
                       "' (expected sha256 or xxhash)");
}

std::string_view PrefixHashAlgoName(PrefixHashAlgo algo) {
  switch (algo) {
    case PrefixHashAlgo::kSha256: return "sha256";
    case PrefixHashAlgo::kXxh3_128: return "xxhash";
  }
  return "?";
}

std::string BlockHash::Hex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    s.push_back(kDigits[b >> 4]);
    s.push_back(kDigits[b & 15]);
  }
  return s;
}

namespace {

// Little-endian on purpose, so keys do not depend on the host.
uint8_t* PutU32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) *p++ = static_cast<uint8_t>(v >> (8 * i));
  return p;
}

}  // namespace

BlockHash HashBlockTokens(PrefixHashAlgo algo, const BlockHash* parent,
                          std::span<const int32_t> block_token_ids, std::string_view extra_keys) {
  // One canonical message, hashed in one shot: cheaper than streaming three updates,
  // and the length prefixes make (tokens, extra_keys) splits unambiguous.
  thread_local std::vector<uint8_t> buf;
  buf.resize(32 + 4 + 4 * block_token_ids.size() + 4 + extra_keys.size());
  uint8_t* p = buf.data();
  if (parent != nullptr) {
    std::memcpy(p, parent->bytes.data(), 32);
  } else {
    std::memset(p, 0, 32);
  }
  p += 32;
  p = PutU32(p, static_cast<uint32_t>(block_token_ids.size()));
  for (int32_t t : block_token_ids) p = PutU32(p, static_cast<uint32_t>(t));
  p = PutU32(p, static_cast<uint32_t>(extra_keys.size()));
  if (!extra_keys.empty()) std::memcpy(p, extra_keys.data(), extra_keys.size());

  BlockHash out;
  switch (algo) {
    case PrefixHashAlgo::kSha256: {
      unsigned int len = 0;
      const int ok = EVP_Digest(buf.data(), buf.size(), out.bytes.data(), &len, EVP_sha256(),
                                nullptr);
      PAGODA_CHECK(ok == 1 && len == 32) << "EVP_Digest(sha256) failed";
      break;
    }
    case PrefixHashAlgo::kXxh3_128: {
      const XXH128_hash_t h = XXH3_128bits(buf.data(), buf.size());
      std::memcpy(out.bytes.data(), &h.low64, 8);
      std::memcpy(out.bytes.data() + 8, &h.high64, 8);
      break;
    }
  }
  return out;
}

void ComputeBlockHashes(PrefixHashAlgo algo, std::span<const int32_t> token_ids,
                        int32_t block_size, std::string_view extra_keys,
                        int64_t max_num_blocks, std::vector<BlockHash>* hashes) {
  PAGODA_CHECK(block_size > 0) << "block_size " << block_size;
  const int64_t num_full = std::min<int64_t>(max_num_blocks,
                                             static_cast<int64_t>(token_ids.size()) / block_size);
  for (int64_t i = static_cast<int64_t>(hashes->size()); i < num_full; ++i) {
    const BlockHash* parent = i == 0 ? nullptr : &(*hashes)[i - 1];
    const auto block = token_ids.subspan(i * block_size, block_size);
    hashes->push_back(HashBlockTokens(algo, parent, block, i == 0 ? extra_keys : ""));
  }
}

}  // namespace pagoda
