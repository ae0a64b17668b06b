#include "parallel/communicator.h"

#include <algorithm>
#include <barrier>

#include "core/error.h"

namespace pagoda {

void Communicator::AllReduceSumOnDevice(float*, int64_t, void*) {
  ThrowUnsupported("this communicator sums host memory; device buffers need an NCCL group");
}

struct LocalGroup::Shared {
  explicit Shared(int n) : size(n), sync(n), data(n, nullptr), counts(n, 0) {}
  int size;
  std::barrier<> sync;
  std::vector<float*> data;     // each rank's buffer in the current call
  std::vector<int64_t> counts;  // each rank's n in the current call
  std::vector<float> sum;       // the reduced values
};

namespace {

class LocalCommunicator : public Communicator {
 public:
  LocalCommunicator(LocalGroup::Shared* shared, int rank) : s_(shared), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return s_->size; }

  void AllReduceSum(float* data, int64_t n) override {
    if (s_->size == 1) return;
    // 1. Publish this rank's buffer.
    s_->data[rank_] = data;
    s_->counts[rank_] = n;
    s_->sync.arrive_and_wait();
    const bool same = std::all_of(s_->counts.begin(), s_->counts.end(), [&](int64_t c) { return c == n; });
    if (same) {
      // 2. Rank 0 sizes the result; each rank then sums its slice, ranks in order.
      if (rank_ == 0) s_->sum.resize(static_cast<size_t>(n));
      s_->sync.arrive_and_wait();
      const int64_t begin = n * rank_ / s_->size, end = n * (rank_ + 1) / s_->size;
      for (int64_t i = begin; i < end; ++i) {
        float v = s_->data[0][i];
        for (int r = 1; r < s_->size; ++r) v += s_->data[r][i];
        s_->sum[i] = v;
      }
      s_->sync.arrive_and_wait();
      // 3. Everyone copies the whole result; nobody reuses the shared state before all have.
      std::copy(s_->sum.begin(), s_->sum.begin() + n, data);
    }
    s_->sync.arrive_and_wait();
    PAGODA_ENSURE(same, ErrorCode::kInvalidArgument,
                  "AllReduceSum: ranks passed different sizes (rank " << rank_ << ": " << n << ")");
  }

 private:
  LocalGroup::Shared* s_;
  int rank_;
};

}  // namespace

LocalGroup::LocalGroup(int size) {
  PAGODA_ENSURE(size >= 1, ErrorCode::kInvalidArgument, "a tensor-parallel group needs at least 1 rank (got " << size << ")");
  shared_ = std::make_unique<Shared>(size);
  for (int r = 0; r < size; ++r) ranks_.push_back(std::make_unique<LocalCommunicator>(shared_.get(), r));
}

LocalGroup::~LocalGroup() = default;

int LocalGroup::size() const { return shared_->size; }

Communicator& LocalGroup::rank(int r) {
  PAGODA_CHECK(r >= 0 && r < size()) << "LocalGroup::rank(" << r << ") of " << size();
  return *ranks_[r];
}

}  // namespace pagoda
