// A command's flags parsed the same way in every command of the rcjit tool (Boost.Program_options).
#pragma once
#include <boost/program_options.hpp>
#include <ostream>
#include <string>
#include <vector>

namespace rcjit::tools {

/// Parses `args` against `desc` into `vm` (an unknown flag or a bad value throws
/// boost::program_options::error). Returns false, having printed `desc` to `out`, when the
/// flags ask for --help: the command then exits 0. Thread-safe.
inline bool parseFlags(const boost::program_options::options_description &desc,
                       const std::vector<std::string> &args,
                       boost::program_options::variables_map &vm, std::ostream &out) {
  namespace po = boost::program_options;
  po::store(po::command_line_parser(args).options(desc).run(), vm);
  po::notify(vm);
  if (!vm.count("help")) return true;
  out << desc;
  return false;
}

/// The same with positional arguments (`rcjit run MODEL.onnx ...`) mapped by `pos`.
inline bool parseFlags(const boost::program_options::options_description &desc,
                       const boost::program_options::positional_options_description &pos,
                       const std::vector<std::string> &args,
                       boost::program_options::variables_map &vm, std::ostream &out) {
  namespace po = boost::program_options;
  po::store(po::command_line_parser(args).options(desc).positional(pos).run(), vm);
  po::notify(vm);
  if (!vm.count("help")) return true;
  out << desc;
  return false;
}

} // namespace rcjit::tools
