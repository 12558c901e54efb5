// The JSON capabilities declaration (impls/capability_declaration.hpp): it reads into what a
// plugin's C description reads into (one vocabulary), writes back unchanged, defaults to what the
// built-ins declare, and names the key of every malformed part.
#include <cmath>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "impls/capability_declaration.hpp"
#include "impls/capability_space.hpp"
#include "impls/plugin/plugin_abi.hpp"

namespace attn {
namespace {

void expect_same(const Capabilities& a, const Capabilities& b) {
  EXPECT_EQ(a.dtypes, b.dtypes);
  EXPECT_EQ(a.layouts, b.layouts);
  EXPECT_EQ(a.masks.causal_top_left, b.masks.causal_top_left);
  EXPECT_EQ(a.masks.causal_bottom_right, b.masks.causal_bottom_right);
  EXPECT_EQ(a.masks.padding_per_batch, b.masks.padding_per_batch);
  EXPECT_EQ(a.masks.padding_per_query, b.masks.padding_per_query);
  EXPECT_EQ(a.masks.bool_mask, b.masks.bool_mask);
  EXPECT_EQ(a.masks.bias, b.masks.bias);
  EXPECT_EQ(a.masks.windows, b.masks.windows);
  EXPECT_EQ(a.masks.non_causal, b.masks.non_causal);
  EXPECT_EQ(a.custom_scale, b.custom_scale);
  EXPECT_EQ(a.gqa, b.gqa);
  EXPECT_EQ(a.different_dk_dv, b.different_dk_dv);
  EXPECT_EQ(a.head_dims, b.head_dims);
  if (a.head_dims.empty()) {
    EXPECT_EQ(a.min_head_dim, b.min_head_dim);
    EXPECT_EQ(a.max_head_dim, b.max_head_dim);
  }
  EXPECT_EQ(a.fully_masked, b.fully_masked);
  EXPECT_EQ(a.returns_lse, b.returns_lse);
  EXPECT_EQ(a.deterministic, b.deterministic);
}

TEST(CapabilityDeclaration, MeansWhatAPluginsDescriptionMeans) {
  plugin::PluginInfo info;
  info.operations = ATTNBENCH_OP_BIT(ATTNBENCH_OP_FORWARD);  // what loading requires of every plugin
  info.dtypes = {{ATTNBENCH_ROLE_DATA, plugin::to_dl(DType::f32)}, {ATTNBENCH_ROLE_DATA, plugin::to_dl(DType::f16)}};
  info.layouts = ATTNBENCH_ACCEPTS_BHSD;
  info.features = ATTNBENCH_FEATURE_CAUSAL_TOP_LEFT | ATTNBENCH_FEATURE_PADDING_PER_QUERY | ATTNBENCH_FEATURE_BIAS | ATTNBENCH_FEATURE_LSE;
  info.head_dims = {64, 128};
  info.fully_masked = FullyMaskedPolicy::nan;
  const Capabilities from_plugin = plugin::to_capabilities(info);
  const Capabilities from_json = capabilities_from_json(nlohmann::json::parse(R"({
      "dtypes": ["f32", "f16"], "layouts": ["bhsd"], "masks": ["causal_top_left", "padding_per_query", "bias"],
      "gqa": false, "different_dk_dv": false, "head_dims": [64, 128], "fully_masked": "nan",
      "returns_lse": true, "deterministic": false})"),
                                                        "test");
  expect_same(from_json, from_plugin);
  // So a case is covered, or refused with the same reason, whichever way it was declared.
  for (const char* repro : {"b=1 hq=2 hkv=1 nq=4 nk=4 dk=64 dv=64 dtype=f32 causal=none regime=diffuse seed=1",
                            "b=1 hq=2 hkv=2 nq=4 nk=4 dk=64 dv=64 dtype=f64 causal=none regime=diffuse seed=1",
                            "b=1 hq=2 hkv=2 nq=4 nk=4 dk=32 dv=32 dtype=f16 causal=bottom_right regime=diffuse seed=1",
                            "b=1 hq=2 hkv=2 nq=4 nk=4 dk=64 dv=64 dtype=f16 causal=top_left regime=diffuse seed=1"}) {
    const Problem p = parse_problem(repro);
    EXPECT_EQ(covers(from_json, p).ok, covers(from_plugin, p).ok) << repro;
    EXPECT_EQ(covers(from_json, p).reason, covers(from_plugin, p).reason) << repro;
  }
}

// A kernel with its scale and its causal mask built in: the plugin's DEFAULT_SCALE_ONLY and
// CAUSAL_ONLY and the file's "default_scale_only" and "causal_only" mean the same; covers()
// refuses another scale and a problem without a causal mask, naming them; the projection runs
// the case at the default scale under the declared causal mask (bottom-right where declared).
TEST(CapabilityDeclaration, AFixedScaleAndCausalOnlyAreDeclaredAndProjectedOnto) {
  plugin::PluginInfo info;
  info.operations = ATTNBENCH_OP_BIT(ATTNBENCH_OP_FORWARD);
  info.dtypes = {{ATTNBENCH_ROLE_DATA, plugin::to_dl(DType::f32)}};
  info.layouts = ATTNBENCH_ACCEPTS_BHSD;
  info.features = ATTNBENCH_FEATURE_CAUSAL_TOP_LEFT | ATTNBENCH_FEATURE_CAUSAL_BOTTOM_RIGHT | ATTNBENCH_FEATURE_CAUSAL_ONLY |
                  ATTNBENCH_FEATURE_DEFAULT_SCALE_ONLY;
  const Capabilities from_plugin = plugin::to_capabilities(info);
  const Capabilities caps = capabilities_from_json(nlohmann::json::parse(R"({
      "dtypes": ["f32"], "masks": ["causal_top_left", "causal_bottom_right"], "causal_only": true, "default_scale_only": true})"),
                                                   "test");
  EXPECT_EQ(caps.custom_scale, from_plugin.custom_scale);
  EXPECT_EQ(caps.masks.non_causal, from_plugin.masks.non_causal);
  EXPECT_FALSE(caps.custom_scale);
  EXPECT_FALSE(caps.masks.non_causal);
  const nlohmann::json back = capabilities_to_json(caps);
  EXPECT_EQ(back.at("causal_only"), true);
  EXPECT_EQ(back.at("default_scale_only"), true);
  expect_same(capabilities_from_json(back, "written back"), caps);

