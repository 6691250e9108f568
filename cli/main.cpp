// ktune: the command-line front end of ktuned (cli/commands.hpp).
#include "cli/commands.hpp"

#include <iostream>

#include <unistd.h>

int main(int argc, char** argv) {
  ktune::cli::Output io{std::cout, std::cerr, ::isatty(STDERR_FILENO) == 1};
  int code = ktune::cli::run(argc, argv, io);
  std::cout.flush();
  if (!std::cout && code == ktune::cli::k_exit_ok) return ktune::cli::k_exit_error;
  return code;
}
