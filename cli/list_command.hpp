#pragma once
// `attnbench list`: the built-in implementations and what each declares. Registered by main.cpp.
#include <CLI/CLI.hpp>

#include "impls/registry.hpp"

namespace attn::cli {

class ListCommand {
 public:
  explicit ListCommand(CLI::App& app);
  bool parsed() const { return command_->parsed(); }
  int run(const Registry& registry) const;  // 0

 private:
  CLI::App* command_;
};

}  // namespace attn::cli
