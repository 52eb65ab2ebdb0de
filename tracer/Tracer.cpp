// The tracer: records ops run on real tensors into a Graph, with regions and inputs.
#include "tracer/Tracer.h"

#include <atomic>
#include <mutex>
#include <unordered_map>

#include <rcjit/Region.h>
#include <rcjit/nn.h>

#include "tracer/AutogradHook.h"
#include "tracer/EagerHook.h"
#include "tracer/ModuleHooks.h"
#include "tracer/OpsInternal.h"
#include "tracer/TensorImpl.h"

namespace rcjit {

namespace {
thread_local Tracer *tlsTracer = nullptr;

Node valueNode(OpKind op, const Tensor &out, int region) {
  Node n;
  n.op = op;
  n.dtype = out.dtype();
  n.shape = staticShape(out.shape());
  n.region = region;
  return n;
}
} // namespace

Tracer *Tracer::current() { return tlsTracer; }

TracerPause::TracerPause() : previous_(tlsTracer) { tlsTracer = nullptr; }
TracerPause::~TracerPause() { tlsTracer = previous_; }

namespace {
// Makes `t` this thread's tracer for its lifetime (restoring the previous one).
class ActiveTracer {
public:
  explicit ActiveTracer(Tracer *t) : previous_(tlsTracer) { tlsTracer = t; }
  ~ActiveTracer() { tlsTracer = previous_; }
  ActiveTracer(const ActiveTracer &) = delete;
  ActiveTracer &operator=(const ActiveTracer &) = delete;

private:
  Tracer *previous_;
};
} // namespace

Trace traceFunction(const TracedFn &fn, const std::vector<Tensor> &args, bool meta, bool autograd) {
  Tracer tracer;
  tracer.meta_ = meta;
  tracer.autograd_ = autograd;
  for (size_t i = 0; i < args.size(); ++i) {
    if (!args[i].defined()) {
      throw Error("trace: argument " + std::to_string(i) + " is an undefined Tensor");
    }
    Node n = valueNode(OpKind::input, args[i], -1);
    n.inputKind = InputKind::arg;
    n.inputIndex = static_cast<int>(i);
    int id = tracer.trace_.graph.add(std::move(n));
    tracer.ids_[args[i].impl().get()] = id;
    tracer.keepAlive_.push_back(args[i]);
    tracer.remember(args[i], id);
  }
  tracer.trace_.args = args;
  std::vector<Tensor> outs;
  {
    ActiveTracer on(&tracer);
    struct RestoreGrads { // every leaf's grad() as before, even when fn throws
      Tracer &t;
      ~RestoreGrads() {
        for (auto &[m, st] : t.grads_) m->grad = st.original;
      }
    } restore{tracer};
    outs = fn(args);
    for (const Tensor &o : outs) {
      if (!o.defined()) throw Error("trace: the traced function returned an undefined Tensor");
      tracer.trace_.graph.outputs.push_back(tracer.valueOf(o));
    }
    if (autograd) tracer.finishMutations();
  }
  tracer.trace_.outputs = std::move(outs);
  return std::move(tracer.trace_);
}

namespace {
// Whether `t` covers all of its storage (so writing it back cannot miss an alias).
bool wholeTensor(const Tensor &t) {
  const auto &impl = *t.impl();
  return t.is_contiguous() && impl.offset == 0 &&
         static_cast<size_t>(t.numel()) * dtypeSize(t.dtype()) == impl.storage->nbytes;
}
} // namespace

void Tracer::mutate(const Tensor &target, const Tensor &value) {
  if (flush_) {
    throw Error("copy_: a function with graph breaks writes a tensor it did not create; "
                "compiled functions that write tensors (copy_, optimizer steps) must not read "
                "values on the host (item(), to_vector())");
  }
  if (!autograd_) {
    throw Error("copy_: a tensor is written inside a trace that cannot write it back (a "
                "region or a replayed graph); call copy_ outside it");
  }
  Tensor v = value.dtype() == target.dtype() ? value : detail::castTo(value, target.dtype());
  auto it = ids_.find(target.impl().get());
  const bool created = it != ids_.end() && trace_.graph.nodes[it->second].op != OpKind::input;
  if (it != ids_.end() && !created && trace_.graph.nodes[it->second].inputKind == InputKind::arg) {
    throw Error("copy_: argument " + std::to_string(trace_.graph.nodes[it->second].inputIndex) +
                " of a compiled function is written; write a tensor the function captures "
                "instead (its writes are written back after each call)");
  }
  bool viewOfReal = false; // a view the trace made of a real tensor: writing it writes that
  for (const std::vector<Tensor> *list : {&trace_.args, &trace_.captured}) {
    for (const Tensor &t : *list) viewOfReal = viewOfReal || (created && target.sharesStorage(t));
  }
  if (viewOfReal || (!created && !wholeTensor(target))) {
    throw Error("copy_: the destination " + std::string(dtypeName(target.dtype())) +
                shapeStr(target.shape()) +
                " is a view of a larger tensor; inside a compiled function only whole "
                "tensors can be written (write the base tensor)");
  }
  const int node = valueOf(v);
  if (created) {
    if (!meta_) detail::copyEager(target, v); // a real trace keeps real values
  } else {
    bool found = false;
    for (auto &[t, n] : dataWrites_) {
      if (t.impl() == target.impl()) {
        n = node;
        found = true;
      }
    }
    if (!found) dataWrites_.push_back({target, node});
  }
  ids_[target.impl().get()] = node;
}

void Tracer::gradAccess(const Tensor &leaf, autograd::AutogradMeta *m, bool reads) {
  for (const auto &[mm, st] : grads_) {
    if (mm == m) return; // only the first access decides what the trace assumed
  }
  GradState st;
  st.leaf = leaf;
  if (!st.leaf.defined()) {
    for (const std::vector<Tensor> *list : {&trace_.args, &trace_.captured}) {
      for (const Tensor &t : *list) {
        if (t.impl()->autograd.get() == m) st.leaf = t;
      }
    }
  }
  if (!st.leaf.defined()) {
    throw Error("backward: inside a compiled function, a gradient reached a leaf that is "
                "neither an argument nor a tensor the function read");
  }
  st.original = m->grad;
  st.firstRead = reads;
  grads_.push_back({m, std::move(st)});
}

void Tracer::finishMutations() {
  Graph &g = trace_.graph;
  auto argIndex = [&](const Tensor &t) {
    for (size_t i = 0; i < trace_.args.size(); ++i) {
      if (trace_.args[i].impl() == t.impl()) return static_cast<int>(i);
    }
    return -1;
  };
  for (const auto &[target, node] : dataWrites_) {
    g.outputs.push_back(node);
    trace_.mutations.push_back(
        {Mutation::Kind::data, target, static_cast<int>(g.outputs.size()) - 1});
  }
  for (auto &[m, st] : grads_) {
    Tensor now = m->grad;
    m->grad = st.original;
    if (st.firstRead) {
      GradGuard gg{st.leaf, st.original.defined(), -1};
      for (size_t j = 0; st.original.defined() && j < trace_.captured.size(); ++j) {
        if (trace_.captured[j].impl() == st.original.impl()) gg.captured = static_cast<int>(j);
      }
      trace_.gradGuards.push_back(std::move(gg));
    }
    if (now.impl() == st.original.impl()) continue; // read only
    if (argIndex(st.leaf) >= 0) {
      throw Error("backward: argument " + std::to_string(argIndex(st.leaf)) +
                  " of a compiled function gets a gradient in grad(); a compiled function "
                  "writes grad() only of tensors it captures (parameters)");
    }
    int out = -1;
    if (now.defined()) {
      g.outputs.push_back(valueOf(now));
      out = static_cast<int>(g.outputs.size()) - 1;
    }
    trace_.mutations.push_back({Mutation::Kind::grad, st.leaf, out});
  }
}

void Tracer::remember(const Tensor &t, int node) {
  if (autograd_) byStorage_.emplace(t.impl()->storage.get(), std::make_pair(node, t));
}

int Tracer::valueOf(const Tensor &t) {
  auto it = ids_.find(t.impl().get());
  if (it != ids_.end()) return it->second;
  // another handle on a value seen (a detached handle the autograd tape saved)
  auto [b, e] = byStorage_.equal_range(t.impl()->storage.get());
  for (; b != e; ++b) {
    const Tensor &k = b->second.second;
    if (k.shape() == t.shape() && k.strides() == t.strides() && k.offset() == t.offset() &&
        k.dtype() == t.dtype()) {
      ids_[t.impl().get()] = b->second.first;
      keepAlive_.push_back(t);
      return b->second.first;
    }
  }
  Node n = valueNode(OpKind::input, t, regionStack_.empty() ? -1 : regionStack_.back());
  n.inputKind = InputKind::captured;
  n.inputIndex = static_cast<int>(trace_.captured.size());
  Tensor *slot = nullptr;
  n.name = parameterName(t, &slot);
  int id = trace_.graph.add(std::move(n));
  ids_[t.impl().get()] = id;
  keepAlive_.push_back(t);
  remember(t, id);
  trace_.captured.push_back(t);
  trace_.capturedSlots.push_back(slot);
  return id;
}

std::string Tracer::parameterName(const Tensor &t, Tensor **slot) const {
  for (auto m = moduleStack_.rbegin(); m != moduleStack_.rend(); ++m) {
    if (!*m) continue;
    for (const auto &[name, p] : (*m)->own_parameters()) {
      if (p->impl() == t.impl()) {
        *slot = p;
        std::string path = (*m)->path();
        return path.empty() ? name : path + "." + name;
      }
    }
  }
  return {};
}

void Tracer::record(OpKind op, const std::vector<Tensor> &in, const Attrs &a, const Tensor &out) {
  std::vector<int> inputs;
  inputs.reserve(in.size());
  for (const Tensor &t : in) inputs.push_back(valueOf(t));
  Node n = valueNode(op, out, regionStack_.empty() ? -1 : regionStack_.back());
  n.inputs = std::move(inputs);
  n.attrs = a;
  const int id = trace_.graph.add(std::move(n));
  ids_[out.impl().get()] = id;
  keepAlive_.push_back(out);
  remember(out, id);
}

bool Tracer::producer(const Tensor &t, OpKind &op, std::vector<Tensor> &inputs) const {
  auto id = ids_.find(t.impl().get());
  if (id == ids_.end()) return false;
  const Node &n = trace_.graph.nodes[static_cast<size_t>(id->second)];
  if (n.op == OpKind::input) return false;
  inputs.assign(n.inputs.size(), Tensor());
  for (const Tensor &k : keepAlive_) { // every input and result of the trace is held there
    auto kid = ids_.find(k.impl().get());
    if (kid == ids_.end()) continue;
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (n.inputs[i] == kid->second && !inputs[i].defined()) inputs[i] = k;
  }
  for (const Tensor &t : inputs)
    if (!t.defined()) return false;
  op = n.op;
  return true;
}

void Tracer::recordSource(OpKind op, const Attrs &a, const Tensor &out) { record(op, {}, a, out); }

void Tracer::beginRegion(std::string name, std::string type, bool inList,
                         const nn::ModuleBase *module) {
  Region r;
  r.name = std::move(name);
  r.type = std::move(type);
  r.parent = regionStack_.empty() ? -1 : regionStack_.back();
  r.begin = r.end = static_cast<int>(trace_.graph.nodes.size());
  r.inList = inList;
  trace_.graph.regions.push_back(std::move(r));
  regionStack_.push_back(static_cast<int>(trace_.graph.regions.size()) - 1);
  moduleStack_.push_back(module);
}

void Tracer::endRegion() {
  trace_.graph.regions[regionStack_.back()].end = static_cast<int>(trace_.graph.nodes.size());
  regionStack_.pop_back();
  moduleStack_.pop_back();
}

void Tracer::hostRead(const char *op, const Tensor &t, const std::source_location &where) {
  auto it = ids_.find(t.impl().get());
  if (it == ids_.end()) return;
  bool pending = meta_ && trace_.graph.nodes[it->second].op != OpKind::input;
  if (pending && flush_) {
    Segment seg = takeSegment({t});
    (*flush_)(seg);
    return;
  }
  if (pending) throw MetaTraceAbort{op};
  std::string_view file = where.file_name() ? where.file_name() : "";
  if (size_t slash = file.find_last_of("/\\"); slash != std::string_view::npos)
    file.remove_prefix(slash + 1);
  trace_.breaks.push_back({op, it->second, std::string(file), static_cast<int>(where.line()),
                           regionStack_.empty() ? -1 : regionStack_.back()});
}

Segment Tracer::takeSegment(const std::vector<Tensor> &mustOutput) {
  Segment seg;
  Graph &g = trace_.graph;
  std::vector<bool> isOut(g.nodes.size(), false);
  for (const Tensor &t : mustOutput) {
    auto it = ids_.find(t.impl().get());
    if (it != ids_.end()) isOut[it->second] = true;
  }
  for (const Tensor &t : keepAlive_) {
    auto it = ids_.find(t.impl().get());
    if (it == ids_.end() || g.nodes[it->second].op == OpKind::input) continue;
    if (t.impl().use_count() > 1) isOut[it->second] = true; // held outside the tracer
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!isOut[i] || g.nodes[i].op == OpKind::input) continue;
    const Tensor *t = nullptr;
    for (const Tensor &k : keepAlive_) {
      auto it = ids_.find(k.impl().get());
      if (it != ids_.end() && it->second == static_cast<int>(i)) t = &k;
    }
    if (!t) continue;
    bool viewsInput = false; // a view of a real input already holds real values
    for (const Tensor &in : trace_.captured) viewsInput |= t->sharesStorage(in);
    if (viewsInput) continue;
    g.outputs.push_back(static_cast<int>(i));
    seg.pending.push_back(*t);
  }
  seg.graph = std::move(g);
  seg.inputs = trace_.captured;
  // start an empty graph; open regions continue in it
  trace_ = Trace();
  ids_.clear();
  keepAlive_.clear();
  for (int &r : regionStack_) {
    Region copy = seg.graph.regions[r];
    copy.begin = copy.end = 0;
    copy.parent = -1;
    trace_.graph.regions.push_back(copy);
    r = static_cast<int>(trace_.graph.regions.size()) - 1;
  }
  seg.graph.regions.clear();
  return seg;
}

