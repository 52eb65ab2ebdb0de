// Regional compilation: cut the graph into glue and region stages, compile each distinct
// stage once, and run the stages in order over a table of values.
#include "jit/Regional.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>

#include "cache/ClearHooks.h"
#include "targets/Lower.h"
#include "tracer/GraphIO.h"

namespace rcjit {

namespace {

// Compiled stage programs of this process, by stage key.
class StageTable {
public:
  static StageTable &instance() {
    static StageTable *t = [] {
      auto *table = new StageTable(); // never destroyed: programs outlive statics
      cache::detail::onClear([table] { table->clear(); });
      return table;
    }();
    return *t;
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    programs_.clear();
  }
  std::shared_ptr<cpu::CpuProgram> find(const std::string &key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = programs_.find(key);
    return it == programs_.end() ? nullptr : it->second;
  }
  void add(const std::string &key, std::shared_ptr<cpu::CpuProgram> p) {
    std::lock_guard<std::mutex> lock(mu_);
    if (programs_.size() >= kLimit) programs_.erase(programs_.begin());
    programs_.emplace(key, std::move(p));
  }

private:
  static constexpr size_t kLimit = 4096;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<cpu::CpuProgram>> programs_;
};

bool inside(const Region &inner, const Region &outer) {
  return inner.begin >= outer.begin && inner.end <= outer.end;
}

// Program input order of a sub-graph's inputs: args by inputIndex, then captured.
std::vector<int> programOrder(const Graph &sub, const std::vector<int> &boundary) {
  std::vector<int> inputNodes = sub.inputNodes(); // boundary follows this order
  std::vector<int> order = sub.programInputs();
  for (int &id : order) {
    id = boundary[std::find(inputNodes.begin(), inputNodes.end(), id) - inputNodes.begin()];
  }
  return order;
}

} // namespace

std::vector<int> selectRegions(const Graph &g) {
  std::vector<int> picked;
  for (size_t r = 0; r < g.regions.size(); ++r) {
    const Region &reg = g.regions[r];
    if (!(reg.inList || reg.type == "region") || reg.begin == reg.end) continue;
    bool nested = false;
    for (int p : picked) nested |= inside(reg, g.regions[p]);
    if (!nested) picked.push_back(static_cast<int>(r));
  }
  std::sort(picked.begin(), picked.end(),
            [&](int a, int b) { return g.regions[a].begin < g.regions[b].begin; });
  return picked;
}

RegionalPlan buildRegionalPlan(const Graph &g, const std::vector<Shape> &inputStrides,
                               const std::function<Graph(const Graph &)> &optimize,
                               const std::string &idPrefix) {
  RegionalPlan plan;
  plan.numNodes = static_cast<int>(g.nodes.size());
  plan.graphOutputs = g.outputs;
  std::vector<Shape> strides(g.nodes.size());
  plan.graphInputs = g.programInputs();
  for (size_t i = 0; i < plan.graphInputs.size(); ++i)
    strides[plan.graphInputs[i]] = inputStrides.at(i);
  // One copy of g with a "glue" region for each stretch between selected regions: then
  // every stage, glue or region, is extracted the same way.
  Graph cut = g;
  std::vector<int> stages; // region indices into cut, in node order
  auto addGlue = [&](int begin, int end) {
    Region r;
    r.name = r.type = "glue";
    r.begin = begin;
    r.end = end;
    cut.regions.push_back(r);
    stages.push_back(static_cast<int>(cut.regions.size()) - 1);
  };
  int at = 0;
  for (int r : selectRegions(g)) {
    if (at < g.regions[r].begin) addGlue(at, g.regions[r].begin);
    stages.push_back(r);
    at = g.regions[r].end;
  }
  if (at < static_cast<int>(g.nodes.size())) addGlue(at, static_cast<int>(g.nodes.size()));
  for (size_t s = 0; s < stages.size(); ++s) {
    std::vector<int> boundary, outs;
    Graph sub = extractRegion(cut, stages[s], &boundary, &outs);
    if (outs.empty()) continue; // only input nodes, or nothing used later
    RegionalStage st;
    st.region = stages[s] < static_cast<int>(g.regions.size());
    st.name = cut.regions[stages[s]].name;
    st.inputs = programOrder(sub, boundary);
    st.outputs = outs;
    std::ostringstream key;
    key << hashGraph(sub).hex();
    std::vector<Shape> subStrides;
    for (int id : st.inputs) {
      subStrides.push_back(strides[id]);
      key << "|" << shapeStr(strides[id]);
    }
    st.program = StageTable::instance().find(key.str());
    if (st.program) {
      st.reused = true;
      ++plan.reused;
    } else {
      Program p = lower(optimize(sub), subStrides);
      st.program = cpu::CpuProgram::create(std::move(p), idPrefix + "_s" + std::to_string(s));
      StageTable::instance().add(key.str(), st.program);
      ++plan.compiled;
    }
    const Program &prog = st.program->program();
    for (size_t o = 0; o < outs.size(); ++o)
      strides[outs[o]] = prog.values[prog.outputs[o]].strides;
    plan.stages.push_back(std::move(st));
  }
  return plan;
}

std::vector<Tensor> RegionalPlan::run(const Tensor *const *inputs, size_t n) const {
  std::vector<Tensor> values(static_cast<size_t>(numNodes));
  std::vector<const Tensor *> ptr(static_cast<size_t>(numNodes), nullptr);
  for (size_t i = 0; i < graphInputs.size() && i < n; ++i) ptr[graphInputs[i]] = inputs[i];
  std::vector<const Tensor *> in;
  for (const RegionalStage &s : stages) {
    in.clear();
    for (int id : s.inputs) in.push_back(ptr[id]);
    std::vector<Tensor> outs = s.program->run(in.data(), in.size());
    for (size_t o = 0; o < outs.size(); ++o) {
      values[s.outputs[o]] = std::move(outs[o]);
      ptr[s.outputs[o]] = &values[s.outputs[o]];
    }
  }
  std::vector<Tensor> result;
  for (int id : graphOutputs) result.push_back(*ptr[id]);
  return result;
}

std::string RegionalPlan::print() const {
  std::ostringstream os;
  os << "regional: " << stages.size() << " stages, " << compiled << " compiled, " << reused
     << " reused\n";
  for (size_t i = 0; i < stages.size(); ++i) {
    const RegionalStage &s = stages[i];
    os << "  stage " << i << ": " << s.name << (s.reused ? " (reused)" : " (compiled)") << ", "
       << s.program->program().steps.size() << " steps\n";
  }
  return os.str();
}

} // namespace rcjit
