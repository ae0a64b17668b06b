#include "kernels/cuda/sampling.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/cuda_check.h"

namespace pagoda::cuda {
namespace {

constexpr int kCopyThreads = 256;
constexpr int kCopyItems = 8;  // elements a copy thread handles
constexpr int kThreads = 512;  // a sampled row's block
constexpr int kItems = 4;      // consecutive elements a thread scans per tile
constexpr int kTile = kThreads * kItems;
constexpr int64_t kChunkItems = int64_t{1} << 23;  // sort buffers: 24 bytes an element

// The sort key: -0.0 as +0.0 (the CPU's comparison sees them equal, so ties go by id) and NaN
// as -inf (the CPU's order is undefined there; the greedy choice checks row[0] itself).
__device__ __forceinline__ float SortKey(float x) {
  if (isnan(x)) return -INFINITY;
  return x == 0.0f ? 0.0f : x;
}

// The rows to draw from are sorted together, by one radix sort of 64-bit keys: the row in the
// high half, the sort key in the low half mapped so that larger floats give smaller unsigned
// values. The sort is stable and the ids go in ascending, so each row comes out by (logit
// descending, id ascending), the CPU sampler's order.
__device__ __forceinline__ uint64_t RowKey(int row, float x) {
  const uint32_t b = __float_as_uint(SortKey(x));
  const uint32_t ascending = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return (static_cast<uint64_t>(row) << 32) | ~ascending;
}
__device__ __forceinline__ float KeyValue(uint64_t key) {
  const uint32_t ascending = ~static_cast<uint32_t>(key);
  return __uint_as_float((ascending & 0x80000000u) ? (ascending & 0x7fffffffu) : ~ascending);
}

// The CPU sampler's penalties on one logit (kernels/cpu/sampler.cc), with explicit roundings so
// that nothing is fused into a multiply-add.
__device__ __forceinline__ float Penalize(float x, const SampleRowParams& row, int32_t output_count) {
  if (row.repetition_penalty != 1.0) {
    const double xd = static_cast<double>(x);
    x = x > 0.0f ? __double2float_rn(__ddiv_rn(xd, row.repetition_penalty))
                 : __double2float_rn(__dmul_rn(xd, row.repetition_penalty));
  }
  if ((row.frequency_penalty != 0.0 || row.presence_penalty != 0.0) && output_count > 0) {
    const double d = __dadd_rn(__dmul_rn(row.frequency_penalty, static_cast<double>(output_count)), row.presence_penalty);
    x = __fsub_rn(x, __double2float_rn(d));
  }
  return x;
}

// A candidate (value, index); better: larger, or equal and lower index. (-inf, INT_MAX) is none.
struct Best {
  float v;
  int i;
};
__device__ __forceinline__ bool Better(float v, int i, const Best& b) { return v > b.v || (v == b.v && i < b.i); }
struct BetterOp {
  __device__ __forceinline__ Best operator()(const Best& a, const Best& b) const { return Better(b.v, b.i, a) ? b : a; }
};
struct MaxOp {
  __device__ __forceinline__ double operator()(double a, double b) const { return fmax(a, b); }
};
struct MinOp {
  __device__ __forceinline__ int operator()(int a, int b) const { return a < b ? a : b; }
};

// Block-wide reductions and scans; each waits for the block before reusing the storage and
// returns the result to every thread. The order of a reduction depends on the block size
// and the element count only.
struct BlockShared {
  union {
    cub::BlockReduce<double, kThreads>::TempStorage d;
    cub::BlockReduce<int, kThreads>::TempStorage i;
    cub::BlockReduce<Best, kThreads>::TempStorage b;
    cub::BlockScan<double, kThreads>::TempStorage scan;
  } cub;
  double d;
  int i;
  Best b;
};

struct PlusOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};

// x reduced over the block by `op` through `storage`, handed to every thread through `slot`.
template <typename T, typename Op, typename Storage>
__device__ T BlockAll(T x, Op op, Storage& storage, T& slot) {
  __syncthreads();
  const T t = cub::BlockReduce<T, kThreads>(storage).Reduce(x, op);
  if (threadIdx.x == 0) slot = t;
  __syncthreads();
  return slot;
}
__device__ double BlockSum(double x, BlockShared& s) { return BlockAll(x, PlusOp(), s.cub.d, s.d); }
__device__ double BlockMax(double x, BlockShared& s) { return BlockAll(x, MaxOp(), s.cub.d, s.d); }
__device__ int BlockMin(int x, BlockShared& s) { return BlockAll(x, MinOp(), s.cub.i, s.i); }
__device__ int BlockSumInt(int x, BlockShared& s) { return BlockAll(x, PlusOp(), s.cub.i, s.i); }
__device__ Best BlockBest(Best x, BlockShared& s) { return BlockAll(x, BetterOp(), s.cub.b, s.b); }

// sum of value(i) for i in [0, n).
template <typename Value>
__device__ double SumOf(int n, Value value, BlockShared& s) {
  double local = 0.0;
  for (int i = threadIdx.x; i < n; i += kThreads) local += value(i);
  return BlockSum(local, s);
}

// The first i in [0, n) whose cumulative sum value(0) + ... + value(i) satisfies pred, or -1.
// Tiles of kTile elements, each thread kItems consecutive ones; stops at the tile where found.
template <typename Value, typename Pred>
__device__ int FindFirstCumulative(int n, Value value, Pred pred, BlockShared& s) {
  double carry = 0.0;
  for (int base = 0; base < n; base += kTile) {
    const int first = base + threadIdx.x * kItems;
    double v[kItems];
    double local = 0.0;
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      v[j] = first + j < n ? value(first + j) : 0.0;
      local += v[j];
    }
    double before, tile_total;
    __syncthreads();
    cub::BlockScan<double, kThreads>(s.cub.scan).ExclusiveSum(local, before, tile_total);
    double cum = carry + before;
    int found = INT_MAX;
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      cum += v[j];
      if (found == INT_MAX && first + j < n && pred(cum)) found = first + j;
    }
    found = BlockMin(found, s);
    if (found != INT_MAX) return found;
    carry += tile_total;
  }
  return -1;
}

