#include "bench/sampler.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <vector>

using ktune::MeasureSettings;
using ktune::Sampler;
using ktune::SampleStop;

namespace {

MeasureSettings settings() {
  MeasureSettings s;
  s.min_samples = 10;
  s.max_samples = 1000;
  s.target_rsd = 0.01;
  s.min_time_s = 0.0;
  s.max_time_s = 100.0;
  s.prune_after = 3;
  return s;
}

// Feeds `value(i)` until the sampler stops (at most `limit` samples); returns the stop and count.
template <typename F>
std::pair<SampleStop, std::size_t> run(Sampler& sampler, F value, std::size_t limit = 5000) {
  const auto start = Sampler::Clock::now();
  for (std::size_t i = 0; i < limit; ++i) {
    const auto stop = sampler.add(value(i), start);
    if (stop != SampleStop::more) return {stop, sampler.count()};
  }
  return {SampleStop::more, sampler.count()};
}

} // namespace

TEST_CASE("Sampler stops when the rsd converges, not before min_samples", "[bench][sampler]") {
  Sampler sampler(settings(), 0, Sampler::Clock::now());
  auto [stop, n] = run(sampler, [](std::size_t i) { return 1.0 + 0.001 * static_cast<double>(i % 2); });
  CHECK(stop == SampleStop::converged);
  CHECK(n == 10);
  CHECK(sampler.take_samples().size() == 10);
}

TEST_CASE("Sampler stops when real noise has settled", "[bench][sampler]") {
  // A steady 10% alternation never gets under a 1% rsd; its rsd estimate settles.
  Sampler sampler(settings(), 0, Sampler::Clock::now());
  auto [stop, n] = run(sampler, [](std::size_t i) { return i % 2 == 0 ? 1.0 : 1.2; });
  CHECK(stop == SampleStop::settled);
  CHECK(n >= 10 + Sampler::k_settle_window - 1);
  CHECK(n < 1000);
}

TEST_CASE("Sampler caps at max_samples and max measured time", "[bench][sampler]") {
  SECTION("max_samples") {
    auto s = settings();
    s.max_samples = 12;
    Sampler sampler(s, 0, Sampler::Clock::now());
    // Growing noise: the rsd never settles or converges.
    auto [stop, n] = run(sampler, [](std::size_t i) { return 1.0 + static_cast<double>(i * i); });
    CHECK(stop == SampleStop::capped);
    CHECK(n == 12);
  }
  SECTION("measured time") {
    auto s = settings();
    s.max_time_s = 0.005; // 5 ms
    Sampler sampler(s, 0, Sampler::Clock::now());
    auto [stop, n] = run(sampler, [](std::size_t i) { return 1.0 + static_cast<double>(i * i); });
    CHECK(stop == SampleStop::capped);
    CHECK(n == 3); // 1 + 2 + 5 ms
  }
}

TEST_CASE("Sampler prunes a candidate slower than the threshold after prune_after samples",
          "[bench][sampler]") {
  SECTION("slow: pruned after 3 samples") {
    Sampler sampler(settings(), 2.0, Sampler::Clock::now());
    auto [stop, n] = run(sampler, [](std::size_t) { return 2.5; });
    CHECK(stop == SampleStop::pruned);
    CHECK(n == 3);
  }
  SECTION("one slow outlier among fast first samples is not pruned") {
    Sampler sampler(settings(), 2.0, Sampler::Clock::now());
    auto [stop, n] = run(sampler, [](std::size_t i) { return i == 0 ? 9.0 : 1.0; });
    CHECK(stop != SampleStop::pruned);
    CHECK(n >= 10);
  }
  SECTION("no threshold: never pruned") {
    Sampler sampler(settings(), 0, Sampler::Clock::now());
    auto [stop, n] = run(sampler, [](std::size_t) { return 50.0; });
    CHECK(stop == SampleStop::converged);
  }
}

