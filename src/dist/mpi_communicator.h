// MpiCommunicator: communicator.h over MPI for host buffers (Open MPI's mpirun, Slurm's srun with PMIx/PMI).
//
// Reductions keep communicator.h's rank-order contract by moving data with MPI and adding here:
//   reduce_scatter_sum  MPI_Ialltoallv gives rank r chunk r of every rank's buffer, then r adds them in rank order;
//   all_reduce_sum      reduce_scatter_sum, then MPI_Iallgatherv of the reduced chunks (the bytes every rank ends
//                       with are the ones rank r computed for chunk r, so all ranks agree bitwise).
// Both move (W-1)/W of the buffer per rank per phase, like a ring all-reduce. Every collective is non-blocking and
// waited on with MPI_Test (spinning briefly, then sleeping 50 µs between tests, so oversubscribed ranks give their
// core away); past the timeout (HYBRIDLM_COLLECTIVE_TIMEOUT, default 600 s) the job is aborted with a message
// naming the collective. MPI errors are fatal (MPI_ERRORS_ARE_FATAL): the job ends.
// Bootstrap: MPI_Init_thread(SERIALIZED) in the constructor (one thread at a time calls MPI: the main thread, or
// the GPU trainer's host-staging helper while the main thread makes no MPI call, train/cuda/device_collectives.h;
// OpenMP workers never do); local rank = rank in MPI_Comm_split_type(SHARED), i.e. among the ranks of this node. MPI_Finalize in the
// destructor. At most one per process.
#pragma once
#include <memory>

#include "dist/communicator.h"

namespace hlm {

// An MpiCommunicator over MPI_COMM_WORLD; an internal error in builds without MPI (communicator_mpi_available()).
std::unique_ptr<Communicator> make_mpi_communicator();

// The collective timeout in seconds (HYBRIDLM_COLLECTIVE_TIMEOUT, default 600; input error when not a positive
// number).
double collective_timeout_seconds();

// Whether MPI granted MPI_THREAD_SERIALIZED (a thread other than the main one may call MPI, one at a time); true in
// builds without MPI and before an MpiCommunicator exists.
bool mpi_thread_serialized();

}  // namespace hlm
