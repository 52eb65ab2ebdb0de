// `rcjit bench`: time a built-in model per mode and batch; table, JSON and plot output.
#pragma once
#include <ostream>
#include <string>
#include <vector>

namespace rcjit::tools {

/// Runs the bench command with its arguments (after "bench"). Returns an ExitCode; throws
/// rcjit::Error on runtime failures and UsageError-like std::invalid_argument on bad flags.
int benchCommand(const std::vector<std::string> &args, std::ostream &out, std::ostream &err);

} // namespace rcjit::tools