TEST_CASE("Sampler retakes preempted samples and never prunes on them", "[bench][sampler]") {
  const auto start = Sampler::Clock::now();
  SECTION("the margin: wall above CPU time by 5% plus 20 us") {
    CHECK_FALSE(Sampler::preempted(1.0, 1.0));
    CHECK_FALSE(Sampler::preempted(1.06, 1.0));  // within 5% + 0.02 ms
    CHECK(Sampler::preempted(1.08, 1.0));
    CHECK_FALSE(Sampler::preempted(0.015, 0.001)); // the slack covers a tiny kernel's clock reads
    CHECK(Sampler::preempted(4.0, 2.0));
  }
  SECTION("a preempted sample is not counted; the next undisturbed one is") {
    Sampler sampler(settings(), 0, start);
    CHECK(sampler.add(6.0, start, 2.0) == SampleStop::more);
    CHECK(sampler.count() == 0);
    CHECK(sampler.retaken() == 1);
    CHECK(sampler.add(2.0, start, 2.0) == SampleStop::more);
    CHECK(sampler.count() == 1);
    CHECK(sampler.take_samples() == std::vector<double>{2.0});
  }
  SECTION("retakes are bounded: after k_max_retakes in a row the sample counts") {
    Sampler sampler(settings(), 0, start);
    for (int i = 0; i < Sampler::k_max_retakes; ++i) {
      CHECK(sampler.add(6.0, start, 2.0) == SampleStop::more);
      CHECK(sampler.count() == 0);
    }
    CHECK(sampler.add(6.0, start, 2.0) == SampleStop::more);
    CHECK(sampler.count() == 1);
    CHECK(sampler.retaken() == static_cast<std::size_t>(Sampler::k_max_retakes));
    // The count of retakes in a row starts again after a counted sample.
    CHECK(sampler.add(6.0, start, 2.0) == SampleStop::more);
    CHECK(sampler.count() == 1);
  }
  SECTION("a 2 ms candidate whose first samples were preempted (6-14 ms) is not pruned at 4 ms") {
    Sampler sampler(settings(), 4.0, start);
    // Every sample of the first three is preempted, even after its retakes: those count, and
    // the prune test sees their CPU time (2 ms), not their wall time.
    std::size_t i = 0;
    SampleStop stop = SampleStop::more;
    for (; i < 100 && sampler.count() < 3 && stop == SampleStop::more; ++i) {
      const double wall = 6.0 + static_cast<double>(i % 5) * 2.0;
      stop = sampler.add(wall, start, 2.0);
    }
    REQUIRE(stop == SampleStop::more);
    CHECK(sampler.count() == 3);
    for (; i < 1000 && stop == SampleStop::more; ++i) stop = sampler.add(2.0, start, 2.0);
    CHECK(stop != SampleStop::pruned);
    CHECK(sampler.count() >= 10);
  }
  SECTION("retakes are bounded overall: about one per counted sample") {
    Sampler sampler(settings(), 0, start);
    std::size_t adds = 0;
    while (sampler.add(6.0 + static_cast<double>(adds % 3), start, 2.0) == SampleStop::more) ++adds;
    ++adds;
    CHECK(sampler.count() >= 10);
    CHECK(sampler.count() + sampler.retaken() == adds);
    CHECK(sampler.retaken() <= sampler.count() + static_cast<std::size_t>(Sampler::k_max_retakes));
  }
  SECTION("a slow candidate whose samples are all preempted is pruned on their CPU times") {
    Sampler sampler(settings(), 4.0, start);
    SampleStop stop = SampleStop::more;
    for (int i = 0; i < 100 && stop == SampleStop::more; ++i) stop = sampler.add(12.0, start, 5.0);
    CHECK(stop == SampleStop::pruned);
    CHECK(sampler.count() == 3);
  }
  SECTION("a truly slow candidate is still pruned on its undisturbed samples") {
    Sampler sampler(settings(), 4.0, start);
    CHECK(sampler.add(12.0, start, 2.0) == SampleStop::more);  // preempted: retaken
    CHECK(sampler.add(5.0, start, 5.0) == SampleStop::more);
    CHECK(sampler.add(5.0, start, 5.0) == SampleStop::more);
    CHECK(sampler.add(5.0, start, 5.0) == SampleStop::pruned);
    CHECK(sampler.count() == 3);
  }
}

