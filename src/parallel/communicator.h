// Communicator: the collectives that tensor parallelism needs between the ranks holding one
// model's shards (Megatron style): a sum all-reduce after each row-parallel layer (attention's
// output projection, the MLP's down projection), so that every rank carries the same residual
// stream.
//
// LocalGroup: `size` ranks as threads of one process sharing host memory (tensor parallelism
// over CPU backends, and the CPU tests of the sharded model). Every rank gets the same bits:
// each element is summed in rank order 0, 1, ..., size - 1. A GPU group goes through NCCL.
//
// Every rank must make the same calls in the same order with the same sizes (as with NCCL);
// a size mismatch throws on every rank (InvalidArgument) instead of hanging.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace pagoda {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // data[0, n) = the sum of every rank's data[0, n) in host memory, the same bits on every rank.
  virtual void AllReduceSum(float* data, int64_t n) = 0;
  // The same over device memory, enqueued on `stream` (a cudaStream_t; NCCL's groups). The
  // default throws Unsupported: a host group cannot reach device memory.
  virtual void AllReduceSumOnDevice(float* data, int64_t n, void* stream);
};

// The communicators of one group of ranks.
class CommunicatorGroup {
 public:
  virtual ~CommunicatorGroup() = default;
  virtual int size() const = 0;
  // Rank r's communicator, for the thread that runs rank r.
  virtual Communicator& rank(int r) = 0;
};

class LocalGroup : public CommunicatorGroup {
 public:
  // REQUIRES: size >= 1 (throws InvalidArgument otherwise).
  explicit LocalGroup(int size);
  ~LocalGroup() override;
  LocalGroup(const LocalGroup&) = delete;
  LocalGroup& operator=(const LocalGroup&) = delete;

  int size() const override;
  Communicator& rank(int r) override;

  struct Shared;

 private:
  std::unique_ptr<Shared> shared_;
  std::vector<std::unique_ptr<Communicator>> ranks_;
};

}  // namespace pagoda
