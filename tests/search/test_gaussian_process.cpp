#include "search/gaussian_process.hpp"

#include <catch2/catch.hpp>

#include <cmath>

using ktune::search::GaussianProcess;

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

TEST_CASE("search/gaussian_process: fits and predicts", "[search][surrogate]") {
  std::vector<double> x;
  std::vector<double> y;
  training_data(x, y);
  for (std::size_t i = 0; i < x.size(); i += 2) x[i] /= 6.0; // features in [0, 1]
  GaussianProcess gp;
  REQUIRE(gp.fit(x, y, 2, ktune::search::HyperParameters::optimise));
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
    CHECK_FALSE(empty.fit({}, {}, 2, ktune::search::HyperParameters::optimise));
    const double row[] = {0.1, 0.2};
    CHECK(empty.predict(row).mean == 0.0);
  }
}
