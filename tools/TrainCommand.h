// `rcjit train`: train a built-in model per mode on a synthetic batch stream and print the
// columns of torch.compile's published training table.
#pragma once
#include <ostream>
#include <string>
#include <vector>

namespace rcjit::tools {

/// Runs the train command with its arguments (after "train"). Returns an ExitCode; throws
/// rcjit::Error on runtime failures and std::invalid_argument on bad flags (exit code 2).
int trainCommand(const std::vector<std::string> &args, std::ostream &out, std::ostream &err);

} // namespace rcjit::tools
