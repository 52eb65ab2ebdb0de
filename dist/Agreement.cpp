// The record every rank swaps before a collective, and the comparison that turns a mismatch
// into one rcjit::Error on every rank.
#include "dist/Agreement.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <functional>
#include <map>
#include <vector>

#include <rcjit/Error.h>

#include "dist/DeviceCollectives.h"
#include "tracer/Tracer.h"

namespace rcjit::dist::detail {

namespace {

// Why this rank's last cuda record could not use NCCL (added to the Error here); guarded by
// lockMpi(), which every caller of tensorRecord and agree holds.
std::string deviceReason;

const char *opName(int32_t op) {
  switch (static_cast<ReduceOp>(op)) {
  case ReduceOp::sum:
    return "sum";
  case ReduceOp::mean:
    return "mean";
  case ReduceOp::max:
    return "max";
  }
  return "?";
}

bool reduces(Kind k) { return k == Kind::all_reduce || k == Kind::reduce_scatter; }
bool hasDim(Kind k) { return k == Kind::all_gather || k == Kind::reduce_scatter; }

std::string dtypeOf(const Record &r) {
  return r.dtype < 0 ? "?" : std::string(dtypeName(static_cast<DType>(r.dtype)));
}

std::string problemText(const Record &r) {
  const Kind kind = static_cast<Kind>(r.kind);
  if (kind == Kind::gradients || kind == Kind::parameters) {
    const std::string of = "of its " + describe(r) + ", ";
    switch (static_cast<Problem>(r.problem)) {
    case Problem::undefined:
      return of + "one is undefined";
    case Problem::notCpu:
      return of + "one is not on the CPU (collectives take CPU tensors)";
    case Problem::tooLarge:
      return of + "one has more than 2^31-1 elements";
    default:
      break;
    }
  }
  switch (static_cast<Problem>(r.problem)) {
  case Problem::none:
    return "";
  case Problem::undefined:
    return "its tensor is undefined (default-constructed)";
  case Problem::traced:
    return "it called the collective inside a traced or compiled function, where only the "
           "blocking all_reduce, all_gather, reduce_scatter and broadcast are ops of the IR "
           "(the *_async forms, barrier and broadcast_parameters are not: call them outside "
           "rcjit::compile)";
  case Problem::notCpu:
    return "its tensor " + describe(r) + " is not on the CPU (collectives take CPU tensors)";
  case Problem::dtype:
    return dtypeOf(r) + " cannot be reduced (" + kindName(static_cast<Kind>(r.kind)) +
           " takes f32, f64, i32, i64: convert first)";
  case Problem::meanOfIntegers:
    return std::string("the mean of ") + dtypeOf(r) + " (mean takes f32 and f64; use sum)";
  case Problem::tooManyDims:
    return "its tensor has " + std::to_string(r.ndim) + " dims (at most " +
           std::to_string(kMaxDims) + ")";
  case Problem::badDim:
    return "dim " + std::to_string(r.dim) + " is out of range for " + describe(r);
  case Problem::tooLarge:
    return "its tensor " + describe(r) + " has more than 2^31-1 elements";
  case Problem::badRoot:
    return "root " + std::to_string(r.root) + " is not a rank";
  case Problem::badBucket:
    return "a gradient is not f32, f64, i32 or i64, or bucket_bytes is not positive";
  case Problem::noDevice:
    return "its tensor " + describe(r) +
           " is on cuda, but NCCL cannot be used there (see "
           "that rank's reason)";
  }
  return "?";
}

// "rank 0: x; ranks 1, 3: y": the ranks grouped by what `text` says of their records.
std::string byRank(const std::vector<Record> &all,
                   const std::function<std::string(const Record &)> &text) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    std::string t = text(all[static_cast<size_t>(r)]);
    auto it = std::find_if(groups.begin(), groups.end(), [&](auto &g) { return g.first == t; });
    if (it == groups.end()) {
      groups.push_back({t, {r}});
    } else {
      it->second.push_back(r);
    }
  }
  std::string out;
  for (const auto &[t, ranks] : groups) {
    if (!out.empty()) out += "; ";
    out += ranks.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (i == 8) {
        out += ", ... (" + std::to_string(ranks.size()) + " ranks)";
        break;
      }
      out += (i ? ", " : "") + std::to_string(ranks[i]);
    }
    out += ": " + t;
  }
  return out;
}

} // namespace

