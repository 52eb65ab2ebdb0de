// The MPI side of rcjit::dist: the job's communicator, the lock that serializes MPI calls,
// MPI error conversion and dtype mapping. Internal to dist/.
#pragma once
#include <mpi.h>

#include <mutex>
#include <string>

#include <rcjit/Types.h>

namespace rcjit::dist::detail {

/// The communicator rcjit's collectives use: a duplicate of MPI_COMM_WORLD with
/// MPI_ERRORS_RETURN, so that a failed call returns its code instead of aborting the job.
struct Comm {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
};

/// Serializes every MPI call of the process (MPI runs with MPI_THREAD_SERIALIZED).
std::unique_lock<std::mutex> lockMpi();
/// The communicator, initializing MPI on first use; the caller holds lockMpi().
const Comm &commLocked();

/// Throws rcjit::Error("<context>: <what> failed: <MPI's message>") unless rc is MPI_SUCCESS.
void checkMpi(int rc, const char *what, const std::string &context);

/// Waits for `request` by polling MPI_Test, at most timeoutSeconds() from the call. Returns
/// MPI's code (MPI_SUCCESS when done); past the limit marks the communicator broken and
/// throws rcjit::Error("<context>: <what> made no progress for N s: ..."): a rank died, hangs,
/// or stopped calling collectives. The caller holds lockMpi().
int waitRequest(MPI_Request &request, const char *what, const std::string &context);
/// Seconds a collective may wait: $RCJIT_DIST_TIMEOUT (a positive number), else 600.
double timeoutSeconds();
/// After a timeout the ranks disagree on which collectives ran: every later collective is
/// this Error at once ("... an earlier collective timed out ..."). The caller holds lockMpi().
void checkNotBroken(const std::string &context);

/// The MPI type that reduces `t` (f32, f64, i32, i64); MPI_DATATYPE_NULL for the others.
MPI_Datatype reduceType(DType t);
/// An unsigned MPI integer type of t's element size, for collectives that only move bytes.
MPI_Datatype moveType(DType t);

} // namespace rcjit::dist::detail
