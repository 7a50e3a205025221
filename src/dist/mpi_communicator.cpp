// MpiCommunicator (contract in mpi_communicator.h and communicator.h). Without MPI (HLM_WITH_MPI unset) only the
// stubs at the end are built.
#include "dist/mpi_communicator.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"

#ifdef HLM_WITH_MPI
// The C API only: Open MPI's and MPICH's deprecated C++ bindings would need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <vector>
#endif

namespace hlm {

double collective_timeout_seconds() {
  const char* v = std::getenv(kCollectiveTimeoutEnv);
  if (v == nullptr || *v == '\0') return 600.0;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  HLM_CHECK_INPUT(end != v && *end == '\0' && s > 0.0, "environment variable ", kCollectiveTimeoutEnv, "='", v,
                  "' is not a positive number of seconds");
  return s;
}

#ifdef HLM_WITH_MPI

bool communicator_mpi_available() { return true; }

namespace {

template <typename T>
MPI_Datatype mpi_type();
template <>
MPI_Datatype mpi_type<float>() { return MPI_FLOAT; }
template <>
MPI_Datatype mpi_type<double>() { return MPI_DOUBLE; }

bool g_serialized = true;  // what MPI_Init_thread granted (mpi_thread_serialized)

int as_count(size_t n, const char* what) {
  HLM_CHECK(n <= static_cast<size_t>(INT_MAX), what, ": ", n, " elements exceed MPI's int counts (use buckets)");
  return static_cast<int>(n);
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    HLM_CHECK(!initialized, "MPI is already initialised in this process (one MpiCommunicator per process)");
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    g_serialized = provided >= MPI_THREAD_SERIALIZED;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Comm node = MPI_COMM_NULL;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local_rank_);
    MPI_Comm_size(node, &local_size_);
    MPI_Comm_free(&node);
    timeout_ = collective_timeout_seconds();
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }

  const char* backend() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }

  void all_reduce_sum(float* data, size_t n) override { all_reduce(data, n); }
  void all_reduce_sum(double* data, size_t n) override { all_reduce(data, n); }

  void reduce_scatter_sum(const float* send, float* recv, size_t n) override { reduce_scatter(send, recv, n); }

  void all_gather(const float* send, float* recv, size_t n) override { gather_chunks(send, recv, n); }

  void broadcast(void* data, size_t bytes, int root) override {
    auto* p = static_cast<char*>(data);
    size_t done = 0;
    do {  // INT_MAX-byte pieces
      const size_t piece = std::min(bytes - done, static_cast<size_t>(INT_MAX));
      MPI_Request request;
      MPI_Ibcast(p + done, static_cast<int>(piece), MPI_BYTE, root, MPI_COMM_WORLD, &request);
      wait(request, "broadcast");
      done += piece;
    } while (done < bytes);
  }

  void barrier() override {
    MPI_Request request;
    MPI_Ibarrier(MPI_COMM_WORLD, &request);
    wait(request, "barrier");
  }

  [[noreturn]] void abort(const std::string& message, int exit_code) override {
    std::fprintf(stderr, "hybridlm: rank %d of %d: %s\n", rank_, size_, message.c_str());
    std::fflush(stderr);
    std::fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);  // MPI_Abort does not return; in case an implementation does
  }

 private:
  // MPI_Test until done; past the timeout the job is aborted. Spins for the first ~1000 tests (collectives of a
  // balanced step finish quickly), then sleeps 50 µs between tests so that waiting ranks do not steal cores.
  void wait(MPI_Request& request, const char* what) {
    const auto start = std::chrono::steady_clock::now();
    for (long tests = 0;; ++tests) {
      int done = 0;
      MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (done) return;
      if (tests > 1000) {
        const timespec pause{0, 50'000};
        nanosleep(&pause, nullptr);
        if ((tests & 255) == 0 &&
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > timeout_)
          abort(str_cat(what, " did not complete within ", timeout_, " s (", kCollectiveTimeoutEnv,
                        "): another rank failed or stopped; ending every rank"),
                1);
      }
    }
  }

  template <typename T>
  void reduce_scatter(const T* send, T* recv, size_t n) {
    const int W = size_;
    const size_t mine = chunk_size(n, W, rank_);
    std::vector<int> send_counts(W), send_displs(W), recv_counts(W), recv_displs(W);
    for (int q = 0; q < W; ++q) {
      send_counts[q] = as_count(chunk_size(n, W, q), "reduce_scatter");
      send_displs[q] = as_count(chunk_begin(n, W, q), "reduce_scatter");
      recv_counts[q] = static_cast<int>(mine);
      recv_displs[q] = as_count(static_cast<size_t>(q) * mine, "reduce_scatter");
    }
    std::vector<T> pieces(static_cast<size_t>(W) * mine);
    MPI_Request request;
    MPI_Ialltoallv(send, send_counts.data(), send_displs.data(), mpi_type<T>(), pieces.data(), recv_counts.data(),
                   recv_displs.data(), mpi_type<T>(), MPI_COMM_WORLD, &request);
    wait(request, "reduce-scatter");
    // Rank order: ((x_0 + x_1) + x_2) + ... in T, the contract of communicator.h.
    for (size_t i = 0; i < mine; ++i) {
      T sum = pieces[i];
      for (int q = 1; q < W; ++q) sum += pieces[static_cast<size_t>(q) * mine + i];
      recv[i] = sum;
    }
  }

  template <typename T>
  void gather_chunks(const T* send, T* recv, size_t n) {
    const int W = size_;
    std::vector<int> counts(W), displs(W);
    for (int q = 0; q < W; ++q) {
      counts[q] = as_count(chunk_size(n, W, q), "all_gather");
      displs[q] = as_count(chunk_begin(n, W, q), "all_gather");
    }
    const bool in_place = send == recv + chunk_begin(n, W, rank_);
    MPI_Request request;
    MPI_Iallgatherv(in_place ? MPI_IN_PLACE : send, counts[rank_], mpi_type<T>(), recv, counts.data(), displs.data(),
                    mpi_type<T>(), MPI_COMM_WORLD, &request);
    wait(request, "all-gather");
  }

  template <typename T>
  void all_reduce(T* data, size_t n) {
    if (size_ == 1 || n == 0) return;
    std::vector<T> mine(chunk_size(n, size_, rank_));
    reduce_scatter(data, mine.data(), n);
    // A rank whose chunk is empty (n < ranks) has mine.data() == nullptr, which memcpy may not be given.
    if (!mine.empty()) std::memcpy(data + chunk_begin(n, size_, rank_), mine.data(), mine.size() * sizeof(T));
    gather_chunks(data + chunk_begin(n, size_, rank_), data, n);
  }

  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  double timeout_ = 600.0;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator() { return std::make_unique<MpiCommunicator>(); }

bool mpi_thread_serialized() { return g_serialized; }

#else  // no MPI in this build

bool communicator_mpi_available() { return false; }

std::unique_ptr<Communicator> make_mpi_communicator() {
  throw Error(ErrorKind::Internal, "make_mpi_communicator: this hybridlm was built without MPI");
}

bool mpi_thread_serialized() { return true; }

#endif

}  // namespace hlm