TEST_CASE("Sampler races a candidate out once its median is above the bound with 99% confidence",
          "[bench][sampler]") {
  auto s = settings();
  s.target_rsd = 0;  // only racing, settling or the cap can stop it
  SECTION("clearly slower: out at the first sample the test may judge") {
    Sampler sampler(s, 0, Sampler::Clock::now(), 1.3);
    auto [stop, n] = run(sampler, [](std::size_t i) { return 1.5 + 0.01 * static_cast<double>(i % 3); });
    CHECK(stop == SampleStop::raced);
    CHECK(n == Sampler::k_race_min_samples);
  }
  SECTION("just over the bound and noisy: out, later") {
    s.min_samples = 100;  // nothing but the race stops it early
    Sampler sampler(s, 0, Sampler::Clock::now(), 1.3);
    // 3 in 10 samples under the bound: the median (1.45) is above it, but only ~42 samples
    // put the interval's lower end there.
    auto [stop, n] = run(sampler, [](std::size_t i) { return i % 10 < 3 ? 1.25 : 1.45; });
    CHECK(stop == SampleStop::raced);
    CHECK(n > Sampler::k_race_min_samples);
  }
  SECTION("a candidate whose median is under the bound is never raced out") {
    Sampler sampler(s, 0, Sampler::Clock::now(), 1.3);
    // Half its samples are far above the bound: the median is 1.2, the lower bound below it.
    auto [stop, n] = run(sampler, [](std::size_t i) { return i % 2 == 0 ? 1.2 : 9.0; });
    CHECK(stop != SampleStop::raced);
  }
  SECTION("preempted samples enter the race with their CPU time") {
    Sampler sampler(s, 0, Sampler::Clock::now(), 1.3);
    const auto start = Sampler::Clock::now();
    SampleStop stop = SampleStop::more;
    for (int i = 0; i < 200 && stop == SampleStop::more; ++i) stop = sampler.add(5.0, start, 1.0);
    CHECK(stop != SampleStop::raced);
  }
  SECTION("without a bound there is no race") {
    Sampler sampler(s, 0, Sampler::Clock::now());
    auto [stop, n] = run(sampler, [](std::size_t) { return 100.0; });
    CHECK(stop != SampleStop::raced);
  }
}

TEST_CASE("the median's lower confidence bound is a distribution-free order statistic",
          "[bench][sampler]") {
  std::vector<double> eight = {8, 7, 6, 5, 4, 3, 2, 1};
  CHECK(Sampler::median_lower_bound(eight) == 1.0);  // rank floor((8 - 7.29) / 2) = 0
  std::vector<double> hundred;
  for (int i = 100; i >= 1; --i) hundred.push_back(i);
  CHECK(Sampler::median_lower_bound(hundred) == 38.0);  // rank floor((100 - 25.76) / 2) = 37
}

TEST_CASE("Sampler stops once the median is known to within target_error", "[bench][sampler]") {
  auto s = settings();
  s.target_rsd = 0;  // only the median's interval (or settling, or the cap) can stop it
  s.min_samples = 3;
  s.target_error = 0.01;  // a 95% interval of at most +-1.96%
  SECTION("tight samples: at min_samples") {
    Sampler sampler(s, 0, Sampler::Clock::now());
    auto [stop, n] = run(sampler, [](std::size_t i) { return 10.0 + 0.05 * static_cast<double>(i % 3); });
    CHECK(stop == SampleStop::converged);
    CHECK(n == 3);
  }
  SECTION("a burst of disturbed samples widens the median's interval less than the rsd") {
    // Every fourth sample twice as slow: an rsd of ~40% that never converges as a mean, while
    // the median's interval narrows to the undisturbed samples.
    Sampler sampler(s, 0, Sampler::Clock::now());
    auto [stop, n] = run(sampler, [](std::size_t i) { return i % 4 == 1 ? 20.0 : 10.0 + 0.01 * static_cast<double>(i % 3); });
    CHECK(stop == SampleStop::converged);
    CHECK(n > 3);
    CHECK(n < 40);
    CHECK(sampler.rsd() > 0.3);
  }
  SECTION("spread wider than the target: more samples") {
    Sampler sampler(s, 0, Sampler::Clock::now());
    auto [stop, n] = run(sampler, [](std::size_t i) { return 10.0 * (1.0 + 0.1 * static_cast<double>(i % 5)); });
    CHECK(stop != SampleStop::converged);
  }
  SECTION("target_error 0 turns the test off") {
    s.target_error = 0;
    Sampler sampler(s, 0, Sampler::Clock::now());
    auto [stop, n] = run(sampler, [](std::size_t i) { return 10.0 + 0.05 * static_cast<double>(i % 3); });
    CHECK(stop != SampleStop::converged);  // it settles instead, after the settle window
    CHECK(n > Sampler::k_settle_window);
  }
}

