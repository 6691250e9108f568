#include "worker/ab_rounds.hpp"

namespace ktune {

Result<AbOutcome> run_ab_rounds(const AbRequest& request, const MeasureFn& measure) {
  AbOutcome out;
  for (int r = 0; r < request.rounds; ++r) {
    AbRound round;
    round.a_first = r % 2 == 0;
    for (const bool a_side : {round.a_first, !round.a_first}) {
      auto measured = measure(a_side ? request.a : request.b);
      if (!measured) return measured.error();
      if (measured->status != CandidateStatus::ok) {
        out.status = measured->status;
        out.failed_side = a_side ? "a" : "b";
        out.reason = measured->reason;
        return out;
      }
      AbSide& side = a_side ? round.a : round.b;
      side.median_ms = measured->stats.median_ms;
      side.samples = measured->stats.n;
      side.retaken = measured->retaken;
    }
    out.rounds.push_back(round);
  }
  return out;
}

} // namespace ktune
