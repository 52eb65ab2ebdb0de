// The process-wide controls of tiered compilation that tests and benchmarks use (jit/Tiered.h
// has the rest): waiting for the background compiles, and how a first tier runs.
#pragma once

namespace rcjit {

/// Waits until the background thread has no job left (tests, benchmarks); false after
/// `seconds` with one still running.
bool waitForBackgroundCompiles(double seconds);

/// Whether a tiered compile's first tier may interpret the traced graph (env
/// RCJIT_FIRST_TIER=interpret, the default, or compile; read once): a request with
/// CompileRequest::interpretFirst (a forward program, a regional stage, the forward half of
/// compiled training) then lowers its graph for the output layouts but compiles no loop
/// kernel, and its first calls run the traced ops on the eager kernels, as an eager call
/// would (jit/Interpreter.h), until the optimized tier is ready. A backward half or a whole
/// step (whose elementwise work the fused kernels save) compiles its fast tier as before.
bool interpretedFirstTier();

/// Sets interpretedFirstTier() for the process (tests that look at a compiled fast tier);
/// returns the previous setting.
bool setInterpretedFirstTier(bool on);

} // namespace rcjit