// The first i in [begin, n) with pred(i), or -1 (stops at the first tile that has one).
template <typename Pred>
__device__ int FindFirst(int begin, int n, Pred pred, BlockShared& s) {
  for (int base = begin; base < n; base += kTile) {
    int found = INT_MAX;
    for (int i = base + threadIdx.x; i < n && i < base + kTile; i += kThreads) {
      if (pred(i)) {
        found = i;
        break;
      }
    }
    found = BlockMin(found, s);
    if (found != INT_MAX) return found;
  }
  return -1;
}

// The CPU's ArgMax of value(i): the lowest index of the largest value (NaN never), 0 when raw[0]
// is NaN.
template <typename Value>
__device__ int ArgMax(Value value, const float* raw, int vocab, BlockShared& s) {
  Best b{-INFINITY, INT_MAX};
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    float v = value(i);
    if (isnan(v)) v = -INFINITY;
    if (Better(v, i, b)) b = Best{v, i};
  }
  b = BlockBest(b, s);
  return isnan(raw[0]) || b.i == INT_MAX ? 0 : b.i;
}

// The draw of a row sorted by (logit descending, id ascending): the CPU sampler's steps.
__device__ int Draw(const uint64_t* keys, const int* ids, int vocab, const SampleRowParams& row, BlockShared& s) {
  int n = vocab;
  if (row.top_k > 0 && row.top_k < n) n = static_cast<int>(row.top_k);
  const double inv_t = row.inv_temperature;
  const double m = __dmul_rn(static_cast<double>(KeyValue(keys[0])), inv_t);
  auto prob = [&](int i) { return exp(__dsub_rn(__dmul_rn(static_cast<double>(KeyValue(keys[i])), inv_t), m)); };
  if (row.top_p < 1.0) {
    const double sum = SumOf(n, prob, s);
    const double top_p = row.top_p;
    const int i = FindFirstCumulative(
        n, [&](int i) { return __ddiv_rn(prob(i), sum); }, [&](double cum) { return cum >= top_p; }, s);
    if (i >= 0) n = i + 1;
  }
  if (row.min_p > 0.0) {
    const double threshold = __dmul_rn(row.min_p, prob(0));
    const int i = FindFirst(1, n, [&](int i) { return !(prob(i) >= threshold); }, s);
    if (i >= 0) n = i;
  }
  const double total = SumOf(n, prob, s);
  const double u = __dmul_rn(row.uniform, total);
  const int i = FindFirstCumulative(n, prob, [&](double cum) { return u < cum; }, s);
  return ids[i >= 0 ? i : n - 1];
}

