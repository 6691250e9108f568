#pragma once
// FUZZ_CHECK(cond, what): a property every input must satisfy. A violation prints what was
// expected and aborts, so libFuzzer records the input as a crash.
#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond, what)                                                            \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "%s:%d: property violated: %s (%s)\n", __FILE__, __LINE__, #cond, \
                   what);                                                                 \
      std::abort();                                                                       \
    }                                                                                     \
  } while (false)