  const Problem scaled = parse_problem("b=1 hq=2 hkv=2 nq=5 nk=9 dk=16 dv=16 dtype=f32 causal=top_left scale=0.3 regime=diffuse seed=1");
  EXPECT_EQ(covers(caps, scaled).reason, "scale 0.3 not declared (the default 1/sqrt(d_k) only)");
  const Problem unmasked = parse_problem("b=1 hq=2 hkv=2 nq=5 nk=9 dk=16 dv=16 dtype=f32 causal=none regime=diffuse seed=1");
  EXPECT_EQ(covers(caps, unmasked).reason, "no causal mask: causal masks only declared");
  // An explicit scale equal to the default is the default.
  EXPECT_TRUE(covers(caps, parse_problem("b=1 hq=2 hkv=2 nq=5 nk=9 dk=16 dv=16 dtype=f32 causal=top_left scale=0.25 regime=diffuse seed=1")).ok);

  const std::optional<Problem> at_default = project_onto(caps, scaled);
  ASSERT_TRUE(at_default.has_value());
  EXPECT_FALSE(at_default->scale.has_value());
  EXPECT_EQ(at_default->window, Window::of(Causal::top_left));
  EXPECT_TRUE(covers(caps, *at_default).ok);
  const std::optional<Problem> causal = project_onto(caps, unmasked);
  ASSERT_TRUE(causal.has_value());
  EXPECT_EQ(causal->window, Window::of(Causal::bottom_right));
  EXPECT_TRUE(covers(caps, *causal).ok);

