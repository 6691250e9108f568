#include "search/gaussian_process.hpp"
#include "search/regression_forest.hpp"
#include "search/surrogate_support.hpp"

#include <catch2/catch.hpp>

#include <cmath>

using ktune::search::ForestOptions;
using ktune::search::GaussianProcess;
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

TEST_CASE("search/gaussian_process: fits and predicts", "[search][surrogate]") {
  std::vector<double> x;
  std::vector<double> y;
  training_data(x, y);
  for (std::size_t i = 0; i < x.size(); i += 2) x[i] /= 6.0; // features in [0, 1]
  GaussianProcess gp;
  REQUIRE(gp.fit(x, y, 2, true));
  SECTION("interpolates the training data, with little variance there") {
    for (std::size_t i = 0; i < y.size(); ++i) {
      const auto p = gp.predict(&x[i * 2]);
      CHECK(p.mean == Approx(y[i]).margin(0.3));
      CHECK(p.stddev < 0.5);
    }
  }
  SECTION("uncertainty grows away from the data") {
    const double inside[] = {0.5, 0.0};
    const double outside[] = {3.0, 4.0};
    CHECK(gp.predict(outside).stddev > gp.predict(inside).stddev);
    CHECK(gp.predict(outside).stddev <= gp.prior_stddev() * (1 + 1e-9));
  }
  SECTION("the screening bound never undercuts the exact standard deviation") {
    for (double a = 0; a <= 1.0; a += 0.1) {
      const double row[] = {a, 0.3};
      std::vector<double> covariances;
      const auto bounded = gp.predict_bounded(row, covariances);
      const double exact = gp.finish_stddev(covariances);
      CHECK(bounded.stddev >= exact - 1e-12);
      CHECK(bounded.mean == Approx(gp.predict(row).mean));
    }
  }
  SECTION("no data") {
    GaussianProcess empty;
    CHECK_FALSE(empty.fit({}, {}, 2, true));
    const double row[] = {0.1, 0.2};
    CHECK(empty.predict(row).mean == 0.0);
  }
}

TEST_CASE("search/surrogate_support: features and expected improvement", "[search][surrogate]") {
  using ktune::search::alignment;
  using ktune::search::expected_improvement;
  using ktune::search::wants_alignment_feature;
  CHECK(alignment(48) == 4);
  CHECK(alignment(64) == 6);
  CHECK(alignment(7) == 0);
  CHECK(alignment(0) == 0);
  CHECK(alignment(2.5) == 0);
  CHECK(wants_alignment_feature({16, 32, 48, 64, 80}));
  CHECK_FALSE(wants_alignment_feature({1, 2, 4, 8}));
  CHECK_FALSE(wants_alignment_feature({0, 1}));
  CHECK_FALSE(wants_alignment_feature({1.5, 3, 6}));

  CHECK(expected_improvement(1.0, 0.0, 2.0) == 1.0);
  CHECK(expected_improvement(3.0, 0.0, 2.0) == 0.0);
  CHECK(expected_improvement(2.0, 1.0, 2.0) == Approx(0.3989422804));
  CHECK(expected_improvement(1.0, 1.0, 2.0) > expected_improvement(3.0, 1.0, 2.0));
  CHECK(expected_improvement(3.0, 2.0, 2.0) > expected_improvement(3.0, 1.0, 2.0));
}
