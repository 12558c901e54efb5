#include "impls/plugin/arena_tensors.hpp"

#include <cstring>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "impls/plugin/plugin_abi.hpp"

namespace attn::plugin {
namespace {

// Visits each stored element once: its dense index in the source and its offset in the view.
template <class F>
void for_each_element(const Item& it, F&& f) {
  const auto& s = it.storage_shape;
  std::int64_t dense = 0;
  for (std::int64_t a = 0; a < s[0]; ++a)
    for (std::int64_t b = 0; b < s[1]; ++b)
      for (std::int64_t c = 0; c < s[2]; ++c)
        for (std::int64_t d = 0; d < s[3]; ++d, ++dense) f(dense, a * it.strides[0] + b * it.strides[1] + c * it.strides[2] + d * it.strides[3]);
}

bool dense_copy(const Item& it) {
  std::int64_t expect = 1;
  for (int i = 3; i >= 0; --i) {
    const auto u = std::size_t(i);
    if (it.storage_shape[u] > 1 && it.strides[u] != expect) return false;
    expect *= it.storage_shape[u];
  }
  return true;
}

}  // namespace

std::vector<Item> call_items(const std::vector<TensorSpec>& specs, const RunArgs& a) {
  const Problem& p = a.problem;
  auto bytes_of = [](const Tensor& t) { return reinterpret_cast<const std::byte*>(t.data()); };
  auto stored = [&](Broadcast b) {
    return Tensor::Shape{varies_over_batch(b) ? p.batch : 1, varies_over_head(b) ? p.h_q : 1, p.n_q, p.n_k};
  };
  std::vector<Item> items;
  for (const TensorSpec& s : specs) {
    const std::optional<Role> role = to_role(s.role);
    if (!role) throw std::logic_error(fmt::format("no tensor for the role {}", role_name(s.role)));
    // The boolean mask's flags are bytes the Mask keeps (core/mask.hpp), not one of the set's
    // tensors; the bias is one, stored broadcast: its stored shape is not the logical one.
    if (*role == Role::mask) {
      items.push_back(Item{s.name, *role, reinterpret_cast<const std::byte*>(a.inputs.mask.bool_flags().data()), nullptr, s.shape,
                           stored(p.bool_mask.broadcast), s.strides, 1, false});
      continue;
    }
    if (s.output) {
      Tensor* out = a.tensors.output(*role);
      if (out == nullptr) throw std::logic_error(fmt::format("an output {} planned without a tensor of the run's to write it into", s.name));
      // Dropout's keep mask: the harness holds it in f32, the plugin writes bytes.
      if (*role == Role::keep) {
        if (out->dtype() != DType::f32) throw std::logic_error("the keep mask is not make_keep's f32 tensor");
        items.push_back(Item{s.name, *role, nullptr, static_cast<std::byte*>(out->data()), s.shape, out->shape(), s.strides, 1, true});
        continue;
      }
      items.push_back(Item{s.name, *role, bytes_of(*out), static_cast<std::byte*>(out->data()), s.shape, out->shape(), s.strides,
                           std::size_t(bytes_per_element(out->dtype())), false});
      continue;
    }
    const Tensor* in = a.tensors.input(*role);
    if (in == nullptr) throw std::logic_error(fmt::format("an input {} planned without a tensor of the run's for it", s.name));
    items.push_back(Item{s.name, *role, bytes_of(*in), nullptr, s.shape, in->shape(), s.strides, std::size_t(bytes_per_element(in->dtype())), false});
  }
  return items;
}

std::size_t item_bytes(const Item& it) { return std::size_t(storage_elements(it.shape, it.strides)) * it.element; }

void copy_in(const Item& it, std::byte* arena) {
  if (it.bytes_to_f32) {
    std::memset(arena, keep_poison, item_bytes(it));
    return;
  }
  if (dense_copy(it)) {
    std::memcpy(arena, it.source, std::size_t(it.storage_shape[0] * it.storage_shape[1] * it.storage_shape[2] * it.storage_shape[3]) * it.element);
    return;
  }
  for_each_element(it, [&](std::int64_t dense, std::int64_t at) {
    std::memcpy(arena + std::size_t(at) * it.element, it.source + std::size_t(dense) * it.element, it.element);
  });
}

void copy_out(const Item& it, const std::byte* arena) {
  if (it.bytes_to_f32) {
    for_each_element(it, [&](std::int64_t dense, std::int64_t at) {
      const float value = float(std::to_integer<std::uint8_t>(arena[std::size_t(at)]));
      std::memcpy(it.destination + std::size_t(dense) * sizeof(float), &value, sizeof value);
    });
    return;
  }
  for_each_element(it, [&](std::int64_t dense, std::int64_t at) {
    std::memcpy(it.destination + std::size_t(dense) * it.element, arena + std::size_t(at) * it.element, it.element);
  });
}

std::string compare_input(const Item& it, const std::byte* arena) {
  std::int64_t changed = 0, first = -1;
  for_each_element(it, [&](std::int64_t dense, std::int64_t at) {
    if (std::memcmp(arena + std::size_t(at) * it.element, it.source + std::size_t(dense) * it.element, it.element) != 0) {
      if (changed++ == 0) first = dense;
    }
  });
  if (changed == 0) return "";
  const auto& s = it.storage_shape;
  const std::int64_t d = first % s[3], c = first / s[3] % s[2], b = first / s[3] / s[2] % s[1], a = first / s[3] / s[2] / s[1];
  return fmt::format("modified input {}: {} element(s) changed, first at [{},{},{},{}] of its [{},{},{},{}]", it.name, changed, a, b, c, d,
                     s[0], s[1], s[2], s[3]);
}

std::string unwritten_output(const Tensor& out, Role role, const std::string& name) {
  std::int64_t count = 0, first = -1;
  std::vector<std::int64_t> rows;
  const Tensor::Shape& s = out.shape();
  const std::int64_t width = s[3];
  for (std::int64_t e = 0; e < out.numel(); ++e) {
    if (!out.is_poisoned(e)) continue;
    if (count++ == 0) first = e;
    if (rows.empty() || rows.back() != e / width) rows.push_back(e / width);
  }
  if (count == 0) return "";
  // dK and dV have a row per key of a kv head: j, not a query's i.
  const char sequence = role == Role::k || role == Role::v || role == Role::dk || role == Role::dv ? 'j' : 'i';
  auto row_text = [&](std::int64_t r) { return fmt::format("b={} h={} {}={}", r / s[2] / s[1], r / s[2] % s[1], sequence, r % s[2]); };
  std::vector<std::string> shown;
  for (std::size_t i = 0; i < rows.size() && i < 4; ++i) shown.push_back(row_text(rows[i]));
  const std::string where = role == Role::lse ? row_text(first) : fmt::format("{} c={}", row_text(first / width), first % width);
  return fmt::format("{} not written (still poison): {} element(s) in {} row(s), first at {}; rows {}{}", name, count, rows.size(), where,
                     fmt::join(shown, ", "), rows.size() > shown.size() ? fmt::format(" and {} more", rows.size() - shown.size()) : "");
}

std::string unwritten_keep(const Problem& p, const Mask& mask, const Tensor& keep) {
  std::int64_t count = 0;
  std::string first;
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.h_q; ++h)
      for (std::int64_t i = 0; i < p.n_q; ++i) {
        const auto [lo, hi] = mask.key_range(b, i);
        for (std::int64_t j = lo; j < hi; ++j)
          if (mask.visible(b, h, i, j) && keep.get(keep.offset(b, h, i, j)) == double(keep_poison))
            if (count++ == 0) first = fmt::format("b={} h={} i={} j={}", b, h, i, j);
      }
  if (count == 0) return "";
  return fmt::format("keep not written (still poison 0x{:02X}): {} visible pair(s), first at {}", keep_poison, count, first);
}
}  // namespace attn::plugin
