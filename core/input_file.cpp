#include "core/input_file.hpp"

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace attn {

std::string read_input_file(const std::filesystem::path& path, std::string_view if_missing) {
  const std::string name = path.string();
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);  // follows links: a link to a regular file is read
  if (status.type() == std::filesystem::file_type::not_found) throw InputError(fmt::format("{}: {}", name, if_missing));
  if (!ec && status.type() != std::filesystem::file_type::regular) throw InputError(fmt::format("{}: not a regular file", name));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot be read", name));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw InputError(fmt::format("{}: cannot be read", name));
  return text.str();
}

nlohmann::json read_json_file(const std::filesystem::path& path, std::string_view if_missing) {
  const std::string text = read_input_file(path, if_missing);
  // JSON lets an object repeat a key and the parser keeps the last: a setting written twice would
  // be half ignored without a word, so a repeated key is refused, naming it.
  std::vector<std::set<std::string>> keys;  // of each object being read
  const nlohmann::json::parser_callback_t no_repeats = [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (event == nlohmann::json::parse_event_t::object_start) keys.emplace_back();
    if (event == nlohmann::json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    if (event == nlohmann::json::parse_event_t::key && !keys.empty() && !keys.back().insert(parsed.get<std::string>()).second)
      throw InputError(fmt::format("{}: the key '{}' is given twice in one object (JSON would keep the last one silently)", path.string(),
                                   parsed.get<std::string>()));
    return true;
  };
  try {
    return nlohmann::json::parse(text, no_repeats);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: not valid JSON: {}", path.string(), e.what()));
  }
}

}  // namespace attn