// ComputeLogprobs of the raw row for `token` and the top k.
__device__ void Logprobs(const float* raw, int vocab, int token, int k, SampleResult* out, BlockShared& s) {
  double m = -INFINITY;
  for (int i = threadIdx.x; i < vocab; i += kThreads) m = fmax(m, static_cast<double>(raw[i]));
  m = BlockMax(m, s);
  const double sum = SumOf(vocab, [&](int i) { return exp(__dsub_rn(static_cast<double>(raw[i]), m)); }, s);
  const double lse = __dadd_rn(m, log(sum));
  const float x = raw[token];
  int above = 0;
  for (int i = threadIdx.x; i < vocab; i += kThreads) above += raw[i] > x;
  above = BlockSumInt(above, s);
  if (threadIdx.x == 0) {
    out->logprob = __dsub_rn(static_cast<double>(x), lse);
    out->rank = 1 + static_cast<int64_t>(above);
    out->num_top = 0;
  }
  // The top k, one pick a round: each thread keeps the best of its elements (i = thread mod
  // kThreads) after the last pick; the warp of the thread whose element was picked looks through
  // that thread's elements again, together.
  auto after = [](float v, int i, const Best& pick) { return v < pick.v || (v == pick.v && i > pick.i); };
  Best mine{-INFINITY, INT_MAX};
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float v = raw[i];
    if (!isnan(v) && Better(v, i, mine)) mine = Best{v, i};
  }
  const int kk = k < vocab ? k : vocab;
  const int lane = threadIdx.x & 31;
  for (int t = 0; t < kk; ++t) {
    const Best b = BlockBest(mine, s);
    if (b.i == INT_MAX) break;  // only NaN left
    if (threadIdx.x == 0) {
      out->top_ids[t] = b.i;
      out->top_logprobs[t] = __dsub_rn(static_cast<double>(b.v), lse);
      out->num_top = t + 1;
    }
    const int owner = b.i % kThreads;
    if ((threadIdx.x >> 5) == (owner >> 5)) {  // warp-uniform
      Best c{-INFINITY, INT_MAX};
      for (int i = owner + lane * kThreads; i < vocab; i += 32 * kThreads) {
        const float v = raw[i];
        if (!isnan(v) && after(v, i, b) && Better(v, i, c)) c = Best{v, i};
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        const Best other{__shfl_xor_sync(0xffffffffu, c.v, o), __shfl_xor_sync(0xffffffffu, c.i, o)};
        if (Better(other.v, other.i, c)) c = other;
      }
      if (threadIdx.x == owner) mine = c;
    }
  }
}

