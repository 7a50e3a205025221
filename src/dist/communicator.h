// Communicator: the collectives data-parallel training needs, behind one interface (issue #25, docs/distributed.md).
//
// Implementations (make_communicator picks one from the launcher's environment):
//   SingleCommunicator  one process; every collective is a copy or nothing; needs no MPI at run time.
//   MpiCommunicator     host buffers over MPI (dist/mpi_communicator.h; builds with MPI only).
//   NcclCommunicator    device buffers over NCCL, bootstrapped through MPI (dist/cuda/nccl_communicator.h; builds
//                       with CUDA and MPI only). Its buffers are device pointers; a host buffer there is undefined.
//
// Determinism contract of every reduction (all_reduce_sum, reduce_scatter_sum): element i of the result is
// ((x_0[i] + x_1[i]) + x_2[i]) + ... + x_{W-1}[i], summed in RANK ORDER in the buffer's own type, and every rank
// receives bitwise the same value. Results therefore depend on the world size W but never on the MPI/NCCL algorithm,
// the topology or timing. (MPI_Allreduce and ncclAllReduce promise no such order; we move data with them and add
// ourselves.)
//
// Chunking: reduce_scatter_sum and all_gather split a buffer of n elements into W consecutive chunks,
// chunk r = [chunk_begin(n, W, r), chunk_begin(n, W, r + 1)): the first n % W chunks hold one element more.
//
// Failure: every collective either completes on all ranks or the job ends. abort() ends EVERY rank of the job (MPI:
// MPI_Abort; NCCL: ncclCommAbort, then MPI_Abort) after printing the message on this rank's stderr; it never returns.
// The MPI and NCCL implementations also end the job when a collective does not finish within the timeout
// (HYBRIDLM_COLLECTIVE_TIMEOUT seconds, default 600): no rank hangs forever.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace hlm {

inline constexpr const char* kCollectiveTimeoutEnv = "HYBRIDLM_COLLECTIVE_TIMEOUT";

// First element of chunk r when n elements are split over `world` ranks (see above); r may be `world` (= n).
inline size_t chunk_begin(size_t n, int world, int r) {
  const size_t w = static_cast<size_t>(world), q = n / w, extra = n % w, rr = static_cast<size_t>(r);
  return rr * q + (rr < extra ? rr : extra);
}
inline size_t chunk_size(size_t n, int world, int r) { return chunk_begin(n, world, r + 1) - chunk_begin(n, world, r); }

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual const char* backend() const = 0;  // "single", "mpi", "nccl"
  virtual int rank() const = 0;             // 0 .. size()-1
  virtual int size() const = 0;             // W
  virtual int local_rank() const = 0;       // rank among the processes of this node (selects the GPU)
  virtual int local_size() const = 0;

  // In place: data[i] <- Σ_r data_r[i] in rank order (see above), on every rank.
  virtual void all_reduce_sum(float* data, size_t n) = 0;
  virtual void all_reduce_sum(double* data, size_t n) = 0;
  // send holds n elements on every rank; recv (chunk_size(n, W, rank) elements) gets chunk `rank` of the sum.
  virtual void reduce_scatter_sum(const float* send, float* recv, size_t n) = 0;
  // send holds this rank's chunk (chunk_size(n, W, rank) elements); recv (n elements) gets every chunk, in order.
  // send may alias recv + chunk_begin(n, W, rank).
  virtual void all_gather(const float* send, float* recv, size_t n) = 0;
  // Copies `bytes` bytes of root's `data` into every rank's `data`.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // Ends every rank of the job with `exit_code` after printing "hybridlm: rank R: <message>" (see above).
  [[noreturn]] virtual void abort(const std::string& message, int exit_code) = 0;
};

// One process: rank 0 of 1.
class SingleCommunicator final : public Communicator {
 public:
  const char* backend() const override { return "single"; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 1; }
  void all_reduce_sum(float*, size_t) override {}
  void all_reduce_sum(double*, size_t) override {}
  void reduce_scatter_sum(const float* send, float* recv, size_t n) override;
  void all_gather(const float* send, float* recv, size_t n) override;
  void broadcast(void*, size_t, int root) override;
  void barrier() override {}
  [[noreturn]] void abort(const std::string& message, int exit_code) override;
};

// What the launcher says about this process, from its environment (no MPI call): Open MPI's mpirun
// (OMPI_COMM_WORLD_SIZE/RANK/LOCAL_RANK), Slurm's srun (SLURM_STEP_NUM_TASKS, SLURM_PROCID, SLURM_LOCALID; only
// inside a job step, so a batch script's own shell is not a rank), PMIx (PMIX_RANK) and PMI (PMI_SIZE/PMI_RANK).
struct LaunchInfo {
  bool launched = false;  // a launcher started this process
  std::string launcher;   // "mpirun", "srun", "pmix", "pmi", or "" when not launched
  int world_size = 1;     // as the launcher reports it (-1 when it does not say)
  int rank = 0;
  int local_rank = 0;
};
LaunchInfo launch_info_from_env();

// Whether this build can use MPI (configured with MPI found; CMake option HYBRIDLM_MPI).
bool communicator_mpi_available();

// The communicator for host buffers: an MpiCommunicator when a launcher started this process and the build has
// MPI, else SingleCommunicator. Input error (exit 2) when a launcher reports several ranks but the build has no MPI.
std::unique_ptr<Communicator> make_host_communicator();

}  // namespace hlm
