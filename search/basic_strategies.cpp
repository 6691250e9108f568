// exhaustive and random: the two strategies that learn nothing.
#include "search/strategies.hpp"

namespace ktune::search {

namespace {

class Exhaustive final : public Strategy {
public:
  Exhaustive(const SearchSpace& space, std::uint64_t seed) : Strategy(space, seed) {}
  [[nodiscard]] std::string_view name() const override { return "exhaustive"; }

private:
  void next(std::size_t max_batch, std::vector<std::size_t>& out) override {
    while (out.size() < max_batch && m_next < space().size()) out.push_back(m_next++);
  }
  void learn(std::size_t, std::optional<double>) override {}

  std::size_t m_next = 0;
};

class Random final : public Strategy {
public:
  Random(const SearchSpace& space, std::uint64_t seed) : Strategy(space, seed) {}
  [[nodiscard]] std::string_view name() const override { return "random"; }

private:
  void next(std::size_t max_batch, std::vector<std::size_t>& out) override {
    // Uniform without replacement: every draw is uniform over the still unproposed configs.
    if (max_batch >= unproposed_count()) {
      out.insert(out.end(), unproposed().begin(), unproposed().end());
      return;
    }
    if (max_batch == 1) {
      out.push_back(*random_unproposed()); // the same draw as the loop below, without the copy
      return;
    }
    std::vector<std::uint32_t> pool(unproposed());
    for (std::size_t k = 0; k < max_batch; ++k) {
      const std::size_t i = k + uniform_index(pool.size() - k);
      std::swap(pool[k], pool[i]);
      out.push_back(pool[k]);
    }
  }
  void learn(std::size_t, std::optional<double>) override {}
};

} // namespace

std::unique_ptr<Strategy> make_exhaustive(const SearchSpace& space, std::uint64_t seed) {
  return std::make_unique<Exhaustive>(space, seed);
}

std::unique_ptr<Strategy> make_random(const SearchSpace& space, std::uint64_t seed) {
  return std::make_unique<Random>(space, seed);
}

} // namespace ktune::search
