#include "verification/run.hpp"

namespace attn {

VerifyRun run_verify(const VerifyRequest& request, const std::vector<VerifyObserver*>& observers) {
  // Refused before an observer prints a header: a case that cannot fit in memory is bad input.
  check_cases(request.cases, request.options.reference, request.implementations);
  for (VerifyObserver* o : observers) o->started(request);
  // verify() makes exactly one record per (case, implementation), implementations innermost.
  std::size_t made = 0;
  VerifyRun run = detail::verify_checked(request.implementations, request.cases, request.options, [&](const VerifyRun& so_far, const Record& record) {
    for (VerifyObserver* o : observers) o->record_made(so_far, record);
    if (++made % request.implementations.size() == 0)  // not reached without implementations: no record
      for (VerifyObserver* o : observers) o->case_finished(so_far);
  });
  for (VerifyObserver* o : observers) o->finished(run);
  return run;
}

std::vector<std::string> idle_implementations(const VerifyRun& run, const std::vector<const Implementation*>& implementations) {
  std::vector<std::string> idle;
  for (const Implementation* impl : implementations)
    if (run.ran(impl->name()) == 0) idle.push_back(impl->name());
  return idle;
}

}  // namespace attn
