#pragma once
// The run API of the property suite: what `attnbench properties` and `validate` call (and what a
// Python binding can call later). A run is a request (implementations, properties, options, or one
// problem to replay) and observers that see each verdict as it comes, to print it or save the
// results so far; the loop over properties and implementations is here once.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "properties/property_suite.hpp"

namespace attn {

struct PropertiesRequest {
  std::vector<const Implementation*> implementations;
  std::vector<const Property*> properties;  // in the order to run; empty: the whole suite
  PropertyOptions options;
  // Set: every property is checked on exactly this problem (a printed counterexample replayed),
  // up to `rounds` times while it holds: a failure that depends on earlier calls (state kept
  // between calls, a race lost now and then) shows again where one check would pass.
  std::optional<Problem> single_case;
  int rounds = 1;
  // Non-empty for an implementation that must get no more calls (a plugin given up on after its
  // calls timed out): its remaining properties are reported as not run, with this reason.
  std::function<std::string(const Implementation&)> stopped;
};

struct PropertiesOutcome {
  std::vector<PropertyVerdict> verdicts;  // in the order checked
  int failed = 0, findings = 0, gave_up = 0;
  int cases = 0;  // successful cases over every verdict: none is not a pass
};

class PropertiesObserver {
 public:
  virtual ~PropertiesObserver() = default;
  // Before the first implementation is checked against the property.
  virtual void property_started(const Property&) {}
  // The property was not checked on the implementation (PropertiesRequest::stopped).
  virtual void not_run(const Property&, const Implementation&, const std::string& /*why*/) {}
  virtual void verdict_made(const PropertyVerdict&, const Property&, const Implementation&) {}
  virtual void finished(const PropertiesOutcome&) {}
};

// Properties outer, implementations inner, telling the observers in order.
PropertiesOutcome run_properties(const PropertiesRequest& request, const std::vector<PropertiesObserver*>& observers = {});

// The properties numbered `numbers` (empty: none); InputError naming `option` for a number
// outside the suite.
std::vector<const Property*> properties_numbered(const std::vector<int>& numbers, const char* option);

}  // namespace attn