TEST_CASE("Sampler warms up until two runs agree, and screens on the checked run", "[bench][sampler]") {
  auto s = settings();
  s.min_samples = 3;
  s.warmup_ms = 25;
  const auto start = Sampler::Clock::now();
  SECTION("a checked run like the first sample: no sample is lost to the warm-up") {
    Sampler sampler(s, 0, start);
    sampler.screen(10.0);
    CHECK(sampler.add(10.1, start, 10.1) == SampleStop::more);
    CHECK(sampler.count() == 1);
    CHECK(sampler.warmup_samples() == 0);
  }
  SECTION("samples are not counted until one agrees with the one before") {
    Sampler sampler(s, 0, start);
    sampler.screen(4.0);  // cold
    CHECK(sampler.add(3.0, start, 3.0) == SampleStop::more);
    CHECK(sampler.add(2.5, start, 2.5) == SampleStop::more);
    CHECK(sampler.count() == 0);
    CHECK(sampler.add(2.51, start, 2.51) == SampleStop::more);
    CHECK(sampler.count() == 1);
    CHECK(sampler.warmup_samples() == 2);
    CHECK(sampler.take_samples() == std::vector<double>{2.51});
  }
  SECTION("a warm-up that never settles ends after warmup_ms") {
    Sampler sampler(s, 0, start);
    sampler.screen(1.0);
    std::size_t i = 0;
    while (sampler.count() == 0 && i < 100) {
      (void)sampler.add(i % 2 == 0 ? 2.0 : 4.0, start, std::nullopt);
      ++i;
    }
    CHECK(sampler.warmup_samples() > 0);
    CHECK(static_cast<double>(sampler.warmup_samples()) * 2.0 <= s.warmup_ms + 4.0);
  }
  SECTION("a tiny kernel warms up for at least k_warm_min_ms") {
    Sampler sampler(s, 0, start);
    sampler.screen(0.01);
    std::size_t i = 0;
    while (sampler.count() == 0 && i < 10000) {
      (void)sampler.add(0.01, start, 0.01);
      ++i;
    }
    CHECK(static_cast<double>(sampler.warmup_samples() + 1) * 0.01 >= Sampler::k_warm_min_ms - 0.011);
  }
  SECTION("wall time counts: a microsecond kernel behind a 4 ms flush warms up for warmup_ms of it") {
    Sampler sampler(s, 0, start);
    sampler.screen(0.001);
    std::size_t i = 0;
    while (sampler.count() == 0 && i < 100000) {
      ++i;
      // Every run takes 1 us or 2 us, never agreeing; 4 ms of flushing passes before each.
      (void)sampler.add(i % 2 == 0 ? 0.001 : 0.002, start + std::chrono::milliseconds(4 * i), std::nullopt);
    }
    CHECK(sampler.count() == 1);
    CHECK(sampler.warmup_samples() <= 8);  // 25 ms of wall time, not 25 ms of 1 us runs
  }
  SECTION("a checked run above the prune bound: pruned after one sample above it, no warm-up") {
    Sampler sampler(s, 4.0, start);
    sampler.screen(9.0);
    CHECK(sampler.add(9.1, start, 9.1) == SampleStop::pruned);
    CHECK(sampler.count() == 1);
  }
  SECTION("a checked run above the bound but a fast first sample: the usual prune test") {
    Sampler sampler(s, 4.0, start);
    sampler.screen(9.0);  // e.g. page faults in the checked run
    CHECK(sampler.add(2.0, start, 2.0) == SampleStop::more);
    CHECK(sampler.add(2.0, start, 2.0) == SampleStop::more);
    CHECK(sampler.count() == 2);
  }
}

