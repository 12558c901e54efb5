#pragma once
// The tensors of one plugin call as they are copied into and out of the shared arena: from the
// harness's dense storage into the strides the plugin is handed (a layout, or stride 0 where a
// mask or bias broadcasts), back out of it for outputs, and the checks made after the call (an
// input modified, an output element left unwritten).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/problem.hpp"
#include "core/tensor.hpp"
#include "impls/implementation.hpp"
#include "impls/plugin/call_description.hpp"

namespace attn::plugin {

// A tensor handed to the plugin: where its elements come from (dense BHSD bytes) and how they lie
// in the arena.
struct Item {
  std::string name;
  const std::byte* source;       // dense row-major storage [s0, s1, s2, s3] (broadcast dims already 1)
  std::byte* destination;        // the output tensor's storage to copy back into (null for inputs)
  Tensor::Shape shape;           // logical shape given to the plugin
  Tensor::Shape storage_shape;   // the source's shape (differs from shape where broadcast)
  Strides strides;
  std::size_t element;
};

// The items of a call's tensors (plan_tensors), their data taken from the run's arguments.
std::vector<Item> call_items(const std::vector<TensorSpec>& specs, const RunArgs& args);

std::size_t item_bytes(const Item& it);
void copy_in(const Item& it, std::byte* arena);
void copy_out(const Item& it, const std::byte* arena);
// "modified input q: 3 elements changed, first at [0,1,2,5]", or "".
std::string compare_input(const Item& it, const std::byte* arena);
// "out not written (still poison): 64 elements in 1 row(s), first at b=0 h=1 i=16 c=0; rows b=0 h=1 i=16", or "".
std::string unwritten_output(const Problem& p, const Tensor& out, const char* name);

}  // namespace attn::plugin
