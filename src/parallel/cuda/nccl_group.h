// NcclGroup: `size` ranks on GPUs 0..size-1 of this process, one NCCL communicator each
// (ncclCommInitAll), for tensor parallelism across GPUs. AllReduceSumOnDevice is
// ncclAllReduce (sum, f32) enqueued on the caller's stream, so it can be captured into the
// decode-step CUDA graphs. NCCL sums in its own order, but every rank receives the same bits.
//
// Built only with -DPAGODA_CUDA=ON; libnccl.so.2 is opened when the first group is made (a
// clear Unsupported error without it). NVLink multicast (NVLS) stays off: the constructor sets
// NCCL_NVLS_ENABLE=0 in the process environment, which child processes inherit (the device
// machines forbid multicast).
#pragma once

#include <memory>
#include <vector>

#include "parallel/communicator.h"

namespace pagoda {

class NcclGroup : public CommunicatorGroup {
 public:
  // Throws Unsupported when fewer than `size` GPUs exist or NCCL cannot be opened, Internal on
  // an NCCL error.
  explicit NcclGroup(int size);
  ~NcclGroup() override;
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  int size() const override { return static_cast<int>(ranks_.size()); }
  Communicator& rank(int r) override;

 private:
  std::vector<std::unique_ptr<Communicator>> ranks_;
};

}  // namespace pagoda
