#pragma once
// The run API of verification: what `attnbench verify`, `check` and `validate` call (and what a
// Python binding can call later). A run is a request (implementations, cases, options) and any
// number of observers, which see the run start, each record as it is made (to print it), each
// case finished (to save the results so far) and the end. What a command prints or writes is its
// observers'; the loop over cases and implementations is verify()'s, here once.
#include <string>
#include <vector>

#include "verification/verify.hpp"

namespace attn {

struct VerifyRequest {
  std::vector<const Implementation*> implementations;
  std::vector<Problem> cases;
  VerifyOptions options;
  std::size_t records() const { return implementations.size() * cases.size(); }
};

class VerifyObserver {
 public:
  virtual ~VerifyObserver() = default;
  // Before the first case (after every case's memory is checked).
  virtual void started(const VerifyRequest&) {}
  // One (case, implementation) judged, or skipped.
  virtual void record_made(const VerifyRun& /*so_far*/, const Record& /*record*/) {}
  // Every implementation's record of one case made: the point to save the results so far.
  virtual void case_finished(const VerifyRun& /*so_far*/) {}
  virtual void finished(const VerifyRun& /*run*/) {}
};

// Runs every implementation on every case (verify()), telling the observers in order.
VerifyRun run_verify(const VerifyRequest& request, const std::vector<VerifyObserver*>& observers = {});

// The implementations of `run` that ran no case (every case skipped: no device, nothing it
// supports), in the request's order. Nothing ran is not a pass: the commands fail on them unless
// told to allow it.
std::vector<std::string> idle_implementations(const VerifyRun& run, const std::vector<const Implementation*>& implementations);

}  // namespace attn