std::vector<Tensor> runSegmented(const TracedFn &fn, const std::vector<Tensor> &args,
                                 const SegmentFlush &flush) {
  Tracer tracer;
  tracer.meta_ = true;
  tracer.flush_ = &flush;
  std::vector<Tensor> outs;
  {
    ActiveTracer on(&tracer);
    outs = fn(args); // args are real: used in a segment, they become captured inputs
    Segment last = tracer.takeSegment(outs);
    if (!last.pending.empty()) flush(last);
  }
  return outs;
}

Tensor region(std::string_view name, const std::function<Tensor()> &body) {
  Tracer *tr = Tracer::current();
  if (!tr) return body();
  tr->beginRegion(std::string(name), "region", false, nullptr);
  struct End {
    Tracer *tr;
    ~End() { tr->endRegion(); }
  } end{tr};
  return body();
}

namespace nn::detail {

namespace {
std::mutex moduleHookMutex;
std::unordered_map<const ModuleBase *, ModuleCallHook> moduleHooks;
std::atomic<int> moduleHookCount{0};
} // namespace

void setModuleCallHook(const ModuleBase &m, ModuleCallHook hook) {
  std::lock_guard<std::mutex> lock(moduleHookMutex);
  if (hook) {
    moduleHooks[&m] = std::move(hook);
  } else {
    moduleHooks.erase(&m);
  }
  moduleHookCount.store(static_cast<int>(moduleHooks.size()), std::memory_order_relaxed);
}

void runModuleCallHook(ModuleBase &m) {
  if (moduleHookCount.load(std::memory_order_relaxed) == 0) return;
  ModuleCallHook hook;
  {
    std::lock_guard<std::mutex> lock(moduleHookMutex);
    auto it = moduleHooks.find(&m);
    if (it == moduleHooks.end()) return;
    hook = it->second; // a copy: the hook may set or remove hooks
  }
  hook(m);
}

ModuleCallScope::ModuleCallScope(ModuleBase &m) : active_(Tracer::current() != nullptr) {
  runModuleCallHook(m);
  if (active_) {
    bool inList = m.parent() && m.parent()->isModuleList();
    Tracer::current()->beginRegion(m.path(), m.typeName(), inList, &m);
  }
}
ModuleCallScope::~ModuleCallScope() {
  if (active_) Tracer::current()->endRegion();
}
} // namespace nn::detail

} // namespace rcjit
