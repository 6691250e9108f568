#pragma once
// The concrete strategies behind make_strategy() (search/strategy.hpp), one per file.
#include "search/prior.hpp"
#include "search/strategy.hpp"

#include <memory>

namespace ktune::search {

[[nodiscard]] std::unique_ptr<Strategy> make_exhaustive(const SearchSpace& space, std::uint64_t seed);
[[nodiscard]] std::unique_ptr<Strategy> make_random(const SearchSpace& space, std::uint64_t seed);
[[nodiscard]] std::unique_ptr<Strategy> make_local(const SearchSpace& space, std::uint64_t seed);
[[nodiscard]] std::unique_ptr<Strategy> make_annealing(const SearchSpace& space, std::uint64_t seed);
[[nodiscard]] std::unique_ptr<Strategy> make_genetic(const SearchSpace& space, std::uint64_t seed);
[[nodiscard]] std::unique_ptr<Strategy> make_bayes(const SearchSpace& space, std::uint64_t seed,
                                                     const Prior& prior);

} // namespace ktune::search
