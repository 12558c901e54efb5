// The gate's verdicts (gate.hpp): accuracy, presence and speed outcomes, their one-line form and
// JUnit XML.
#include "reports/gate.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "core/error.hpp"
#include "reports/mann_whitney.hpp"

namespace attn::gate {
namespace {

using nlohmann::json;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string format_ms(double ms) { return ms >= 100 ? fmt::format("{:.1f} ms", ms) : ms >= 1 ? fmt::format("{:.3f} ms", ms) : fmt::format("{:.4f} ms", ms); }
std::string format_change(double ratio) { return fmt::format("{:+.0f} %", (ratio - 1) * 100); }
std::string format_p(double p) { return p >= 0.001 ? fmt::format("{:.3f}", p) : fmt::format("{:.1e}", p); }
std::string format_error(double x) { return std::isfinite(x) ? fmt::format("{:.3g}", x) : "inf/nan"; }

bool implementation_gated(const AccuracyConfig& config, const std::string& implementation) {
  return config.implementations.empty() ||
         std::find(config.implementations.begin(), config.implementations.end(), implementation) != config.implementations.end();
}

std::string accuracy_name(const AccuracyCase& c) { return c.implementation + " " + c.label; }


}  // namespace

const char* to_string(Kind kind) {
  switch (kind) {
    case Kind::accuracy: return "accuracy";
    case Kind::presence: return "presence";
    case Kind::speed: return "speed";
  }
  return "?";
}

const char* to_string(Verdict verdict) {
  switch (verdict) {
    case Verdict::pass: return "PASS";
    case Verdict::fail: return "FAIL";
    case Verdict::skipped: return "SKIP";
  }
  return "?";
}

int Report::count(Kind kind, Verdict verdict) const {
  return int(std::count_if(outcomes.begin(), outcomes.end(), [&](const Outcome& o) { return o.kind == kind && o.verdict == verdict; }));
}

int Report::failures() const {
  return int(std::count_if(outcomes.begin(), outcomes.end(), [](const Outcome& o) { return o.verdict == Verdict::fail; }));
}


namespace {

void evaluate_accuracy(const AccuracyConfig& config, const Results& baseline, const Results& current, Report& report) {
  auto gated = [&](const AccuracyCase& c) { return implementation_gated(config, c.implementation) && config.cases.matches(c.repro); };
  for (const auto& [key, c] : current.accuracy) {
    if (!gated(c)) continue;
    Outcome o{Kind::accuracy, accuracy_name(c), Verdict::pass, "", c.repro};
    const auto base = baseline.accuracy.find(key);
    const AccuracyCase* b = base == baseline.accuracy.end() ? nullptr : &base->second;
    if (c.status == "skip") {
      o.verdict = Verdict::skipped;
      o.message = "unsupported: " + c.skip_reason;
    } else if (c.status == "fail") {
      o.verdict = Verdict::fail;
      o.message = fmt::format("verdict fail: {} (max abs {}, {} ulps)", c.reasons.empty() ? "no reason given" : fmt::format("{}", fmt::join(c.reasons, "; ")),
                              format_error(c.max_abs), format_error(c.max_ulps));
    } else {
      o.message = fmt::format("pass, {} ulps", format_error(c.max_ulps));
      if (config.error_growth && b != nullptr && b->status == "pass") {
        const auto& g = *config.error_growth;
        const bool ulps = g.metric == "max_ulps";
        const double now = ulps ? c.max_ulps : c.max_abs, then = ulps ? b->max_ulps : b->max_abs;
        const double limit = g.factor * then + g.slack;
        if (now > limit) {
          o.verdict = Verdict::fail;
          o.message = fmt::format("{} grew: {} vs baseline {} (limit {} x baseline + {} = {})", g.metric, format_error(now), format_error(then), g.factor,
                                  g.slack, format_error(limit));
        } else {
          o.message = fmt::format("pass, {} {} vs baseline {}", g.metric, format_error(now), format_error(then));
        }
      } else if (b == nullptr) {
        o.message += " (no baseline)";
      }
    }
    report.outcomes.push_back(std::move(o));
  }
  for (const auto& [key, b] : baseline.accuracy) {
    if (!gated(b) || b.status != "pass") continue;
    Outcome o{Kind::presence, accuracy_name(b), Verdict::pass, "present", b.repro};
    const auto it = current.accuracy.find(key);
    if (it == current.accuracy.end()) {
      o.verdict = Verdict::fail;
      o.message = "passed in the baseline, missing from the results";
    } else if (it->second.status == "skip") {
      o.verdict = Verdict::fail;
      o.message = "passed in the baseline, now unsupported: " + it->second.skip_reason;
    }
    report.outcomes.push_back(std::move(o));
  }
}

void evaluate_speed(const SpeedConfig& config, const Results& baseline, const Results& current, Report& report) {
  bool fell_back = false;
  std::set<std::string> mismatches;
  auto samples_of = [&](const SpeedCase& c) -> const std::vector<double>& { return config.time == "cpu_time" ? c.cpu_samples_ms : c.samples_ms; };
  for (const auto& [name, c] : current.speed) {
    if (!config.benchmarks.matches(name)) continue;
    Outcome o{Kind::speed, name, Verdict::pass, "", ""};
    const auto base = baseline.speed.find(name);
    if (c.error) {
      o.verdict = Verdict::fail;
      o.message = "benchmark error: " + *c.error;
    } else if (base == baseline.speed.end() || base->second.error || samples_of(base->second).empty()) {
      o.verdict = Verdict::skipped;
      o.message = "no baseline to compare with";
    } else if (samples_of(c).empty()) {
      o.verdict = Verdict::fail;
      o.message = "no timing in the results";
    } else {
      const SpeedCase& b = base->second;
      std::vector<std::string> differ;
      for (const auto& key : config.machine_keys) {
        const auto x = c.machine.find(key), y = b.machine.find(key);
        const std::string now = x == c.machine.end() ? "(absent)" : x->second, then = y == b.machine.end() ? "(absent)" : y->second;
        if (now != then) differ.push_back(fmt::format("{} '{}' vs baseline '{}'", key, now, then));
      }
      const std::vector<double>& now = samples_of(c);
      const std::vector<double>& then = samples_of(b);
      const double m_now = median(now), m_then = median(then), ratio = m_now / m_then;
      const std::string medians = fmt::format("{}median {} vs baseline {} ({})", config.time == "cpu_time" ? "CPU time " : "", format_ms(m_now),
                                              format_ms(m_then), format_change(ratio));
      if (!differ.empty()) mismatches.insert(fmt::format("{}", fmt::join(differ, ", ")));
      if (!differ.empty() && config.on_machine_mismatch == "skip") {
        o.verdict = Verdict::skipped;
        o.message = medians + "; not gated: another machine";
      } else {
        const bool enough = int(now.size()) >= config.min_repetitions && int(then.size()) >= config.min_repetitions;
        if (config.method == "mann_whitney" && enough) {
          const MannWhitney mw = mann_whitney_greater(now, then);
          const bool slower = mw.p_value < config.alpha && ratio - 1 >= config.min_slowdown;
          o.verdict = slower ? Verdict::fail : Verdict::pass;
          o.message = fmt::format("{}, Mann-Whitney p = {} ({} vs {} repetitions; fails when p < {} and the median is >= {:.0f} % slower)", medians,
                                  format_p(mw.p_value), now.size(), then.size(), config.alpha, config.min_slowdown * 100);
        } else {
          if (config.method == "mann_whitney") fell_back = true;
          o.verdict = ratio > config.max_median_ratio ? Verdict::fail : Verdict::pass;
          o.message = fmt::format("{}, median ratio {:.2f} (fails above {:.2f}{})", medians, ratio, config.max_median_ratio,
                                  config.method == "mann_whitney" ? fmt::format("; {} vs {} repetitions, fewer than {} for Mann-Whitney",
                                                                                now.size(), then.size(), config.min_repetitions)
                                                                  : "");
        }
        if (!differ.empty()) o.message += "; measured on another machine";
      }
    }
    report.outcomes.push_back(std::move(o));
  }
  for (const auto& [name, b] : baseline.speed) {
    if (!config.benchmarks.matches(name) || b.error) continue;
    Outcome o{Kind::presence, name, Verdict::pass, "present", ""};
    if (!current.speed.count(name)) {
      o.verdict = Verdict::fail;
      o.message = "ran in the baseline, missing from the results";
    }
    report.outcomes.push_back(std::move(o));
  }
  for (const auto& m : mismatches)
    report.notes.push_back(config.on_machine_mismatch == "skip"
                               ? fmt::format("speed not gated where the machine differs from the baseline's ({}): speed baselines are machine-specific", m)
                               : fmt::format("speed compared although the machine differs from the baseline's ({})", m));
  if (fell_back)
    report.notes.push_back(fmt::format("fewer than {} repetitions on one side: those cases use the median ratio threshold {:.2f} instead of Mann-Whitney",
                                       config.min_repetitions, config.max_median_ratio));
}

}  // namespace

Report evaluate(const Config& config, const Results& baseline, const Results& current) {
  Report report;
  report.notes = current.notes;
  if (config.accuracy.enabled) evaluate_accuracy(config.accuracy, baseline, current, report);
  if (config.speed.enabled) evaluate_speed(config.speed, baseline, current, report);
  std::stable_sort(report.outcomes.begin(), report.outcomes.end(), [](const Outcome& a, const Outcome& b) {
    return std::tie(a.kind, a.name) < std::tie(b.kind, b.name);
  });
  if (report.outcomes.empty()) report.notes.push_back("nothing was gated: no result matches the config's accuracy or speed selection");
  if (config.accuracy.enabled && report.count(Kind::accuracy, Verdict::pass) + report.count(Kind::accuracy, Verdict::fail) == 0)
    report.notes.push_back("no verify result was gated");
  if (config.speed.enabled && report.count(Kind::speed, Verdict::pass) + report.count(Kind::speed, Verdict::fail) == 0)
    report.notes.push_back("no benchmark was compared for speed");
  return report;
}

std::string format_outcome(const Outcome& o) {
  std::string line = fmt::format("{} {} {}: {}", to_string(o.verdict), to_string(o.kind), o.name, o.message);
  if (o.verdict == Verdict::fail && !o.repro.empty()) line += fmt::format(" [repro: {}]", o.repro);
  return line;
}

std::string xml_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const unsigned char ch : text) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      case '\n': out += "&#10;"; break;
      case '\t': out += "&#9;"; break;
      case '\r': out += "&#13;"; break;
      default:
        if (ch < 0x20) out += fmt::format("&#x{:X};", 0xFFFD);  // XML 1.0 forbids other control characters
        else out += char(ch);
    }
  }
  return out;
}

