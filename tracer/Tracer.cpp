// The tracer: records ops run on real tensors into a Graph, with regions and inputs.
#include "tracer/Tracer.h"

#include <rcjit/Region.h>
#include <rcjit/nn.h>

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

Trace traceFunction(const TracedFn &fn, const std::vector<Tensor> &args, bool meta) {
  Tracer tracer;
  tracer.meta_ = meta;
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
  }
  tracer.trace_.args = args;
  std::vector<Tensor> outs;
  {
    ActiveTracer on(&tracer);
    outs = fn(args);
  }
  for (const Tensor &o : outs) {
    if (!o.defined()) throw Error("trace: the traced function returned an undefined Tensor");
    tracer.trace_.graph.outputs.push_back(tracer.valueOf(o));
  }
  tracer.trace_.outputs = std::move(outs);
  return std::move(tracer.trace_);
}

int Tracer::valueOf(const Tensor &t) {
  auto it = ids_.find(t.impl().get());
  if (it != ids_.end()) return it->second;
  Node n = valueNode(OpKind::input, t, regionStack_.empty() ? -1 : regionStack_.back());
  n.inputKind = InputKind::captured;
  n.inputIndex = static_cast<int>(trace_.captured.size());
  Tensor *slot = nullptr;
  n.name = parameterName(t, &slot);
  int id = trace_.graph.add(std::move(n));
  ids_[t.impl().get()] = id;
  keepAlive_.push_back(t);
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
  ids_[out.impl().get()] = trace_.graph.add(std::move(n));
  keepAlive_.push_back(out);
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

void Tracer::hostRead(const char *op, const Tensor &t) {
  auto it = ids_.find(t.impl().get());
  if (it == ids_.end()) return;
  bool pending = meta_ && trace_.graph.nodes[it->second].op != OpKind::input;
  if (pending && flush_) {
    Segment seg = takeSegment({t});
    (*flush_)(seg);
    return;
  }
  if (pending) throw MetaTraceAbort{op};
  trace_.breaks.push_back({op, it->second});
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
ModuleCallScope::ModuleCallScope(ModuleBase &m) : active_(Tracer::current() != nullptr) {
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