const char *kindName(Kind k) {
  switch (k) {
  case Kind::all_reduce:
    return "all_reduce";
  case Kind::all_gather:
    return "all_gather";
  case Kind::reduce_scatter:
    return "reduce_scatter";
  case Kind::broadcast:
    return "broadcast";
  case Kind::barrier:
    return "barrier";
  case Kind::gradients:
    return "all_reduce_gradients";
  case Kind::parameters:
    return "broadcast_parameters";
  }
  return "?";
}

Record tensorRecord(Kind kind, const Tensor &t, ReduceOp op, int64_t dim, int root, const Comm &c) {
  Record r;
  r.kind = static_cast<int32_t>(kind);
  r.op = static_cast<int32_t>(op);
  r.root = root;
  auto problem = [&](Problem p) {
    if (r.problem == 0) r.problem = static_cast<int32_t>(p);
  };
  if (!t.defined()) {
    problem(Problem::undefined);
    return r;
  }
  r.dtype = static_cast<int32_t>(t.dtype());
  r.ndim = t.dim();
  for (int i = 0; i < std::min(r.ndim, kMaxDims); ++i) r.dims[i] = t.size(i);
  if (Tracer::current()) problem(Problem::traced);
  if (t.device().is_cuda()) { // NCCL (DeviceCollectives.h), when this rank can use it
    r.device = 1;
    deviceReason = deviceUnavailable(t);
    if (!deviceReason.empty()) problem(Problem::noDevice);
    r.fresh = r.problem == 0 && needsCommunicator(t);
  } else if (!t.device().is_cpu()) {
    problem(Problem::notCpu);
  }
  if (reduces(kind) && reduceType(t.dtype()) == MPI_DATATYPE_NULL) problem(Problem::dtype);
  if (kind == Kind::all_reduce && op == ReduceOp::mean && !isFloating(t.dtype())) {
    problem(Problem::meanOfIntegers);
  }
  if (r.ndim > kMaxDims) problem(Problem::tooManyDims);
  if (hasDim(kind)) {
    r.dim = dim < 0 ? dim + r.ndim : dim;
    if (r.dim < 0 || r.dim >= r.ndim) {
      r.dim = dim;
      problem(Problem::badDim);
    }
  }
  if (t.numel() > INT_MAX) problem(Problem::tooLarge);
  if (kind == Kind::broadcast && (root < 0 || root >= c.size)) problem(Problem::badRoot);
  return r;
}

Record listRecord(Kind kind, const std::vector<Tensor> &ts, bool reduces) {
  Record r;
  r.kind = static_cast<int32_t>(kind);
  uint64_t hash = 0xcbf29ce484222325ull; // FNV-1a over (dtype, rank, sizes) of each tensor
  auto mix = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) hash = (hash ^ ((v >> (8 * i)) & 0xff)) * 0x100000001b3ull;
  };
  auto problem = [&](Problem p) {
    if (r.problem == 0) r.problem = static_cast<int32_t>(p);
  };
  if (Tracer::current()) problem(Problem::traced);
  for (const Tensor &t : ts) {
    r.dims[0] += 1;
    if (!t.defined()) {
      problem(Problem::undefined);
      continue;
    }
    r.dims[1] += t.numel();
    mix(static_cast<uint64_t>(t.dtype()));
    mix(static_cast<uint64_t>(t.dim()));
    for (int64_t d : t.shape()) mix(static_cast<uint64_t>(d));
    if (!t.device().is_cpu()) problem(Problem::notCpu);
    if (t.numel() > INT_MAX) problem(Problem::tooLarge);
    if (reduces && reduceType(t.dtype()) == MPI_DATATYPE_NULL) problem(Problem::badBucket);
  }
  r.dims[2] = static_cast<int64_t>(hash);
  return r;
}