__global__ void __launch_bounds__(kCopyThreads) CopyKernel(const float* logits, int64_t row_stride, int vocab,
                                                           const SampleRowParams* rows, int row0, uint64_t* keys,
                                                           int* ids) {
  const int r = blockIdx.y;
  const SampleRowParams& row = rows[row0 + r];
  if (row.greedy && !row.penalized) return;  // its arg max reads the logits
  const float* src = logits + row.logits_row * row_stride;
  uint64_t* k = keys + static_cast<int64_t>(r) * vocab;
  int* id = ids + static_cast<int64_t>(r) * vocab;
  const int begin = blockIdx.x * kCopyThreads * kCopyItems;
  const int end = min(vocab, begin + kCopyThreads * kCopyItems);
  for (int i = begin + threadIdx.x; i < end; i += kCopyThreads) {
    k[i] = RowKey(r, src[i]);
    id[i] = i;
  }
}

__global__ void PenaltyKernel(const float* logits, int64_t row_stride, int vocab, const SampleRowParams* rows,
                              int row0, int chunk_rows, const PenaltyEntry* entries, int num_entries, uint64_t* keys) {
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= num_entries) return;
  const PenaltyEntry pe = entries[e];
  const int r = pe.row - row0;
  if (r < 0 || r >= chunk_rows || pe.token < 0 || pe.token >= vocab) return;
  const SampleRowParams& row = rows[pe.row];
  if (!row.penalized) return;
  const float x = logits[row.logits_row * row_stride + pe.token];
  keys[static_cast<int64_t>(r) * vocab + pe.token] = RowKey(r, Penalize(x, row, pe.output_count));
}

__global__ void __launch_bounds__(kThreads) SampleKernel(const float* logits, int64_t row_stride, int vocab,
                                                         const SampleRowParams* rows, int row0, const uint64_t* keys,
                                                         const uint64_t* sorted_keys, const int* sorted_ids,
                                                         SampleResult* results) {
  __shared__ BlockShared s;
  const int r = blockIdx.x;
  const SampleRowParams row = rows[row0 + r];
  const float* raw = logits + row.logits_row * row_stride;
  const int64_t at = static_cast<int64_t>(r) * vocab;
  int token;
  if (row.greedy && row.penalized) {
    token = ArgMax([&](int i) { return KeyValue(keys[at + i]); }, raw, vocab, s);
  } else if (row.greedy) {
    token = ArgMax([&](int i) { return raw[i]; }, raw, vocab, s);
  } else {
    token = Draw(sorted_keys + at, sorted_ids + at, vocab, row, s);
  }
  SampleResult* out = results + row0 + r;
  if (threadIdx.x == 0) out->token = token;
  if (row.logprobs >= 0) Logprobs(raw, vocab, token, min(row.logprobs, kMaxTopLogprobs), out, s);
}

// Bits of the sort key for `rows` rows: the float's 32 and the row's.
int SortBits(int64_t rows) {
  int bits = 32;
  while ((int64_t{1} << (bits - 32)) < rows) ++bits;
  return bits;
}

// The scratch's pieces, each 256-byte aligned.
struct Layout {
  int64_t chunk = 0;
  size_t keys = 0, ids = 0, keys2 = 0, ids2 = 0, temp = 0, temp_bytes = 0, total = 0;
};

Layout MakeLayout(int64_t rows, int64_t vocab) {
  PAGODA_CHECK(vocab > 0 && vocab < INT_MAX / 2) << "SampleRows: a vocabulary of " << vocab;
  Layout l;
  l.chunk = std::max<int64_t>(1, std::min(rows, SampleChunkRows(vocab)));
  const size_t items = static_cast<size_t>(l.chunk * vocab);
  auto take = [&](size_t bytes) {
    const size_t at = l.total;
    l.total += (bytes + 255) / 256 * 256;
    return at;
  };
  l.keys = take(items * sizeof(uint64_t));
  l.ids = take(items * sizeof(int));
  l.keys2 = take(items * sizeof(uint64_t));
  l.ids2 = take(items * sizeof(int));
  cub::DoubleBuffer<uint64_t> k(nullptr, nullptr);
  cub::DoubleBuffer<int> v(nullptr, nullptr);
  PAGODA_CUDA_CHECK(
      cub::DeviceRadixSort::SortPairs(nullptr, l.temp_bytes, k, v, static_cast<int>(items), 0, SortBits(l.chunk)));
  l.temp = take(l.temp_bytes);
  return l;
}

}  // namespace

