// The rcjit tool's commands as a library: runCli parses argv and runs one command.
#pragma once
#include <chrono>
#include <fstream>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "jit/CompileGraph.h"
#include "tracer/Tracer.h"

namespace rcjit::tools {

/// Exit codes: 0 ok, 1 runtime failure, 2 usage error. Output goes to `out`, errors and
/// progress to `err`.
enum ExitCode { kOk = 0, kFailure = 1, kUsage = 2 };

/// The compile request `rcjit trace` makes for trace `t` on `target`: the same one-sample
/// request a full-mode compile of that target makes (so --dump ptx shows the program
/// Target::cuda runs).
CompileRequest traceRequest(const Trace &t, Target target);

/// The non-empty items of a comma-separated list ("eager,full,,regional" -> 3 items).
std::vector<std::string> splitList(const std::string &s);
/// The whole of `text` as a decimal integer (std::stoll's syntax, nothing after it), or
/// nullopt: what flags and metadata holding counts are checked with.
std::optional<int64_t> parseInteger(const std::string &text);
/// Milliseconds since t0 on the steady clock.
double msSince(std::chrono::steady_clock::time_point t0);
/// The host CPU's model name (/proc/cpuinfo), or "unknown".
std::string hostCpuName();

/// The table title of a bench or train mode ("full" -> "Full compilation", "regional-warm"
/// -> "Regional, warm start", ...).
std::string modeTitle(const std::string &mode);
/// The upper median of `v` (v[n / 2] once sorted); an rcjit::Error when v is empty.
double median(std::vector<double> v);

/// "1 compile", "3 compiles"; `words` for an irregular plural: plural(2, "entry", "entries").
std::string plural(int64_t n, const std::string &word, const std::string &words = "");
/// A measured value (milliseconds, seconds) with at most 4 significant digits and no more
/// decimals than they need: 482.6, 12.99, 2.545, 0.686, 0.0123; 0 is "0".
std::string formatMeasured(double v);
/// Waits for the background compiles of tiered programs, so that timed calls run the
/// optimized tier (the first call ran the fast one); the milliseconds it waited.
double waitForOptimizedTier();
/// "; optimized tier ready X ms after the first call (...)" for a wait of `ms`, or "" when
/// there was nothing to wait for.
std::string tierReadyNote(double ms);
/// `s` as HTML or XML text or attribute value: & < > " ' escaped, and control characters
/// as controlEscaped shows them (never the raw byte).
std::string markupEscaped(const std::string &s);
/// `s` with every control character but newline and tab shown as text: the C0 controls,
/// DEL and the C1 controls (U+0080-U+009F) as "\x1b", "\x7f", "\u009b". What a terminal
/// or a page shows of strings read from a file (a trace's function names, errors, guards)
/// cannot move the cursor, retitle the window or clear the screen.
std::string controlEscaped(const std::string &s);

/// Throws std::invalid_argument (a usage error) unless `layers` is positive or -1 (the
/// model's own depth).
void checkLayersFlag(int layers);
/// Opens `path` for the --json output before any work starts: an rcjit::Error naming it when
/// it cannot be written. An empty path gives a closed stream (no --json).
std::ofstream openJsonOutput(const std::string &path);
/// Flushes and closes `out` (an output `flag` such as "--json" opened at `path`): an
/// rcjit::Error naming the flag, the path and the reason (errno's text, "No space left on
/// device") when any of what was written did not reach the file.
void closeOutput(std::ofstream &out, const std::string &flag, const std::string &path);
/// Throws rcjit::Error naming `path` and what it is when `path` exists but is not a regular
/// file (a FIFO, a device, a directory), so that opening it cannot block or read without end;
/// a missing file is left to the caller's open. Never blocks.
void checkRegularFile(const std::string &path, const std::string &what);

/// A fresh temporary compile cache directory (/tmp/rcjit-<what>-XXXXXX) made the cache's
/// directory for this object's lifetime; the destructor restores the previous directory and
/// deletes the temporary one. Throws rcjit::Error when it cannot be created.
class TempCacheDir {
public:
  explicit TempCacheDir(const std::string &what);
  ~TempCacheDir();
  TempCacheDir(const TempCacheDir &) = delete;
  TempCacheDir &operator=(const TempCacheDir &) = delete;
  const std::string &path() const { return path_; }

private:
  std::string path_, previous_;
};

/// Runs `rcjit <command> [options]`; never throws.
int runCli(int argc, const char *const *argv, std::ostream &out, std::ostream &err);

} // namespace rcjit::tools
