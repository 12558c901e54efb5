#pragma once
// Reading a file a user named (a settings file, a declaration, a manifest, a result file, a case
// list): only a regular file is read, a link to one included, so /dev/zero or a FIFO given by
// mistake is refused instead of read without end. Every fault is an InputError naming the path.
#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace attn {

// The whole file. `if_missing` is what the message says after "PATH: " when nothing is there,
// e.g. "no such file (the capabilities declaration)".
std::string read_input_file(const std::filesystem::path& path, std::string_view if_missing = "no such file");

// The file parsed as JSON ("PATH: not valid JSON: ..." when it is not).
nlohmann::json read_json_file(const std::filesystem::path& path, std::string_view if_missing = "no such file");

}  // namespace attn
