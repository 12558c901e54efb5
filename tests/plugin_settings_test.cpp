// Score modifications by name through the plugin ABI (attnbench_plugin.h): a plugin's
// exported attnbench_score_modifications list read into its capabilities (with the feature bits,
// each once; an unknown name refused naming it), and a
// call's settings (score_settings_of) carried generically: through the call description's JSON to
// the worker and into attnbench_call.settings, where attnbench_call_setting finds them by name.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/score_pipeline.hpp"
#include "impls/plugin/abi_v1_shim.hpp"
#include "impls/plugin/call_description.hpp"
#include "impls/plugin/plugin_abi.hpp"

namespace attn::plugin {
namespace {

int dummy_run(const attnbench_call*, char*, size_t) { return 0; }

const attnbench_role_dtype f32_only[] = {{ATTNBENCH_ROLE_DATA, {ATTNBENCH_DL_FLOAT, 32, 1}}};

attnbench_plugin_v2 description(std::uint32_t features = 0) {
  attnbench_plugin_v2 d{};
  d.abi_version = ATTNBENCH_ABI_VERSION;
  d.struct_size = sizeof(attnbench_plugin_v2);
  d.name = "test";
  d.version = "0.1";
  d.description = "a description";
  attnbench_plugin_caps& c = d.capabilities;
  c.operations = ATTNBENCH_OP_BIT(ATTNBENCH_OP_FORWARD);
  c.dtypes = f32_only;
  c.dtype_count = 1;
  c.layouts = ATTNBENCH_ACCEPTS_BHSD;
  c.features = features;
  c.min_head_dim = 1;
  c.max_head_dim = 128;
  c.device_type = ATTNBENCH_DL_CPU;
  d.run = dummy_run;
  return d;
}

// What a plugin exporting attnbench_score_modifications = `names` (null: none) declares.
PluginInfo info_of(const char* names, std::uint32_t features = 0) { return read_plugin_info(description(features), "/x.so", names); }

std::string refused(const char* names) {
  try {
    info_of(names);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(accepted)";
}

using Mods = std::vector<ScoreModification>;

TEST(PluginScoreModifications, DeclaredByNameAsByBit) {
  EXPECT_EQ(to_capabilities(info_of("softcap")).score_modifications, Mods{ScoreModification::softcap});
  EXPECT_EQ(to_capabilities(info_of(nullptr, ATTNBENCH_FEATURE_SOFTCAP)).score_modifications,
            Mods{ScoreModification::softcap});
  // Names and bits together, repeated, in any order and spacing: each once, in the rows' order.
  const PluginInfo both = info_of("  dropout softcap  dropout ", ATTNBENCH_FEATURE_SOFTCAP | ATTNBENCH_FEATURE_SINK);
  EXPECT_EQ(both.score_modifications, (Mods{ScoreModification::softcap, ScoreModification::dropout}));
  EXPECT_EQ(to_capabilities(both).score_modifications, (Mods{ScoreModification::softcap, ScoreModification::sink, ScoreModification::dropout}));
  for (const char* none : {static_cast<const char*>(nullptr), "", "   "})
    EXPECT_TRUE(to_capabilities(info_of(none)).score_modifications.empty());
  // Every row's name declares it: a modification added to core/score_pipeline.hpp is declarable as is.
  for (const ScoreModificationRow& row : score_modification_rows) {
    const std::string name(row.name);
    EXPECT_EQ(to_capabilities(info_of(name.c_str())).score_modifications, Mods{row.id}) << name;
  }
  // What a case using it needs: a problem with a soft-cap is covered only once it is declared.
  const Problem capped = parse_problem("b=1 hq=2 hkv=2 nq=3 nk=5 dk=4 dv=4 dtype=f32 causal=none softcap=2.5 regime=diffuse seed=3");
  EXPECT_TRUE(check_capabilities(info_of("softcap"), capped).ok);
  EXPECT_FALSE(check_capabilities(info_of("dropout"), capped).ok);
}

TEST(PluginScoreModifications, UnknownNameRefusedNamingIt) {
  EXPECT_EQ(refused("softcapp"), "attnbench_score_modifications: unknown 'softcapp' (known: softcap, sink, dropout)");
  EXPECT_EQ(refused("softcap,sink"), "attnbench_score_modifications: unknown 'softcap,sink' (known: softcap, sink, dropout)");
  EXPECT_EQ(refused("sink Softcap"), "attnbench_score_modifications: unknown 'Softcap' (known: softcap, sink, dropout)");
}

TEST(PluginScoreModifications, CrossToTheHarnessAndAreDescribed) {
  const PluginInfo info = info_of("dropout softcap");
  const PluginInfo back = nlohmann::json(info).get<PluginInfo>();
  EXPECT_EQ(back.score_modifications, info.score_modifications);
  const std::vector<std::string> lines = describe_capabilities(info);
  EXPECT_NE(std::find(lines.begin(), lines.end(), "score modifications: softcap, dropout"), lines.end());
  const std::vector<std::string> plain = describe_capabilities(info_of(nullptr));
  EXPECT_NE(std::find(plain.begin(), plain.end(), "score modifications: none"), plain.end());
}

TEST(PluginCallSettings, CarriedByNameToTheCall) {
  // A seed beyond 2^53: exact in `integer`, the nearest double in `value`.
  const std::uint64_t seed = (std::uint64_t{1} << 60) + 3;
  const Problem p = parse_problem("b=1 hq=2 hkv=2 nq=3 nk=5 dk=4 dv=4 dtype=f32 causal=none softcap=2.5 dropout=0.25 dropout_seed=" +
                                  std::to_string(seed) + " regime=diffuse seed=3");
  const CallDescription sent = describe_call(p);
  ASSERT_EQ(sent.settings.size(), score_settings_of(p).size());
  // What the worker reads: the JSON's "settings", by name, whatever the modifications are.
  const nlohmann::json j = sent;
  EXPECT_EQ(j.at("settings"), (nlohmann::json{{"softcap", 2.5}, {"dropout_p", 0.25}, {"dropout_seed", seed}}));
  const CallDescription d = j.get<CallDescription>();
  EXPECT_EQ(d.settings, sent.settings);
  const AbiCall abi(d, plan_tensors(p, Layout::bhsd, false), nullptr);
  const attnbench_call& call = abi.call();
  ASSERT_EQ(call.setting_count, 3);
  for (const NamedSetting& s : score_settings_of(p)) {
    const std::string name(s.setting->name);
    const attnbench_setting* found = attnbench_call_setting(&call, name.c_str());
    ASSERT_NE(found, nullptr) << name;
    EXPECT_STREQ(found->name, name.c_str());
    EXPECT_EQ(found->value, s.value.real) << name;
    EXPECT_EQ(found->integer, s.value.integer) << name;
  }
  EXPECT_EQ(attnbench_call_setting(&call, "dropout_seed")->integer, seed);
  EXPECT_EQ(attnbench_call_setting(&call, "dropout_seed")->value, double(seed));
  EXPECT_EQ(attnbench_call_setting(&call, "softcap")->integer, 0u);
  // The named fields still carry the same values, for the plugins built with them.
  EXPECT_EQ(call.softcap, attnbench_call_setting(&call, "softcap")->value);
  EXPECT_EQ(call.dropout_p, attnbench_call_setting(&call, "dropout_p")->value);
  EXPECT_EQ(call.dropout_seed, seed);
  EXPECT_EQ(attnbench_call_setting(&call, "sink"), nullptr);
  EXPECT_EQ(attnbench_call_setting(&call, "soft_cap"), nullptr);

  // A call of an older attnbench (its struct ends at tensors) has none, whatever follows it.
  attnbench_call older = call;
  older.struct_size = static_cast<std::uint32_t>(offsetof(attnbench_call, tensors) + sizeof(older.tensors));
  EXPECT_EQ(attnbench_call_setting(&older, "softcap"), nullptr);
}

TEST(PluginCallSettings, NoneForAProblemWithoutModifications) {
  const Problem p = parse_problem("b=1 hq=2 hkv=2 nq=3 nk=5 dk=4 dv=4 dtype=f32 causal=none regime=diffuse seed=3");
  const CallDescription d = nlohmann::json(describe_call(p)).get<CallDescription>();
  EXPECT_TRUE(d.settings.empty());
  const AbiCall abi(d, plan_tensors(p, Layout::bhsd, false), nullptr);
  EXPECT_EQ(abi.call().setting_count, 0);
  EXPECT_EQ(abi.call().settings, nullptr);
  EXPECT_EQ(attnbench_call_setting(&abi.call(), "softcap"), nullptr);
  // Only the modification a problem uses has entries.
  const Problem capped = parse_problem("b=1 hq=2 hkv=2 nq=3 nk=5 dk=4 dv=4 dtype=f32 causal=none softcap=3 regime=diffuse seed=3");
  const AbiCall one(describe_call(capped), plan_tensors(capped, Layout::bhsd, false), nullptr);
  EXPECT_EQ(one.call().setting_count, 1);
  EXPECT_EQ(attnbench_call_setting(&one.call(), "dropout_p"), nullptr);
}

TEST(PluginCallSettings, UnknownOrMistypedSettingIsABadDescription) {
  const Problem p = parse_problem("b=1 hq=2 hkv=2 nq=3 nk=5 dk=4 dv=4 dtype=f32 causal=none dropout=0.5 regime=diffuse seed=3");
  nlohmann::json j = describe_call(p);
  nlohmann::json unknown = j;
  unknown["settings"]["temperature"] = 2.0;
  EXPECT_THROW(unknown.get<CallDescription>(), std::invalid_argument);
  nlohmann::json mistyped = j;
  mistyped["settings"]["dropout_seed"] = 1.5;  // a seed is an unsigned integer
  EXPECT_ANY_THROW(mistyped.get<CallDescription>());
}

// A version 1 plugin cannot be given a setting: a call with any (a modification without a named
// field, as one added later) is refused, not passed on without it.
int v1_run(const attnbench_problem*, const attnbench_tensor*, const attnbench_tensor*, const attnbench_tensor*, const attnbench_tensor*,
           const attnbench_tensor*, const attnbench_tensor*, const attnbench_tensor*, char*, size_t) {
  return 0;
}
int v1_supports(const attnbench_problem*, char*, size_t) { return 1; }

TEST(PluginCallSettings, VersionOneShimRefusesAnySetting) {
  attnbench_plugin_v1 v1{};
  v1.abi_version = 1;
  v1.name = "old";
  v1.version = "1";
  v1.description = "from before version 2";
  v1.capabilities.dtypes = ATTNBENCH_DTYPE_BIT(ATTNBENCH_DTYPE_F32);
  v1.capabilities.layouts = ATTNBENCH_LAYOUT_BHSD;
  v1.capabilities.min_head_dim = 1;
  v1.capabilities.max_head_dim = 64;
  v1.capabilities.device_type = ATTNBENCH_DEVICE_HOST;
  v1.run = v1_run;
  v1.supports = v1_supports;
  const V1Shim shim(v1);
  const Problem p = parse_problem("b=1 hq=2 hkv=2 nq=3 nk=5 dk=4 dv=4 dtype=f32 causal=none softcap=2 regime=diffuse seed=3");
  AbiCall abi(describe_call(p), plan_tensors(p, Layout::bhsd, false), shim.plugin().context);
  abi.call().softcap = 0;  // as if the setting had no named field
  char why[256] = {};
  EXPECT_EQ(shim.plugin().supports(&abi.call(), why, sizeof why), 0);
  EXPECT_STREQ(why, "ABI version 1 cannot express the settings of a score modification (the plugin speaks version 1)");
  const Problem plain = parse_problem("b=1 hq=2 hkv=2 nq=3 nk=5 dk=4 dv=4 dtype=f32 causal=none regime=diffuse seed=3");
  AbiCall fine(describe_call(plain), plan_tensors(plain, Layout::bhsd, false), shim.plugin().context);
  EXPECT_EQ(shim.plugin().supports(&fine.call(), why, sizeof why), 1);
}

}  // namespace
}  // namespace attn::plugin
