// Prefix hashing for automatic prefix caching (vLLM's hash_block_tokens, nano-vllm's
// compute_hash).
//
// A FULL block's key chains the keys before it, so equal keys mean equal prefixes:
//
//   key[0] = H(root,   tokens[0 .. B),   extra_keys)
//   key[i] = H(key[i-1], tokens[iB .. (i+1)B), "")
//
// where H hashes one canonical byte string: the 32-byte parent key (zeros for the root),
// a u32 token count, the token ids as little-endian int32, a u32 length and the extra
// key bytes. Per-request extra keys (a tenant's `cache_salt`, a LoRA name, ...) enter the
// first block only: the chain carries them into every later key, as vLLM does with
// cache_salt. Only full blocks get keys; a partial block is never cached.
//
// Algorithms (--prefix-caching-hash-algo): sha256 (default; OpenSSL EVP, collision-resistant
// across tenants) or xxhash (XXH3-128; several times faster, not cryptographic). The
// BlockPool also compares the block's token ids on a hit, so even a collision only costs
// a cache miss, never wrong K/V (nano-vllm).
//
// Thread-safe: the functions are pure (a thread-local scratch buffer only).
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda {

enum class PrefixHashAlgo { kSha256, kXxh3_128 };

// "sha256" or "xxhash" (also "xxh3_128"); throws InvalidArgument naming the flag otherwise.
PrefixHashAlgo ParsePrefixHashAlgo(std::string_view name);
std::string_view PrefixHashAlgoName(PrefixHashAlgo algo);

// A block key: 32 bytes of SHA-256, or 16 bytes of XXH3-128 followed by 16 zero bytes.
struct BlockHash {
  std::array<uint8_t, 32> bytes{};

  friend bool operator==(const BlockHash&, const BlockHash&) = default;
  std::string Hex() const;
};

struct BlockHashHasher {
  size_t operator()(const BlockHash& h) const {
    uint64_t x;
    std::memcpy(&x, h.bytes.data(), sizeof(x));
    return static_cast<size_t>(x);
  }
};

// The key of one full block. `parent` is nullptr for the first block of a request.
BlockHash HashBlockTokens(PrefixHashAlgo algo, const BlockHash* parent,
                          std::span<const int32_t> block_token_ids, std::string_view extra_keys);

// Appends to `hashes` the keys of the full blocks of `token_ids` beyond the
// hashes->size() already there, up to `max_num_blocks` keys in all (and at most
// token_ids.size() / block_size). `extra_keys` is used for block 0 only.
void ComputeBlockHashes(PrefixHashAlgo algo, std::span<const int32_t> token_ids,
                        int32_t block_size, std::string_view extra_keys,
                        int64_t max_num_blocks, std::vector<BlockHash>* hashes);

}  // namespace pagoda
