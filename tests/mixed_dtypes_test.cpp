// A dtype per role (ProblemNumerics::role_dtypes): the dtypes= token round-trips and is left out
// when no role has a dtype of its own; the inputs, the output, the LSE and the bytes follow each
// role's dtype; the working precision follows the widest input; a declaration covers a mixed
// problem only where each role in a dtype of its own declares it for itself, and a projection
// says what it changed; the pass rule judges o in o's dtype, so an f32 output rounded to its f16
// inputs' precision fails where the same kernel passes a one-dtype case; plugins and capability
// files carry per-role dtypes into Capabilities.
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "core/case_files.hpp"
#include "core/dtype.hpp"
#include "core/given_case.hpp"
#include "core/npy.hpp"
#include "core/error.hpp"
#include "core/inputs.hpp"
#include "impls/capability_declaration.hpp"
#include "impls/capability_space.hpp"
#include "impls/cpu_naive/cpu_naive.hpp"
#include "impls/plugin/plugin_abi.hpp"
#include "impls/registry.hpp"
#include "reference/reference.hpp"
#include "verification/verify.hpp"

namespace attn {
namespace {

constexpr const char* f16_in_f32_out = "b=1 hq=4 hkv=2 nq=9 nk=11 dk=16 dv=8 dtype=f16 dtypes=o:f32 causal=bottom_right regime=diffuse seed=4";
constexpr const char* one_dtype = "b=1 hq=4 hkv=2 nq=9 nk=11 dk=16 dv=8 dtype=f16 causal=bottom_right regime=diffuse seed=4";

std::string refusal(const std::string& repro) {
  try {
    parse_problem(repro);
  } catch (const InputError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(MixedDtypes, TheTokenRoundTripsAndIsLeftOutWithoutOwnDtypes) {
  const Problem p = parse_problem(f16_in_f32_out);
  EXPECT_EQ(p.dtype, DType::f16);
  EXPECT_EQ(p.dtype_of(Role::q), DType::f16);
  EXPECT_EQ(p.dtype_of(Role::o), DType::f32);
  EXPECT_EQ(p.dtype_of(Role::lse), DType::f32);
  EXPECT_TRUE(p.mixed());
  EXPECT_EQ(p.repro(), f16_in_f32_out);
  EXPECT_EQ(parse_problem(p.repro()), p);
  EXPECT_EQ(p.label(), "f16+o:f32 b1 h4/2 n9x11 d16/8 causal_br diffuse");
  const nlohmann::json j = p;
  EXPECT_EQ(j["role_dtypes"], (nlohmann::json{{"o", "f32"}}));
  EXPECT_EQ(j.get<Problem>(), p);

  // An own dtype equal to the problem's is no own dtype: the same problem, printed without it.
  const Problem same = parse_problem(std::string(one_dtype) + " dtypes=o:f16,v:f16");
  EXPECT_FALSE(same.mixed());
  EXPECT_EQ(same, parse_problem(one_dtype));
  EXPECT_EQ(same.repro(), one_dtype);
  EXPECT_FALSE(nlohmann::json(same).contains("role_dtypes"));
  EXPECT_NE(p, parse_problem(one_dtype));

  // Several roles print in role order, whatever order they were given in.
  EXPECT_EQ(parse_problem(std::string(one_dtype) + " dtypes=o:f32,k:bf16,q:f32").repro(),
            "b=1 hq=4 hkv=2 nq=9 nk=11 dk=16 dv=8 dtype=f16 dtypes=q:f32,k:bf16,o:f32 causal=bottom_right regime=diffuse seed=4");
}

TEST(MixedDtypes, BadTokensAreRefusedNamingTheFault) {
  EXPECT_NE(refusal(std::string(one_dtype) + " dtypes=x:f32").find("dtypes: 'x' is not a role that holds the problem's data"), std::string::npos);
  EXPECT_NE(refusal(std::string(one_dtype) + " dtypes=lse:f64").find("'lse' is not a role that holds the problem's data"), std::string::npos);
  EXPECT_NE(refusal(std::string(one_dtype) + " dtypes=o:f32,o:f64").find("dtypes: role o is given twice"), std::string::npos);
  EXPECT_NE(refusal(std::string(one_dtype) + " dtypes=o").find("dtypes: 'o' is not ROLE:DTYPE"), std::string::npos);
  EXPECT_NE(refusal(std::string(one_dtype) + " dtypes=o:f8").find("f8"), std::string::npos);
  Problem p = parse_problem(one_dtype);
  p.role_dtypes[Role::mask] = DType::f32;
  EXPECT_THROW(p.validate(), InputError);
}

TEST(MixedDtypes, TensorsWorkingPrecisionAndBytesFollowTheRoles) {
  Problem p = parse_problem("b=1 hq=2 hkv=1 nq=3 nk=5 dk=4 dv=6 dtype=f32 dtypes=k:bf16,v:f16,o:f64 causal=none regime=large seed=1");
  const CaseInputs in = generate_inputs(p);
  EXPECT_EQ(in.q.dtype(), DType::f32);
  EXPECT_EQ(in.k.dtype(), DType::bf16);
  EXPECT_EQ(in.v.dtype(), DType::f16);
  EXPECT_EQ(make_output(p).dtype(), DType::f64);
  // An f64 output of f32 and narrower inputs: they still accumulate in f32, and so does the LSE.
  EXPECT_EQ(working_dtype(p.numerics()), DType::f32);
  EXPECT_EQ(make_lse(p).dtype(), DType::f32);
  // The large regime stays finite in the narrower of Q's and K's dtypes.
  for (std::int64_t e = 0; e < in.k.numel(); ++e) ASSERT_TRUE(std::isfinite(in.k.get(e)));
  EXPECT_DOUBLE_EQ(p.bytes_min(), 4.0 * 2 * 3 * 4 + 2.0 * 5 * 4 + 2.0 * 5 * 6 + 8.0 * 2 * 3 * 6);
  // An f64 input makes the working precision f64.
  p.role_dtypes[Role::q] = DType::f64;
  EXPECT_EQ(working_dtype(p.numerics()), DType::f64);
}

Capabilities one_dtype_kernel() {
  Capabilities c;
  c.dtypes = {DType::f16, DType::bf16};
  declare_every_mask_and_shape(c);
  return c;
}

TEST(MixedDtypes, ADeclarationCoversARoleOnlyInTheDtypesDeclaredForIt) {
  const Problem mixed = parse_problem(f16_in_f32_out);
  Capabilities c = one_dtype_kernel();
  EXPECT_TRUE(covers(c, parse_problem(one_dtype)).ok);
  EXPECT_EQ(covers(c, mixed).reason, "dtype f32 of o in an f16 problem not declared (o takes the problem's dtype; on its own: none declared)");
  c.role_dtypes[Role::o] = {DType::f32};
  EXPECT_TRUE(covers(c, mixed).ok);
  EXPECT_TRUE(declares_mixed_dtypes(c));
  EXPECT_FALSE(declares_mixed_dtypes(one_dtype_kernel()));
  Capabilities every;
  declare_every_dtype(every);
  EXPECT_TRUE(declares_mixed_dtypes(every));
  Capabilities f16_listed_per_role;  // q, k, v and o each list f16: still one-dtype problems only
  f16_listed_per_role.dtypes = {DType::f16};
  for (Role r : {Role::q, Role::k, Role::v, Role::o}) f16_listed_per_role.role_dtypes[r] = {DType::f16};
  EXPECT_FALSE(declares_mixed_dtypes(f16_listed_per_role));
  // Declaring f16 and bf16 problems is not declaring f16 queries with bf16 keys.
  EXPECT_EQ(covers(c, parse_problem(std::string(one_dtype) + " dtypes=k:bf16")).reason, "dtype bf16 of k in an f16 problem not declared (k takes the problem's dtype; on its own: none declared)");
  // Every built-in CPU implementation reads each tensor in its own dtype; the mutants and the GPU ones declare one dtype.
  Registry registry;
  register_builtin_implementations(registry);
  for (const Implementation* impl : registry.all()) {
    const Capabilities caps = impl->describe();
    EXPECT_EQ(covers(caps, mixed).ok, caps.device == "cpu") << impl->name() << ": " << covers(caps, mixed).reason;
  }
}

TEST(MixedDtypes, AProjectionDropsUndeclaredOwnDtypesAndSaysSo) {
  const Problem mixed = parse_problem(f16_in_f32_out);
  const std::optional<Problem> onto = project_onto(one_dtype_kernel(), mixed);
  ASSERT_TRUE(onto.has_value());
  EXPECT_EQ(*onto, parse_problem(one_dtype));
  Capabilities f32_output = one_dtype_kernel();
  f32_output.role_dtypes[Role::o] = {DType::f32};
  const Problem bf16_inputs_f64_out = parse_problem(std::string(one_dtype) + " dtypes=o:f64");
  EXPECT_EQ(project_onto(f32_output, bf16_inputs_f64_out), mixed);  // o to the nearest it declares
  Capabilities f32_only;
  f32_only.dtypes = {DType::f32};
  declare_every_mask_and_shape(f32_only);
  EXPECT_EQ(project_onto(f32_only, mixed)->repro(), "b=1 hq=4 hkv=2 nq=9 nk=11 dk=16 dv=8 dtype=f32 causal=bottom_right regime=diffuse seed=4");

  Registry registry;
  register_builtin_implementations(registry);
  for (const Implementation* impl : registry.all()) {
    if (covers(impl->describe(), mixed).ok || impl->describe().device != "cpu") continue;
    const Resolution r = resolve(*impl, mixed);
    ASSERT_TRUE(r.problem.has_value()) << impl->name();
    EXPECT_FALSE(r.problem->mixed());
    EXPECT_NE(r.changes.find("dtype f16+o:f32 -> "), std::string::npos) << r.changes;
  }
}

// Writes an f32 output whose every element was rounded to f16 first: the naive algorithm with
// the store of a kernel that converts to its input type and then widens.
class OutputInInputPrecision final : public Implementation {
 public:
  std::string name() const override { return "output_in_input_precision"; }
  Capabilities describe() const override {
    Capabilities c;
    declare_every_dtype(c);
    declare_every_mask_and_shape(c);
    c.summary = "cpu_naive, its output rounded to q's dtype before it is stored";
    return c;
  }
  Support supports(const Problem&) const override { return Support::yes(); }
  std::size_t workspace_bytes(const Problem& p) const override { return naive_workspace_bytes(p); }
  void run(const RunArgs& a) const override {
    naive_attention(a);
    Tensor& out = a.tensors.required_output(Role::o);
    for (std::int64_t e = 0; e < out.numel(); ++e) out.set(e, round_to(a.problem.dtype_of(Role::q), out.get(e)));
  }
};

TEST(MixedDtypes, AnOutputJudgedInItsOwnDtypeCatchesRoundingToTheInputs) {
  const OutputInInputPrecision impl;
  VerifyOptions options;
  options.reference.threads = 1;
  options.diagnosis.enabled = false;
  const VerifyRun run = verify({&impl}, {parse_problem(one_dtype), parse_problem(f16_in_f32_out)}, options);
  ASSERT_EQ(run.records.size(), 2u);
  EXPECT_TRUE(run.records[0].verdict.pass) << "one dtype: rounding to f16 is the output's own rounding";
  EXPECT_FALSE(run.records[1].verdict.pass) << "an f32 output holding f16 values";
  // And the correct naive algorithm passes both.
  const Implementation* naive = nullptr;
  Registry registry;
  register_builtin_implementations(registry);
  naive = registry.find("cpu_naive");
  ASSERT_NE(naive, nullptr);
  const VerifyRun control = verify({naive}, {parse_problem(one_dtype), parse_problem(f16_in_f32_out)}, options);
  EXPECT_EQ(control.passed(), 2);
}

TEST(MixedDtypes, PluginsAndCapabilityFilesDeclarePerRoleDtypes) {
  plugin::PluginInfo info;
  info.layouts = ATTNBENCH_ACCEPTS_BHSD;
  info.operations = ATTNBENCH_OP_BIT(ATTNBENCH_OP_FORWARD);
  info.features = ATTNBENCH_FEATURE_GQA | ATTNBENCH_FEATURE_DIFFERENT_DK_DV | ATTNBENCH_FEATURE_CAUSAL_BOTTOM_RIGHT;
  info.min_head_dim = 1;
  info.max_head_dim = 256;
  info.dtypes = {{ATTNBENCH_ROLE_DATA, plugin::to_dl(DType::f16)},
                 {ATTNBENCH_ROLE_DATA, plugin::to_dl(DType::bf16)},
                 {ATTNBENCH_ROLE_O, plugin::to_dl(DType::f32)},
                 {ATTNBENCH_ROLE_O, plugin::to_dl(DType::f16)},
                 {ATTNBENCH_ROLE_K, {ATTNBENCH_DL_FLOAT8_E4M3FN, 8, 1}}};
  const Capabilities caps = plugin::to_capabilities(info);
  EXPECT_EQ(caps.dtypes, (std::vector<DType>{DType::f16, DType::bf16}));
  ASSERT_EQ(caps.role_dtypes.size(), 1u);
  EXPECT_EQ(caps.role_dtypes.at(Role::o), (std::vector<DType>{DType::f32, DType::f16}));
  EXPECT_EQ(covers(caps, parse_problem(f16_in_f32_out)).reason, "");
  Problem bf16_to_f16 = parse_problem(one_dtype);
  bf16_to_f16.dtype = DType::bf16;
  bf16_to_f16.role_dtypes[Role::o] = DType::f16;
  EXPECT_TRUE(covers(caps, bf16_to_f16).ok);  // o lists f16 for itself
  // bf16 is a one-dtype declaration (ATTNBENCH_ROLE_DATA): no role takes it on its own.
  EXPECT_EQ(covers(caps, parse_problem(std::string(one_dtype) + " dtypes=k:bf16")).reason, "dtype bf16 of k in an f16 problem not declared (k takes the problem's dtype; on its own: none declared)");
  const std::string described = plugin::describe_capabilities(info).front();
  EXPECT_NE(described.find("dtypes: f16, bf16 (o on its own: f32, f16; k fp8_e4m3fn (declared, not run))"), std::string::npos) << described;

  const Capabilities back = capabilities_from_json(capabilities_to_json(caps), "test");
  EXPECT_EQ(back.role_dtypes, caps.role_dtypes);
  const auto refused = [](const char* text) {
    try {
      capabilities_from_json(nlohmann::json::parse(text), "caps.json");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refused(R"({"dtypes": ["f16"], "role_dtypes": {"lse": ["f32"]}})"),
            "caps.json: 'role_dtypes': 'lse' is not a role that holds the problem's data");
  EXPECT_EQ(refused(R"({"dtypes": ["f16"], "role_dtypes": {"o": "f32"}})"),
            "caps.json: 'role_dtypes': o must be a list of dtype names, not \"f32\"");
  EXPECT_NE(refused(R"({"dtypes": ["f16"], "role_dtypes": {"o": ["f24"]}})").find("caps.json: 'role_dtypes': o: "), std::string::npos);
}

// The LSE is judged in the working precision whatever o's dtype: an f64 input's LSE must come from
// the reference's f64-grade passes, the same bits as the one-dtype problem's (the double pass
// alone, fine for rounding an f16 output, left it a few f64 ulps off, and cpu_blocked failed).
TEST(MixedDtypes, TheReferencesLseDependsOnTheInputsNotOnTheOutputsDtype) {
  const Problem mixed = parse_problem("b=2 hq=12 hkv=3 nq=12 nk=501 dk=60 dv=1 dtype=f64 dtypes=o:f16 causal=bottom_right regime=diffuse seed=36");
  Problem one = mixed;
  one.role_dtypes.clear();
  ReferenceOptions options;
  options.threads = 1;
  const ReferenceResult a = compute_reference(mixed, generate_inputs(mixed), options);
  const ReferenceResult b = compute_reference(one, generate_inputs(one), options);
  ASSERT_EQ(a.lse.size(), b.lse.size());
  for (std::size_t r = 0; r < a.lse.size(); ++r) ASSERT_EQ(a.lse[r], b.lse[r]) << "row " << r;
  Registry registry;
  register_builtin_implementations(registry);
  VerifyOptions verify_options;
  verify_options.reference.threads = 1;
  verify_options.diagnosis.enabled = false;
  EXPECT_EQ(verify({registry.find("cpu_blocked")}, {mixed}, verify_options).passed(), 1);
}

// Your own tensors (check --inputs) with settings "dtypes": f16 inputs and the f32 output they were written to.
TEST(MixedDtypes, GivenTensorsNameTheirRolesDtypesInTheSettings) {
  const Problem p = parse_problem(f16_in_f32_out);
  const CaseInputs in = generate_inputs(p);
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "attn_mixed_dtypes_given";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  npy::write_file(dir / "q.npy", tensor_to_npy(in.q));
  npy::write_file(dir / "k.npy", tensor_to_npy(in.k));
  npy::write_file(dir / "v.npy", tensor_to_npy(in.v));
  Tensor out = make_output(p);
  for (std::int64_t e = 0; e < out.numel(); ++e) out.set(e, 0.25);
  npy::write_file(dir / "out.npy", tensor_to_npy(out));
  std::ofstream(dir / "settings.json") << R"({"causal": "bottom_right", "dtypes": "o:f32"})";
  const GivenCase given = read_given_case(dir);
  EXPECT_EQ(given.problem.dtype_of(Role::q), DType::f16);
  EXPECT_EQ(given.problem.dtype_of(Role::o), DType::f32);
  EXPECT_EQ(given.out.dtype(), DType::f32);
  EXPECT_EQ(given.out.get(0), 0.25);
  std::ofstream(dir / "settings.json") << R"({"causal": "bottom_right", "dtypes": "lse:f32"})";
  try {
    read_given_case(dir);
    ADD_FAILURE() << "an lse dtype was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("settings.json: dtypes: 'lse' is not a role that holds the problem's data"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace attn