  EXPECT_THROW(capabilities_from_json(nlohmann::json::parse(R"({"dtypes": ["f32"], "masks": ["bias"], "causal_only": true})"), "test"),
               InputError);
  // A plugin declaring causal only and no causal mask is refused when it loads.
  static const attnbench_role_dtype f32[] = {{ATTNBENCH_ROLE_DATA, {ATTNBENCH_DL_FLOAT, 32, 1}}};
  attnbench_plugin_v2 description{};
  description.abi_version = ATTNBENCH_ABI_VERSION;
  description.struct_size = sizeof description;
  description.name = "causal_only_without_causal";
  description.capabilities.operations = ATTNBENCH_OP_BIT(ATTNBENCH_OP_FORWARD);
  description.capabilities.features = ATTNBENCH_FEATURE_CAUSAL_ONLY;
  description.capabilities.layouts = ATTNBENCH_ACCEPTS_BHSD;
  description.capabilities.dtypes = f32;
  description.capabilities.dtype_count = 1;
  try {
    plugin::read_plugin_info(description, "test");
    ADD_FAILURE() << "a plugin declaring CAUSAL_ONLY without a causal mask loaded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("CAUSAL_ONLY but neither CAUSAL_TOP_LEFT nor CAUSAL_BOTTOM_RIGHT"), std::string::npos) << e.what();
  }
}

// A projection in several steps says each, in order: a top-left case at n_q != n_k, onto a kernel
// declaring bottom-right only whose supports() wants n_q = n_k, moves its diagonal onto the
// declared space and then runs at equal lengths (where top-left and bottom-right agree) - not "a
// top-left case run bottom-right".
TEST(CapabilityDeclaration, AProjectionRecordsEveryStepInOrder) {
  struct SquareBottomRight final : Implementation {
    std::string name() const override { return "square_bottom_right"; }
    Capabilities describe() const override {
      Capabilities c;
      c.dtypes = {DType::f32};
      c.masks = {false, true, false, false, false, false, false};
      return c;
    }
    Support supports(const Problem& p) const override { return p.n_q == p.n_k ? Support::yes() : Support::no("n_q != n_k"); }
    std::size_t workspace_bytes(const Problem&) const override { return 0; }
    void run(const RunArgs&) const override {}
  } kernel;
  const Resolution r = resolve(kernel, parse_problem("b=1 hq=2 hkv=2 nq=5 nk=9 dk=8 dv=8 dtype=f32 causal=top_left regime=diffuse seed=1"));
  ASSERT_TRUE(r.problem.has_value()) << r.skip_reason;
  EXPECT_EQ(r.problem->window, Window::of(Causal::bottom_right));
  EXPECT_EQ(r.problem->n_q, 9);
  EXPECT_EQ(r.changes.rfind("causal ", 0), 0u) << r.changes;
  EXPECT_NE(r.changes.find("; then equal sequence lengths: n 5x9 -> 9x9"), std::string::npos) << r.changes;
}

