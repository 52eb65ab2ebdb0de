// MPI initialization and finalization, the serializing lock, MPI error conversion.
#include "dist/Comm.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <rcjit/Dist.h>
#include <rcjit/Error.h>

#include "support/Env.h"

namespace rcjit::dist::detail {

namespace {

std::mutex mpiMutex;
Comm world;
bool ready = false;
bool ownsMpi = false; // rcjit called MPI_Init, so it calls MPI_Finalize
std::string broken;   // set by a collective that timed out: the message later calls repeat

std::string mpiMessage(int rc) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(buf, static_cast<size_t>(len));
}

void finalizeAtExit() {
  std::lock_guard<std::mutex> lock(mpiMutex);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!ready || finalized) return;
  if (!broken.empty()) { // MPI_Finalize would wait for the rank that stopped: end the job
    MPI_Abort(world.comm, 1);
    return;
  }
  MPI_Comm_free(&world.comm);
  ready = false;
  if (ownsMpi) MPI_Finalize();
}

} // namespace

std::unique_lock<std::mutex> lockMpi() { return std::unique_lock<std::mutex>(mpiMutex); }

void checkMpi(int rc, const char *what, const std::string &context) {
  if (rc != MPI_SUCCESS) throw Error(context + ": " + what + " failed: " + mpiMessage(rc));
}

double timeoutSeconds() { return envPositive("RCJIT_DIST_TIMEOUT", 600, "seconds"); }

void checkNotBroken(const std::string &context) {
  if (!broken.empty()) {
    throw Error(context + ": an earlier collective timed out (" + broken +
                "); the ranks no longer agree on which collectives ran, so this job cannot "
                "communicate any more");
  }
}

int waitRequest(MPI_Request &request, const char *what, const std::string &context) {
  const double limit = timeoutSeconds();
  const auto start = std::chrono::steady_clock::now();
  for (int64_t polls = 0;; ++polls) {
    int flag = 0;
    const int rc = MPI_Test(&request, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS || flag) return rc;
    // MPI moves a non-blocking collective's data only inside MPI calls: poll without pause,
    // as MPI_Wait does, only yielding the core to ranks that share it
    std::this_thread::yield();
    if (polls % 1024 != 1023) continue;
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > limit) {
      char secs[32];
      std::snprintf(secs, sizeof secs, "%g", limit);
      broken = context + ": " + what + " made no progress for " + secs + " s";
      throw Error(broken + ": another rank died, hangs, or stopped calling collectives in the same "
                           "order (RCJIT_DIST_TIMEOUT sets the limit in seconds)");
    }
  }
}

const Comm &commLocked() {
  if (ready) return world;
  int finalized = 0, initialized = 0;
  MPI_Finalized(&finalized);
  if (finalized) throw Error("dist::init: MPI was already finalized in this process");
  MPI_Initialized(&initialized);
  if (!initialized) {
    // Reads the launcher's environment (mpirun); without one, Open MPI starts a world of 1.
    int provided = 0;
    checkMpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread",
             "dist::init");
    ownsMpi = true;
    std::atexit(finalizeAtExit);
  }
  const std::string ctx = "dist::init";
  checkMpi(MPI_Comm_dup(MPI_COMM_WORLD, &world.comm), "MPI_Comm_dup", ctx);
  checkMpi(MPI_Comm_set_errhandler(world.comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", ctx);
  checkMpi(MPI_Comm_rank(world.comm, &world.rank), "MPI_Comm_rank", ctx);
  checkMpi(MPI_Comm_size(world.comm, &world.size), "MPI_Comm_size", ctx);
  ready = true;
  return world;
}

MPI_Datatype reduceType(DType t) {
  switch (t) {
  case DType::f32:
    return MPI_FLOAT;
  case DType::f64:
    return MPI_DOUBLE;
  case DType::i32:
    return MPI_INT32_T;
  case DType::i64:
    return MPI_INT64_T;
  case DType::f16:
  case DType::bf16:
  case DType::boolean:
    return MPI_DATATYPE_NULL;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Datatype moveType(DType t) {
  switch (dtypeSize(t)) {
  case 1:
    return MPI_UINT8_T;
  case 2:
    return MPI_UINT16_T;
  case 4:
    return MPI_UINT32_T;
  default:
    return MPI_UINT64_T;
  }
}

} // namespace rcjit::dist::detail

namespace rcjit::dist {

void init() {
  auto lock = detail::lockMpi();
  detail::commLocked();
}

int rank() {
  auto lock = detail::lockMpi();
  return detail::commLocked().rank;
}

int world_size() {
  auto lock = detail::lockMpi();
  return detail::commLocked().size;
}

} // namespace rcjit::dist
