#pragma once
// `attnbench cases --out DIR [--cases SET | --case REPRO]`: writes each case's inputs as .npy
// files and DIR/manifest.json (core/case_files.hpp), for kernels that cannot be linked: another
// program reads them, writes its outputs, and `attnbench check` verifies those. With --declare
// FILE (impls/capability_declaration.hpp) each case the kernel does not declare is written as its
// projection onto the declaration, as verify projects it, or skipped with the reason
// (--no-projection skips them all). --backward makes every case a backward case (op=backward):
// each also gets its dO file, and the program writes its gradients. Registered by main.cpp.
#include <cstdint>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

namespace attn::cli {

class CasesCommand {
 public:
  explicit CasesCommand(CLI::App& app);
  bool parsed() const { return command_->parsed(); }
  // 0 when every case was written; throws attn::InputError (exit 2) on a bad case set or a
  // directory it will not write into.
  int run() const;

 private:
  CLI::App* command_;
  std::string out_dir_;
  std::string cases_ = "default";
  std::optional<std::string> single_case_;  // given, even empty: exactly that case
  std::optional<std::uint64_t> seed_;
  std::string declaration_;
  bool no_projection_ = false;
  bool backward_ = false;
};

}  // namespace attn::cli
