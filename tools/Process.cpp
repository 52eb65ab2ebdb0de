// Child processes without a shell (see Process.h).
#include "tools/Process.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>

extern char **environ;

namespace rcjit::tools {

int runProgram(const std::vector<std::string> &argv) {
  if (argv.empty()) return -1;
  std::vector<std::string> args = argv; // posix_spawn takes char *const[]
  std::vector<char *> ptrs;
  for (std::string &a : args) ptrs.push_back(a.data());
  ptrs.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, ptrs[0], &fa, nullptr, ptrs.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

} // namespace rcjit::tools
