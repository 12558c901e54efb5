#pragma once
// Writing result files (JSON, reports, JUnit, baselines, the cases directory) so that a path the
// user gave can only ever be created or replaced as a regular file: a symlink, a device node, a
// FIFO, a socket or a directory at that path is refused with an InputError naming it, never
// replaced or written through (as root, replacing /dev/full with a file breaks the machine).
#include <filesystem>
#include <string>
#include <string_view>

namespace attn {

// Throws InputError when `path` exists and is not a regular file (lstat: a symlink is refused
// even when it points at a regular file). `what` names the option in the message ("--json").
void check_result_path(const std::filesystem::path& path, std::string_view what = "");

// check_result_path, then creates the parent folders and a file beside `path` (removed at once):
// a result path that cannot be written is bad input before a run measures anything.
void prepare_result_path(const std::filesystem::path& path, std::string_view what = "");

// Creates the folder `dir` (and its parents) for result files; throws InputError naming it when
// it exists and is not a directory (a symlink to one is fine) or cannot be created.
void prepare_result_dir(const std::filesystem::path& dir, std::string_view what = "");

// Writes `content` to a new file beside `path` and renames it over `path`, so a reader never sees
// half a file; refuses as check_result_path does, both before writing and just before renaming.
void write_result_file(const std::filesystem::path& path, std::string_view content, std::string_view what = "");

// Where results go when their path cannot take them (it became a link or a device during the
// run): a new file PATH.rescued-PID.json beside the path, else in the temporary folder. Returns
// its path, or "" when neither could be written.
std::string write_rescue_file(const std::filesystem::path& path, std::string_view content);

}  // namespace attn