std::string describe(const Record &r) {
  switch (static_cast<Kind>(r.kind)) {
  case Kind::barrier:
    return "no tensor";
  case Kind::gradients:
  case Kind::parameters: {
    char hash[20];
    std::snprintf(hash, sizeof hash, "%08llx",
                  static_cast<unsigned long long>(r.dims[2]) & 0xffffffffull);
    return std::to_string(r.dims[0]) +
           (static_cast<Kind>(r.kind) == Kind::gradients ? " gradients of " : " parameters of ") +
           std::to_string(r.dims[1]) + " elements (layout " + hash + ")";
  }
  default:
    break;
  }
  if (r.problem == static_cast<int32_t>(Problem::undefined)) return "undefined";
  std::string s = dtypeOf(r) + " [";
  for (int i = 0; i < std::min(r.ndim, kMaxDims); ++i) {
    s += (i ? ", " : "") + std::to_string(r.dims[i]);
  }
  if (r.ndim > kMaxDims) s += ", ...";
  return s + "]";
}

std::string context(const Record &r, const Comm &c) {
  return std::string("dist::") + kindName(static_cast<Kind>(r.kind)) + " (rank " +
         std::to_string(c.rank) + " of " + std::to_string(c.size) + ", " + describe(r) + ")";
}

void agree(const Record &mine, const Comm &c) {
  const std::string ctx = context(mine, c);
  std::vector<Record> all(static_cast<size_t>(c.size));
  checkNotBroken(ctx);
  MPI_Request request = MPI_REQUEST_NULL;
  checkMpi(MPI_Iallgather(&mine, sizeof(Record), MPI_BYTE, all.data(), sizeof(Record), MPI_BYTE,
                          c.comm, &request),
           "MPI_Iallgather (the shape check)", ctx);
  checkMpi(waitRequest(request, "the shape check (MPI_Iallgather)", ctx),
           "MPI_Iallgather (the shape check)", ctx);
  auto differ = [&](auto field) {
    for (const Record &r : all) {
      if (field(r) != field(all[0])) return true;
    }
    return false;
  };
  if (differ([](const Record &r) { return r.kind; })) {
    throw Error(ctx +
                ": the ranks called different collectives: " + byRank(all, [](const Record &r) {
                  return std::string(kindName(static_cast<Kind>(r.kind))) + " of " + describe(r);
                }));
  }
  bool anyProblem = false;
  for (const Record &r : all) anyProblem |= r.problem != 0;
  if (anyProblem) {
    const bool here = mine.problem == static_cast<int32_t>(Problem::noDevice);
    throw Error(
        ctx + ": " +
        byRank(all,
               [](const Record &r) { return r.problem ? problemText(r) : std::string("ok"); }) +
        (here ? "; here: " + deviceReason : std::string()));
  }
  const Kind kind = static_cast<Kind>(mine.kind);
  if (reduces(kind) && differ([](const Record &r) { return r.op; })) {
    throw Error(ctx + ": the ranks passed different reduce ops: " +
                byRank(all, [](const Record &r) { return std::string(opName(r.op)); }));
  }
  if (kind == Kind::broadcast && differ([](const Record &r) { return r.root; })) {
    throw Error(ctx + ": the ranks passed different roots: " + byRank(all, [](const Record &r) {
                  return "root " + std::to_string(r.root);
                }));
  }
  if (hasDim(kind) && differ([](const Record &r) { return r.dim; })) {
    throw Error(ctx + ": the ranks passed different dims: " + byRank(all, [](const Record &r) {
                  return "dim " + std::to_string(r.dim);
                }));
  }
  if (differ([](const Record &r) { return r.device; })) {
    throw Error(
        ctx +
        ": the ranks' tensors are on different kinds of device (all cpu: MPI, or "
        "all cuda: NCCL): " +
        byRank(all, [](const Record &r) { return std::string(r.device ? "cuda" : "cpu"); }));
  }
  if (differ([](const Record &r) { return r.fresh; })) {
    throw Error(ctx +
                ": the ranks disagree on making an NCCL communicator (each rank must keep "
                "its collectives on one cuda device): " +
                byRank(all, [](const Record &r) {
                  return std::string(r.fresh ? "new device" : "device seen before");
                }));
  }
  if (differ([](const Record &r) { return describe(r); })) {
    throw Error(ctx + ": the ranks' tensors disagree (dtype and shape must match): " +
                byRank(all, describe));
  }
}

} // namespace rcjit::dist::detail
