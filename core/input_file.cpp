#include "core/input_file.hpp"

#include <fstream>
#include <sstream>

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
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: not valid JSON: {}", path.string(), e.what()));
  }
}

}  // namespace attn