// A window other than causal is a declared feature like any mask: a plugin's
// ATTNBENCH_FEATURE_SLIDING_WINDOW and the file's "window" mean the same, covers() refuses it
// undeclared naming it, and the projection keeps as much of it as the declaration can express.
TEST(CapabilityDeclaration, AWindowIsDeclaredLikeAMask) {
  plugin::PluginInfo info;
  info.dtypes = {{ATTNBENCH_ROLE_DATA, plugin::to_dl(DType::f32)}};
  info.layouts = ATTNBENCH_ACCEPTS_BHSD;
  info.features = ATTNBENCH_FEATURE_CAUSAL_BOTTOM_RIGHT | ATTNBENCH_FEATURE_SLIDING_WINDOW | ATTNBENCH_FEATURE_GQA | ATTNBENCH_FEATURE_DIFFERENT_DK_DV |
                  ATTNBENCH_FEATURE_DETERMINISTIC;
  info.head_dims = {8};
  const Capabilities with_window = capabilities_from_json(nlohmann::json::parse(R"({"dtypes": ["f32"], "masks": ["causal_bottom_right", "window"], "head_dims": [8]})"), "test");
  expect_same(with_window, plugin::to_capabilities(info));
  const Problem sliding = parse_problem("b=1 hq=2 hkv=1 nq=6 nk=9 dk=8 dv=8 dtype=f32 window=2,0@bottom_right regime=diffuse seed=3");
  EXPECT_TRUE(covers(with_window, sliding).ok) << covers(with_window, sliding).reason;

  Capabilities causal_only = with_window;
  causal_only.masks.windows = false;
  EXPECT_EQ(covers(causal_only, sliding).reason, "window 2,0@bottom_right not declared");
  EXPECT_TRUE(covers(causal_only, parse_problem("b=1 hq=2 hkv=1 nq=6 nk=9 dk=8 dv=8 dtype=f32 causal=bottom_right regime=diffuse seed=3")).ok);
  // A sliding window becomes the causal window it narrows.
  const std::optional<Problem> narrowed = project_onto(causal_only, sliding);
  ASSERT_TRUE(narrowed);
  EXPECT_EQ(narrowed->window, Window::of(Causal::bottom_right));
  EXPECT_TRUE(covers(causal_only, *narrowed).ok);
  // A window with no lower bound becomes per-query padding with the same visible keys, where
  // that is declared; with neither, the window is dropped.
  const Problem right_bounded = parse_problem("b=1 hq=2 hkv=1 nq=6 nk=9 dk=8 dv=8 dtype=f32 window=inf,2@top_left regime=diffuse seed=3");
  causal_only.masks.padding_per_query = true;
  const std::optional<Problem> padded = project_onto(causal_only, right_bounded);
  ASSERT_TRUE(padded);
  EXPECT_TRUE(padded->window.is_none());
  ASSERT_EQ(padded->padding.kind, KeyPadding::Kind::per_query);
  for (std::int64_t i = 0; i < right_bounded.n_q; ++i)
    EXPECT_EQ(padded->padding.valid_len[std::size_t(i)], right_bounded.window.key_range(i, right_bounded.n_q, right_bounded.n_k).second);
  causal_only.masks.padding_per_query = false;
  EXPECT_TRUE(project_onto(causal_only, right_bounded)->window.is_none());
}

TEST(CapabilityDeclaration, WritesBackUnchanged) {
  Capabilities caps;
  caps.summary = "narrow";
  caps.dtypes = {DType::bf16, DType::f64};
  caps.masks = {false, true, true, false, false, true};
  caps.gqa = false;
  caps.min_head_dim = 8;
  caps.max_head_dim = 96;
  caps.fully_masked = FullyMaskedPolicy::nan;
  caps.returns_lse = true;
  caps.masked_nonfinite_safe = true;
  caps.matmul_precision = MatmulPrecision::tf32;
  caps.operations = {Operation::forward, Operation::backward};
  caps.parameter_gradients = true;
  const nlohmann::json j = capabilities_to_json(caps);
  const Capabilities back = capabilities_from_json(j, "test");
  expect_same(back, caps);
  EXPECT_EQ(back.operations, caps.operations);
  EXPECT_TRUE(back.parameter_gradients);
  EXPECT_FALSE(capabilities_from_json(nlohmann::json{{"dtypes", {"f32"}}}, "test").parameter_gradients);
  EXPECT_THROW(capabilities_from_json(nlohmann::json{{"dtypes", {"f32"}}, {"parameter_gradients", "yes"}}, "test"), InputError);
  EXPECT_EQ(back.summary, "narrow");
  EXPECT_EQ(back.masked_nonfinite_safe, true);
  EXPECT_EQ(back.matmul_precision, MatmulPrecision::tf32);
  EXPECT_EQ(j.at("matmul_unit_roundoff").get<double>(), 0x1p-11);
  EXPECT_EQ(capabilities_to_json(back), j);
}