int64_t SampleChunkRows(int64_t vocab) {
  // At most 32768 rows a turn: the copy kernel's grid has a row a y index (< 65536).
  return std::clamp<int64_t>(kChunkItems / std::max<int64_t>(vocab, 1), 1, 32768);
}

size_t SampleScratchBytes(int64_t rows, int64_t vocab) { return MakeLayout(rows, vocab).total; }

void SampleRows(const SampleRowsParams& p, cudaStream_t stream) {
  if (p.num_rows <= 0) return;
  const Layout l = MakeLayout(p.num_rows, p.vocab);
  PAGODA_CHECK(p.scratch != nullptr && p.scratch_bytes >= l.total)
      << "SampleRows: " << p.scratch_bytes << " bytes of scratch, " << l.total << " needed";
  PAGODA_CHECK(p.num_drawn >= 0 && p.num_drawn <= p.num_rows) << "SampleRows: " << p.num_drawn << " drawn rows";
  char* base = static_cast<char*>(p.scratch);
  uint64_t* keys = reinterpret_cast<uint64_t*>(base + l.keys);
  int* ids = reinterpret_cast<int*>(base + l.ids);
  uint64_t* keys2 = reinterpret_cast<uint64_t*>(base + l.keys2);
  int* ids2 = reinterpret_cast<int*>(base + l.ids2);
  const int vocab = static_cast<int>(p.vocab);
  for (int64_t row0 = 0; row0 < p.num_rows; row0 += l.chunk) {
    const int rows = static_cast<int>(std::min(l.chunk, p.num_rows - row0));
    const int drawn = static_cast<int>(std::clamp<int64_t>(p.num_drawn - row0, 0, rows));
    const dim3 copy_grid(static_cast<unsigned>((vocab + kCopyThreads * kCopyItems - 1) / (kCopyThreads * kCopyItems)),
                         static_cast<unsigned>(rows));
    CopyKernel<<<copy_grid, kCopyThreads, 0, stream>>>(p.logits, p.row_stride, vocab, p.rows, static_cast<int>(row0),
                                                       keys, ids);
    PAGODA_CUDA_CHECK_LAUNCH("sampling CopyKernel");
    if (p.num_penalties > 0) {
      const int n = static_cast<int>(p.num_penalties);
      PenaltyKernel<<<(n + 255) / 256, 256, 0, stream>>>(p.logits, p.row_stride, vocab, p.rows, static_cast<int>(row0),
                                                         rows, p.penalties, n, keys);
      PAGODA_CUDA_CHECK_LAUNCH("sampling PenaltyKernel");
    }
    // The drawn rows (the chunk's first `drawn`) in one sort; the greedy rows' keys after them
    // are left where they are.
    const uint64_t* sorted_keys = keys;
    const int* sorted_ids = ids;
    if (drawn > 0) {
      cub::DoubleBuffer<uint64_t> k(keys, keys2);
      cub::DoubleBuffer<int> v(ids, ids2);
      size_t temp_bytes = l.temp_bytes;
      PAGODA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(base + l.temp, temp_bytes, k, v, drawn * vocab, 0,
                                                        SortBits(drawn), stream));
      PAGODA_CUDA_CHECK_LAUNCH("cub::DeviceRadixSort");
      sorted_keys = k.Current();
      sorted_ids = v.Current();
    }
    SampleKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(p.logits, p.row_stride, vocab, p.rows,
                                                                      static_cast<int>(row0), keys, sorted_keys,
                                                                      sorted_ids, p.results);
    PAGODA_CUDA_CHECK_LAUNCH("SampleKernel");
  }
}

}  // namespace pagoda::cuda
