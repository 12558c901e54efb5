#pragma once
// The tensors of one plugin call as they are copied into and out of the shared arena: from the
// harness's dense storage into the strides the plugin is handed (a layout, or stride 0 where a
// mask or bias broadcasts), back out of it for outputs, and the checks made after the call (an
// input modified, an output element left unwritten).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/mask.hpp"
#include "core/problem.hpp"
#include "core/tensor.hpp"
#include "impls/implementation.hpp"
#include "impls/plugin/call_description.hpp"

namespace attn::plugin {

// A tensor handed to the plugin: where its elements come from (dense BHSD bytes) and how they lie
// in the arena.
struct Item {
  std::string name;
  Role role;
  const std::byte* source;       // dense row-major storage [s0, s1, s2, s3] (broadcast dims already 1)
  std::byte* destination;        // the output tensor's storage to copy back into (null for inputs)
  Tensor::Shape shape;           // logical shape given to the plugin
  Tensor::Shape storage_shape;   // the source's shape (differs from shape where broadcast)
  Strides strides;
  std::size_t element;
  // Dropout's keep mask: bytes in the arena (1 kept, 0 dropped), filled with keep_poison before
  // the call (no source), and copied back into the harness's f32 tensor as each byte's value, so
  // that a byte neither 0 nor 1 stays visible to the judge.
  bool bytes_to_f32 = false;
};

// What an unwritten byte of the keep mask holds.
inline constexpr std::uint8_t keep_poison = 0xFF;

// The items of a call's tensors (plan_tensors), their data taken from the run's arguments: each
// input from the run's input of its role, each output copied back into the run's output of its
// role (std::logic_error when the run's tensors do not hold a role as the plan does).
std::vector<Item> call_items(const std::vector<TensorSpec>& specs, const RunArgs& args);

std::size_t item_bytes(const Item& it);
void copy_in(const Item& it, std::byte* arena);
void copy_out(const Item& it, const std::byte* arena);
// "modified input q: 3 elements changed, first at [0,1,2,5]", or "".
std::string compare_input(const Item& it, const std::byte* arena);
// "out not written (still poison): 64 elements in 1 row(s), first at b=0 h=1 i=16 c=0; rows b=0 h=1 i=16", or "".
// Rows are the tensor's own: a query's (i) for o, lse and dq, a key's (j, its kv head h) for dk and dv.
std::string unwritten_output(const Tensor& out, Role role, const std::string& name);
// The keep mask's visible pairs still holding keep_poison (a masked pair's entry does not matter):
// "keep not written (still poison 0xFF): 12 visible pair(s), first at b=0 h=1 i=3 j=5", or "".
std::string unwritten_keep(const Problem& p, const Mask& mask, const Tensor& keep);

}  // namespace attn::plugin
