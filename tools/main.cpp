// The rcjit command-line tool: all commands live in the rcjit-tool library (Cli.h).
#include <iostream>

#include "tools/Cli.h"

int main(int argc, char **argv) { return rcjit::tools::runCli(argc, argv, std::cout, std::cerr); }