TEST(CapabilityDeclaration, AKeyLeftOutDeclaresWhatTheBuiltInsDo) {
  const Capabilities caps = capabilities_from_json(nlohmann::json::parse(R"({"dtypes": ["f32"]})"), "test");
  Capabilities builtin;  // the format's defaults: every mask and shape
  builtin.dtypes = {DType::f32};
  declare_every_mask_and_shape(builtin);
  expect_same(caps, builtin);
  EXPECT_TRUE(caps.masks.bias && caps.masks.causal_bottom_right && caps.gqa && caps.different_dk_dv);
  EXPECT_EQ(caps.fully_masked, FullyMaskedPolicy::zeros);
  EXPECT_FALSE(caps.returns_lse);
  EXPECT_EQ(caps.operations, std::vector<Operation>{Operation::forward});
  // An empty mask list declares none.
  EXPECT_FALSE(capabilities_from_json(nlohmann::json::parse(R"({"dtypes": ["f32"], "masks": []})"), "test").masks.any());
}

TEST(CapabilityDeclaration, MalformedPartsAreNamed) {
  const std::pair<const char*, const char*> table[] = {
      {R"([1, 2])", "f.json: a capabilities declaration is a JSON object"},
      {R"({})", "f.json: 'dtypes' is missing"},
      {R"({"dtypes": []})", "f.json: 'dtypes' is empty"},
      {R"({"dtypes": "f32"})", "f.json: 'dtypes' must be a list of dtype names, not \"f32\""},
      {R"({"dtypes": ["f32", "tf32"]})", "f.json: 'dtypes': unknown dtype 'tf32'"},
      {R"({"dtypes": ["f32"], "layouts": ["bhsd", "nhwc"]})", "'layouts': "},
      {R"({"dtypes": ["f32"], "layouts": []})", "f.json: 'layouts' is empty"},
      {R"({"dtypes": ["f32"], "masks": ["causal", "bias"]})", "f.json: 'masks': unknown mask 'causal' (expected some of causal_top_left"},
      {R"({"dtypes": ["f32"], "gqa": 1})", "f.json: 'gqa' must be true or false, not 1"},
      {R"({"dtypes": ["f32"], "head_dims": []})", "f.json: 'head_dims' is empty"},
      {R"({"dtypes": ["f32"], "head_dims": [64, 0]})", "f.json: 'head_dims': 0 is not a head dim"},
      {R"({"dtypes": ["f32"], "head_dims": [64], "max_head_dim": 64})", "both given"},
      {R"({"dtypes": ["f32"], "min_head_dim": 0})", "f.json: head dims [0, 2147483648] is empty"},
      {R"({"dtypes": ["f32"], "fully_masked": "garbage"})", "f.json: 'fully_masked': unknown policy 'garbage'"},
      {R"({"dtypes": ["f32"], "matmul_unit_roundoff": 2})", "f.json: 'matmul_unit_roundoff': matmul unit roundoff 2: expected 0"},
      {R"({"dtypes": ["f32"], "matmul_unit_roundoff": 0.001})", "f.json: 'matmul_unit_roundoff': matmul unit roundoff 0.001: expected 0"},
      {R"({"dtypes": ["f32"], "schema": "attnbench.cases"})", "f.json: schema 'attnbench.cases' is not 'attnbench.capabilities'"},
      {R"({"dtypes": ["f32"], "version": 2})", "f.json: version 2 is not 1"},
      {R"({"dtypes": ["f32"], "returns_lse ": true})", "f.json: unknown key 'returns_lse '"},
      {R"({"dtypes": ["f32"], "operations": []})", "f.json: 'operations' is empty: declare at least forward"},
      {R"({"dtypes": ["f32"], "operations": ["forwards"]})", "f.json: 'operations': op: unknown operation 'forwards'"},
  };
  for (const auto& [text, message] : table) {
    try {
      capabilities_from_json(nlohmann::json::parse(text), "f.json");
      ADD_FAILURE() << text << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << text << ": " << e.what();
    }
  }
}

}  // namespace
}  // namespace attn