TEST_CASE("Sampler stops a sure finalist at min_samples: the finals measure it again", "[bench][sampler]") {
  auto s = settings();
  s.target_rsd = 0;
  s.target_error = 0;  // nothing else stops it early
  s.min_samples = 3;
  SECTION("well under the bound: out at min_samples, as a finalist") {
    Sampler sampler(s, 0, Sampler::Clock::now());
    sampler.finals_bound(13.0);
    auto [stop, n] = run(sampler, [](std::size_t i) { return 10.0 + static_cast<double>(i % 3); });
    CHECK(stop == SampleStop::finalist);
    CHECK(n == 3);
  }
  SECTION("straddling the bound: measured until it is clear which side it is on") {
    Sampler sampler(s, 0, Sampler::Clock::now());
    sampler.finals_bound(13.0);
    auto [stop, n] = run(sampler, [](std::size_t i) { return i % 4 == 0 ? 14.0 : 12.0; });
    CHECK(stop == SampleStop::finalist);
    CHECK(n > 3);
  }
  SECTION("above the bound: never a finalist") {
    Sampler sampler(s, 0, Sampler::Clock::now());
    sampler.finals_bound(13.0);
    auto [stop, n] = run(sampler, [](std::size_t i) { return 14.0 + 0.1 * static_cast<double>(i % 3); });
    CHECK(stop == SampleStop::raced);
  }
  SECTION("no bound: never") {
    Sampler sampler(s, 0, Sampler::Clock::now());
    auto [stop, n] = run(sampler, [](std::size_t) { return 1.0; });
    CHECK(stop != SampleStop::finalist);
  }
}

TEST_CASE("While the job holds finals, a candidate clearly outside them is raced out at min_samples",
          "[bench][sampler]") {
  auto s = settings();
  s.target_rsd = 0;
  s.target_error = 0;
  s.min_samples = 3;
  Sampler sampler(s, 0, Sampler::Clock::now());
  sampler.finals_bound(13.0);
  auto [stop, n] = run(sampler, [](std::size_t i) { return 16.0 + static_cast<double>(i % 3); });
  CHECK(stop == SampleStop::raced);
  CHECK(n == 3);
}

TEST_CASE("The finals' bound is decided at min_samples by millisecond samples, not by min_time_s",
          "[bench][sampler]") {
  auto s = settings();
  s.target_rsd = 0;
  s.target_error = 0;
  s.min_samples = 3;
  s.min_time_s = 0.05;  // 50 ms: 10 samples of 5 ms, 500 of 0.1 ms
  // Samples of 5.0, 5.1, 5.2 ms against the finals' bound, after a checked run of `checked_ms`
  // (0: none).
  const auto decide = [&](double checked_ms, double bound_ms) {
    Sampler sampler(s, 0, Sampler::Clock::now());
    if (checked_ms > 0) sampler.screen(checked_ms);
    sampler.finals_bound(bound_ms);
    return run(sampler, [](std::size_t i) { return 5.0 + 0.1 * static_cast<double>(i % 3); });
  };
  using Decision = std::pair<SampleStop, std::size_t>;
  SECTION("5 ms samples: raced and finalist at 3 samples (15 ms measured)") {
    CHECK(decide(0, 4.0) == Decision{SampleStop::raced, 3});
    CHECK(decide(0, 6.0) == Decision{SampleStop::finalist, 3});
  }
  SECTION("the checked run is one of the min_samples runs, on the same side of the bound") {
    CHECK(decide(5.2, 4.0) == Decision{SampleStop::raced, 2});
    CHECK(decide(5.2, 6.0) == Decision{SampleStop::finalist, 2});
    // A checked run on the other side keeps the candidate in doubt until the samples alone
    // decide: the range of 3 to 5 samples includes the checked run, the interval of 6 does not.
    CHECK(decide(3.9, 4.0) == Decision{SampleStop::raced, 6});
  }
  SECTION("0.1 ms samples: min_time_s still holds") {
    Sampler sampler(s, 0, Sampler::Clock::now());
    sampler.finals_bound(0.08);
    auto [stop, n] = run(sampler, [](std::size_t i) { return 0.1 + 0.001 * static_cast<double>(i % 3); });
    CHECK(stop == SampleStop::raced);
    CHECK(n > 400);  // about 50 ms of them
  }
  SECTION("the precision stop keeps min_time_s whatever the samples' length") {
    s.target_error = 0.01;
    Sampler sampler(s, 0, Sampler::Clock::now());
    auto [stop, n] = run(sampler, [](std::size_t) { return 5.0; });
    CHECK(stop == SampleStop::converged);
    CHECK(n >= 10);  // 50 ms, give or take the sum's rounding
    CHECK(n <= 11);
  }
}
