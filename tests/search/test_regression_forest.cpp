#include "search/regression_forest.hpp"

#include <catch2/catch.hpp>

#include <cmath>

using ktune::search::ForestOptions;
using ktune::search::RegressionForest;

namespace {

// y = (x0 - 3)^2 + 2 * [x1 > 0.5] on a 7 x 2 grid.
void training_data(std::vector<double>& x, std::vector<double>& y) {
  for (int a = 0; a < 7; ++a) {
    for (int b = 0; b < 2; ++b) {
      x.push_back(a);
      x.push_back(b);
      y.push_back((a - 3.0) * (a - 3.0) + 2.0 * b);
    }
  }
}

} // namespace

TEST_CASE("search/regression_forest: fits and predicts", "[search][surrogate]") {
  std::vector<double> x;
  std::vector<double> y;
  training_data(x, y);
  std::mt19937_64 rng(5);
  RegressionForest forest;
  forest.fit(x, y, 2, ForestOptions{}, rng);
  SECTION("reproduces the training targets") {
    for (std::size_t i = 0; i < y.size(); ++i) CHECK(forest.predict(&x[i * 2]).mean == Approx(y[i]).margin(1e-9));
  }
  SECTION("orders unseen points sensibly") {
    const double near_min[] = {3.2, 0.0};
    const double far[] = {6.4, 1.0};
    CHECK(forest.predict(near_min).mean < forest.predict(far).mean);
    CHECK(forest.predict(near_min).stddev >= 0);
  }
  SECTION("same engine state, same forest") {
    std::mt19937_64 again(5);
    RegressionForest twin;
    twin.fit(x, y, 2, ForestOptions{}, again);
    const double probe[] = {2.5, 0.7};
    CHECK(twin.predict(probe).mean == forest.predict(probe).mean);
  }
  SECTION("degenerate inputs predict the mean") {
    RegressionForest empty;
    empty.fit({}, {}, 2, ForestOptions{}, rng);
    const double probe[] = {1.0, 1.0};
    CHECK(empty.predict(probe).mean == 0.0);
    RegressionForest constant;
    constant.fit({1.0, 2.0}, {4.0, 4.0}, 1, ForestOptions{}, rng);
    CHECK(constant.predict(probe).mean == 4.0);
  }
}
