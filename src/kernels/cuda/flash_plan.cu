// FlashAttention's host-side planning: which steps it serves, its scratch, the split shape's
// depth, the wide shape's work items and the launch shape of a step (flash_attention.h).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "kernels/cuda/env_switch.h"
#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/flash_kernel_args.cuh"
#include "kernels/cuda/kv_codec.cuh"
#include "kernels/cuda/launch_info.h"

namespace pagoda::cuda {

using namespace flash;

bool FlashAttentionSupports(const PagedAttentionParams& p) {
  if (p.head_dim != 64 && p.head_dim != 128) return false;
  if (!(p.scale > 0.0f)) return false;  // the tile takes each row's maximum before scaling
  const KVQuant quant = p.k_format.quant;
  if (p.v_format.quant != quant || p.k_format.head_dim != p.head_dim || p.v_format.head_dim != p.head_dim) return false;
  switch (quant) {
    case KVQuant::kNone:
      if (p.kv_dtype != DType::kBF16 && p.kv_dtype != DType::kF16) return false;
      break;
    case KVQuant::kFp8E4M3:
    case KVQuant::kFp8E5M2:
    case KVQuant::kNvfp4:
      break;
    case KVQuant::kKivi2: {  // codes spans only (the side pool holds each query's own block)
      if (!p.codes_only || !p.k_format.per_channel || p.v_format.per_channel || !FlashRowsBulkOn()) return false;
      if (p.block_size < 16) return false;  // at most four runs' per-channel words a K tile
      const int64_t g = std::min(p.v_format.group, p.head_dim);  // V groups: whole 32-column blocks
      if (g <= 0 || g % 32 != 0 || (g & (g - 1)) != 0 || p.head_dim % g != 0) return false;
      break;
    }
    case KVQuant::kInt8:  // scale groups of 8k values that divide the head dim
    case KVQuant::kInt4:
      for (const KVArrayFormat* f : {&p.k_format, &p.v_format}) {
        const int64_t g = std::min(f->group, p.head_dim);
        if (g <= 0 || g % 8 != 0 || p.head_dim % g != 0) return false;
      }
      break;
    default:
      return false;
  }
  if (p.k_format.heavy_rows != 0 || p.v_format.heavy_rows != 0) return false;
  if (quant != KVQuant::kNone && (!Aligned16(p.k_cache) || !Aligned16(p.v_cache))) return false;
  if (p.num_kv_heads <= 0 || p.num_heads % p.num_kv_heads != 0 || p.num_heads / p.num_kv_heads > 16) return false;
  if (p.block_size <= 0 || (p.block_size & (p.block_size - 1)) != 0) return false;
  if (quant != KVQuant::kNone) {
    // A tile's runs (a paged block's rows of the KV head, at most 64) start 16-byte aligned and
    // are whole 16-byte pieces, at most 32 a tile (one a lane).
    if (p.block_size < 2) return false;
    for (const KVArrayFormat* f : {&p.k_format, &p.v_format}) {
      if (f->block_size != p.block_size || f->num_heads != p.num_kv_heads) return false;
      if (std::min<int64_t>(p.block_size, 64) * DeviceKVRowBytes(*f) % 16 != 0) return false;
    }
  }
  return p.num_tokens <= 2147483647 && p.num_kv_heads <= 65535;
}

int64_t FlashAttentionScratchFloats(int64_t num_tokens, int64_t num_heads, int64_t head_dim) {
  return std::min(num_tokens, kFlashSplitMaxTokens) * num_heads * kFlashMaxSegments * (head_dim + 2);
}

int FlashSplitDepth(int64_t max_keys) {
  // Every row of at most max_keys keys: segments of 128 keys for rows up to kFlashTinyRowKeys,
  // 256 up to kFlashShortRowKeys, 512 above (+1: a window may straddle one more), rounded up to
  // a power of two.
  const int64_t k = std::max<int64_t>(max_keys - 1, 0);
  int64_t need = std::min(k, kFlashTinyRowKeys - 1) / kFlashSegmentUnit + 2;
  if (max_keys > kFlashTinyRowKeys) need = std::max(need, std::min(k, kFlashShortRowKeys - 1) / (2 * kFlashSegmentUnit) + 2);
  if (max_keys > kFlashShortRowKeys) need = std::max(need, k / (4 * kFlashSegmentUnit) + 2);
  need = std::min<int64_t>(kFlashMaxSegments, need);
  int depth = 1;
  while (depth < need) depth *= 2;
  return std::min(depth, kFlashMaxSegments);
}

int64_t FlashTokensPerItem(const PagedAttentionParams& p, int64_t max_keys) {
  const int64_t per_warp = 16 / std::max<int64_t>(p.num_heads / std::max<int64_t>(p.num_kv_heads, 1), 1);
  if (p.k_format.quant == KVQuant::kKivi2) return per_warp;  // one-warp blocks (FlashKivi2Items)
  const int64_t rows64 = kWideWarps * per_warp;
  return WideOnWgmma(p, max_keys) ? rows64 * FlashWgmmaGroups(p.head_dim, WgmmaTma(p.block_size)) : rows64;
}

std::vector<FlashWorkItem> FlashWorkItems(std::span<const int32_t> query_start_loc, int64_t tokens_per_item) {
  std::vector<FlashWorkItem> items;
  for (size_t s = 0; s + 1 < query_start_loc.size(); ++s) {
    const int32_t begin = query_start_loc[s], end = query_start_loc[s + 1];
    // The sequence's last run (the most keys) first: long blocks start early.
    for (int64_t stop = end; stop > begin; stop -= tokens_per_item) {
      const int64_t start = std::max<int64_t>(begin, stop - tokens_per_item);
      items.push_back({static_cast<int32_t>(start), static_cast<int32_t>(stop - start)});
    }
  }
  return items;
}

namespace {
int64_t flash_split_max_tokens = [] {
  const char* e = std::getenv("PAGODA_FLASH_SPLIT_MAX_TOKENS");
  return e == nullptr ? kFlashSplitMaxTokens : std::clamp<int64_t>(std::atoll(e), 0, kFlashSplitMaxTokens);
}();
bool flash_kivi2_items = EnvSwitch("PAGODA_FLASH_KIVI2_ITEMS", false);
}  // namespace

bool FlashKivi2Items() { return flash_kivi2_items; }
void SetFlashKivi2Items(bool on) { flash_kivi2_items = on; }

int64_t FlashSplitMaxTokens() { return flash_split_max_tokens; }
void SetFlashSplitMaxTokens(int64_t tokens) { flash_split_max_tokens = std::clamp<int64_t>(tokens, 0, kFlashSplitMaxTokens); }

FlashShape ChooseFlashShape(int64_t num_tokens, int64_t num_seqs, KVQuant quant) {
  if (num_tokens <= flash_split_max_tokens) return FlashShape::kSplit;
  if (num_tokens == num_seqs) return FlashShape::kNarrow;
  return quant == KVQuant::kKivi2 && !flash_kivi2_items ? FlashShape::kNarrow : FlashShape::kWide;
}

}  // namespace pagoda::cuda
