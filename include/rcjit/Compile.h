// rcjit::compile: trace a function or module once, guard, compile, and reuse the code.
#pragma once
#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <source_location>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <rcjit/Tensor.h>
#include <rcjit/nn.h>

namespace rcjit {

enum class Mode { eager, full, regional }; // eager = no compilation (the baseline)
enum class Target { cpu, cuda };
enum class Dynamic { automatic, always, never };
enum class Stance { normal, fail_on_recompile, eager_on_recompile, force_eager };

/// One step of a pass schedule: from call `step` of the compiled function on (its training
/// step, counted from 0), compile with these scheduled passes (register_scheduled_pass).
struct ScheduleStep {
  int64_t step = 0;
  std::vector<std::string> passes;
};

struct CompileOptions {
  Mode mode = Mode::full;
  Target target = Target::cpu;
  Dynamic dynamic = Dynamic::automatic; // automatic: a dim that changed becomes symbolic
  int recompile_limit = 8;              // compiled variants per function before falling back
  bool fullgraph = false;               // true: a graph break is an Error instead of a split
  Stance stance = Stance::normal;
  bool cuda_graphs = true;   // cuda: replay a static entry's kernels as one CUDA graph
  bool max_autotune = false; // time candidate implementations on the real shapes, keep the fastest
  bool reduce_overhead = false; // keep buffers bound between calls (CUDA graphs on cuda)
  std::string name;             // shown in logs; default: the compile() call's file:line
  /// DeepCompile's schedule: (training step, passes) in increasing step order. At each
  /// listed step the function drops its compiled entries and recompiles with that pass list
  /// (before the first listed step: no scheduled passes); the recompiles log says why.
  std::vector<ScheduleStep> schedule;
  int64_t memory_budget = 0; // bytes, handed to scheduled passes (PassContext); 0: none
  bool tiered = true;        // first calls run code that compiles in milliseconds while
                             // the optimized code compiles in the background; false:
                             // the first call waits for the optimized code
};

struct CompileStats {
  int compiles = 0;   // graphs compiled by this function
  int recompiles = 0; // compiles caused by a guard failure
  int cache_hits = 0; // compiled code reused from memory or disk instead of compiled
  int graph_breaks = 0;
  int fallbacks = 0;          // calls that ran eagerly (recompile limit or stance)
  double compile_seconds = 0; // wall time spent tracing + compiling
};

/// Marks dim `dim` of `t` as dynamic within [min, max]: compiled code takes its size as a
/// runtime value, and a size outside the range is an Error. Stored on the tensor.
void mark_dynamic(Tensor &t, int dim, int64_t min = 2, int64_t max = INT64_MAX);
/// Marks dim `dim` of `t` as static: never made symbolic by automatic dynamic shapes.
void mark_static(Tensor &t, int dim);

namespace detail {
using TracedFn = std::function<std::vector<Tensor>(const std::vector<Tensor> &)>;

/// The shared state of a compiled function: its cache entries, options and stats.
/// Thread-safe: calls may come from several threads at once.
class CompiledState;
/// `fnObject`/`fnBytes`: the callable compiled (kept alive by the CompiledFunction), where
/// captured Tensor variables are looked for so reassigning one is seen (CapturedVariables.h).
/// `where`: the compile() call's source location, named in logs next to `opts.name`.
std::shared_ptr<CompiledState>
makeCompiledState(const CompileOptions &opts, const void *fnObject = nullptr, size_t fnBytes = 0,
                  const std::source_location &where = std::source_location::current());
std::vector<Tensor> callCompiled(CompiledState &s, const std::vector<Tensor> &args,
                                 const TracedFn &fn);
CompileStats statsOf(const CompiledState &s);
std::string explainOf(const CompiledState &s);

template <class R> std::vector<Tensor> toTensors(R &&r) {
  if constexpr (std::is_same_v<std::decay_t<R>, Tensor>) {
    return {std::forward<R>(r)};
  } else {
    static_assert(std::is_same_v<std::decay_t<R>, std::vector<Tensor>>,
                  "a compiled function must return a Tensor or a std::vector<Tensor>");
    return std::forward<R>(r);
  }
}
} // namespace detail

/// A compiled function: callable like the original. Copies share one state (entries and
/// stats). Thread-safe.
template <class F> class CompiledFunction {
public:
  CompiledFunction(F fn, const CompileOptions &opts,
                   const std::source_location &where = std::source_location::current())
      : fn_(std::make_shared<F>(std::move(fn))),
        state_(detail::makeCompiledState(opts, fn_.get(), sizeof(F), where)) {}

  /// Calls with Tensors (each argument a Tensor) or with one std::vector<Tensor>.
  template <class... Args> auto operator()(Args &&...args) const {
    using R = std::invoke_result_t<F &, Args...>;
    std::vector<Tensor> in = pack(std::forward<Args>(args)...);
    std::shared_ptr<F> fn = fn_;
    detail::TracedFn traced = [fn](const std::vector<Tensor> &v) {
      return detail::toTensors(invokeUnpacked<Args...>(*fn, v));
    };
    std::vector<Tensor> out = detail::callCompiled(*state_, in, traced);
    if constexpr (std::is_same_v<std::decay_t<R>, Tensor>) {
      return out.at(0);
    } else {
      return out;
    }
  }

  CompileStats stats() const { return detail::statsOf(*state_); }
  /// Graphs, guards of each cached entry, and why each recompile happened.
  std::string explain() const { return detail::explainOf(*state_); }

private:
  template <class... Args> static std::vector<Tensor> pack(Args &&...args) {
    if constexpr (sizeof...(Args) == 1 &&
                  (std::is_same_v<std::decay_t<Args>, std::vector<Tensor>> && ...)) {
      return std::vector<Tensor>(std::forward<Args>(args)...);
    } else {
      static_assert((std::is_convertible_v<Args, const Tensor &> && ...),
                    "compiled functions take Tensors or one std::vector<Tensor>");
      return std::vector<Tensor>{Tensor(args)...};
    }
  }
  template <class... Args, size_t... I>
  static decltype(auto) invokeIndexed(F &f, const std::vector<Tensor> &v,
                                      std::index_sequence<I...>) {
    return f(v[I]...);
  }
  template <class... Args>
  static decltype(auto) invokeUnpacked(F &f, const std::vector<Tensor> &v) {
    if constexpr (sizeof...(Args) == 1 &&
                  (std::is_same_v<std::decay_t<Args>, std::vector<Tensor>> && ...)) {
      return f(v);
    } else {
      return invokeIndexed<Args...>(f, v, std::index_sequence_for<Args...>{});
    }
  }

  std::shared_ptr<F> fn_;
  std::shared_ptr<detail::CompiledState> state_;
};

/// Compiles a callable taking Tensors (or one std::vector<Tensor>) and returning a Tensor
/// or std::vector<Tensor>. The first call traces and compiles; later calls that pass an
/// entry's guards run its code without calling fn. Logs name the function by `opts.name`
/// and the file:line of this call.
template <class F>
requires(!std::derived_from<std::remove_cvref_t<F>, nn::ModuleBase>)
    CompiledFunction<std::decay_t<F>> compile(
        F &&fn, const CompileOptions &opts = {},
        const std::source_location &where = std::source_location::current()) {
  return CompiledFunction<std::decay_t<F>>(std::forward<F>(fn), opts, where);
}

/// Compiles calls of `module(args...)`; the module must outlive the result.
template <class M>
requires std::derived_from<M, nn::ModuleBase>
auto compile(M &module, const CompileOptions &opts = {},
             const std::source_location &where = std::source_location::current()) {
  auto call = [m = &module](auto &&...args) { return (*m)(std::forward<decltype(args)>(args)...); };
  return CompiledFunction<decltype(call)>(call, opts, where);
}

} // namespace rcjit
