// runtime_lookup_cpp KERNEL SHAPE [DTYPE]: the same through the C++ wrapper.
#include <ktune/client.hpp>

#include <iostream>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: " << argv[0] << " KERNEL SHAPE [DTYPE]\n";
    return 2;
  }
  ktune::Client client;
  ktune::LookupAnswer answer;
  ktune::LookupError error;
  if (!client.lookup(argv[1], argv[2], answer, &error, argc > 3 ? argv[3] : "f32")) {
    std::cerr << "lookup failed: " << error.message << "\n";
    return 1;
  }
  std::cout << "rung=" << ktune_rung_string(answer.rung)
            << " source=" << ktune_source_string(answer.source) << " config=" << answer.config_json;
  if (!answer.reason.empty()) std::cout << " reason=" << answer.reason;
  std::cout << "\n";
  return 0;
}
