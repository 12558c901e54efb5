#pragma once
// NumPy .npy files (format versions 1.0, 2.0 and 3.0), read and written without NumPy, for
// kernels that cannot be linked (the file route: `attnbench cases` and `attnbench check`).
// Little-endian C-order arrays only; Fortran order and big-endian data are refused with a
// message that says so. The reader is written for hostile input: any malformed, truncated or
// inconsistent file throws InputError naming the file and the fault, never reads out of bounds.
//
// NumPy has no bf16: the file route stores bf16 tensors as '<f4' holding exactly the bf16
// values (widening is exact) and requires bf16 outputs to be '<f4' values that bf16 represents;
// f16 is NumPy's own '<f2'. See core/case_files.hpp.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace attn::npy {

enum class ElementType { f16, f32, f64, boolean, u8, u16, i32, i64 };

// '<f4', '|b1', ...: the descr NumPy writes for the type.
std::string_view descr(ElementType type);
int item_bytes(ElementType type);

struct Array {
  ElementType type = ElementType::f32;
  std::vector<std::int64_t> shape;
  std::vector<std::byte> data;  // numel * item_bytes, little-endian, C order

  std::int64_t numel() const;
  bool operator==(const Array&) const = default;
};

// "(1, 2, 17, 64)", "(5,)", "()": shapes as NumPy prints them, for messages.
std::string shape_string(std::span<const std::int64_t> shape);

// Parses a whole .npy file held in memory; `name` (a file name) starts every error message.
Array parse(std::span<const std::byte> bytes, std::string_view name);
// Reads and parses a file; a missing or unreadable file is an InputError naming it.
Array read_file(const std::filesystem::path& path);

// The file's bytes: version 1.0 unless the header needs more (2.0), or as asked (1, 2 or 3).
// The header is padded so the data starts at a multiple of 64 bytes, as NumPy does.
std::vector<std::byte> serialize(const Array& array, int major_version = 0);
// Writes the file (replacing it); throws InputError naming the path when it cannot.
void write_file(const std::filesystem::path& path, const Array& array, int major_version = 0);

}  // namespace attn::npy