std::string junit_xml(const Report& report) {
  std::string xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  xml += fmt::format("<testsuites name=\"attnbench gate\" tests=\"{}\" failures=\"{}\" errors=\"0\">\n", report.outcomes.size(), report.failures());
  for (const Kind kind : {Kind::accuracy, Kind::presence, Kind::speed}) {
    int tests = 0;
    for (const auto& o : report.outcomes) tests += o.kind == kind;
    xml += fmt::format("  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"{}\">\n", to_string(kind), tests,
                       report.count(kind, Verdict::fail), report.count(kind, Verdict::skipped));
    for (const auto& o : report.outcomes) {
      if (o.kind != kind) continue;
      xml += fmt::format("    <testcase classname=\"attnbench.gate.{}\" name=\"{}\"", to_string(kind), xml_escape(o.name));
      switch (o.verdict) {
        case Verdict::pass:
          xml += fmt::format(">\n      <system-out>{}</system-out>\n    </testcase>\n", xml_escape(format_outcome(o)));
          break;
        case Verdict::fail:
          xml += fmt::format(">\n      <failure message=\"{}\" type=\"{}\">{}</failure>\n    </testcase>\n", xml_escape(o.message), to_string(kind),
                             xml_escape(format_outcome(o)));
          break;
        case Verdict::skipped:
          xml += fmt::format(">\n      <skipped message=\"{}\"/>\n    </testcase>\n", xml_escape(o.message));
          break;
      }
    }
    if (!report.notes.empty()) xml += fmt::format("    <system-out>{}</system-out>\n", xml_escape(fmt::format("{}", fmt::join(report.notes, "\n"))));
    xml += "  </testsuite>\n";
  }
  xml += "</testsuites>\n";
  return xml;
}

}  // namespace attn::gate
