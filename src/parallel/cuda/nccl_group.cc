#include "parallel/cuda/nccl_group.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace pagoda {
namespace {

// NCCL is opened at run time (dlopen), on the first NcclGroup: pagoda starts on machines
// without it, and only tensor parallelism across GPUs asks for it.
struct Nccl {
  decltype(&ncclCommInitAll) comm_init_all = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
};

const Nccl& LoadNccl() {
  static const Nccl nccl = [] {
    void* lib = ::dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
    if (lib == nullptr) lib = ::dlopen("libnccl.so", RTLD_NOW | RTLD_GLOBAL);
    if (lib == nullptr) {
      const char* why = ::dlerror();
      ThrowUnsupported(std::string("tensor parallelism across GPUs needs NCCL (libnccl.so.2, part of the CUDA "
                                   "toolkit): ") + (why != nullptr ? why : "not found"));
    }
    Nccl n;
    n.comm_init_all = reinterpret_cast<decltype(n.comm_init_all)>(::dlsym(lib, "ncclCommInitAll"));
    n.all_reduce = reinterpret_cast<decltype(n.all_reduce)>(::dlsym(lib, "ncclAllReduce"));
    n.comm_destroy = reinterpret_cast<decltype(n.comm_destroy)>(::dlsym(lib, "ncclCommDestroy"));
    n.error_string = reinterpret_cast<decltype(n.error_string)>(::dlsym(lib, "ncclGetErrorString"));
    if (!n.comm_init_all || !n.all_reduce || !n.comm_destroy || !n.error_string) {
      ThrowUnsupported("libnccl.so.2 lacks ncclCommInitAll / ncclAllReduce / ncclCommDestroy / ncclGetErrorString");
    }
    return n;
  }();
  return nccl;
}

void CheckNccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) {
    ThrowError(ErrorCode::kInternal, std::string("NCCL error in ") + what + ": " + LoadNccl().error_string(r));
  }
}

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}
  ~NcclCommunicator() override { (void)LoadNccl().comm_destroy(comm_); }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void AllReduceSum(float*, int64_t) override {
    ThrowUnsupported("an NCCL group sums device memory (AllReduceSumOnDevice)");
  }
  void AllReduceSumOnDevice(float* data, int64_t n, void* stream) override {
    if (size_ == 1 || n == 0) return;
    CheckNccl(LoadNccl().all_reduce(data, data, static_cast<size_t>(n), ncclFloat, ncclSum, comm_,
                                    static_cast<cudaStream_t>(stream)),
              "ncclAllReduce");
  }

 private:
  ncclComm_t comm_;
  int rank_, size_;
};

}  // namespace

NcclGroup::NcclGroup(int size) {
  PAGODA_ENSURE(size >= 1, ErrorCode::kInvalidArgument, "an NCCL group needs at least 1 rank (got " << size << ")");
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) {
    (void)cudaGetLastError();
    devices = 0;
  }
  if (devices < size) {
    ThrowUnsupported("--tensor-parallel-size " + std::to_string(size) + " needs " + std::to_string(size) +
                     " GPUs; this machine has " + std::to_string(devices));
  }
  // The device machines forbid NVLink multicast; NCCL reads this when it initializes.
  ::setenv("NCCL_NVLS_ENABLE", "0", 1);
  std::vector<ncclComm_t> comms(size);
  std::vector<int> devlist(size);
  for (int r = 0; r < size; ++r) devlist[r] = r;
  CheckNccl(LoadNccl().comm_init_all(comms.data(), size, devlist.data()), "ncclCommInitAll");
  for (int r = 0; r < size; ++r) ranks_.push_back(std::make_unique<NcclCommunicator>(comms[r], r, size));
}

NcclGroup::~NcclGroup() = default;

Communicator& NcclGroup::rank(int r) {
  PAGODA_CHECK(r >= 0 && r < size()) << "NcclGroup::rank(" << r << ") of " << size();
  return *ranks_[r];
}

}  // namespace pagoda
