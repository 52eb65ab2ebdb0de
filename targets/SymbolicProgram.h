// Symbolic programs, fitted from concrete lowerings of one function at several sizes.
//
// Lowering works on concrete shapes. To get one program that serves every value of some
// symbolic sizes, the function is traced and lowered at the trace-time sizes and at two
// probe assignments of the symbols; every number that differs between the lowerings is
// fitted to c * (product of symbols, each at most squared) from the first two and checked
// against the third; a number of the program's values, buffers and steps (not of a kernel)
// may also carry a constant term (the offset of x[:, s-1], the length s + 4 of a cat).
// With probe values that are distinct primes dividing no trace-time size, the fit is unique
// (a product over a different set of symbols cannot match both). A program whose structure
// differs between the lowerings (the function took another path, or a size decided a
// fusion), or with a number of another form (s * s * s; s + 4 as a kernel's loop size),
// cannot be made symbolic: the caller compiles it static and says why.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "targets/Program.h"

namespace rcjit {

/// One lowering of the function with the symbols at `syms`.
struct ProgramSample {
  Program program;
  std::vector<int64_t> syms;
};

/// Fits `values` (one number per sample) to c * a product of the symbols, each at most
/// squared (once each beyond four symbols), lowest degree first.
/// False when no subset fits every sample.
bool fitSize(const std::vector<int64_t> &values, const std::vector<std::vector<int64_t>> &syms,
             SizeExpr &out);

/// Like fitSize, or else c * product + out.add (an offset or length like s - 1 or s + 4),
/// solved from the first two samples and confirmed by the others (at least three).
bool fitSizePlus(const std::vector<int64_t> &values, const std::vector<std::vector<int64_t>> &syms,
                 SizeExpr &out);

/// The symbolic program of samples (at least three; samples[0] at the trace-time sizes,
/// whose numbers the result keeps). Fills out.symbols.fields and the kernels' SizeExprs;
/// the caller sets out.symbols.ranges and sources. Returns false with the reason in `why`.
bool fitSymbolicProgram(const std::vector<ProgramSample> &samples, Program &out, std::string &why);

/// The concrete values, buffers and steps of symbolic program `p` at `syms`, with the arena
/// planned for those sizes. Its kernels are left out: the symbolic ones serve every size.
Program specializeProgram(const Program &p, const int64_t *syms);

/// Probe values for symbols whose trace-time values are `traced` and ranges `ranges`:
/// `count` assignments of distinct primes that divide no traced value and differ from them.
/// False when a range is too small to hold such primes.
bool chooseProbes(const std::vector<int64_t> &traced, const std::vector<Symbol> &ranges, int count,
                  std::vector<std::vector<int64_t>> &out);

} // namespace rcjit
