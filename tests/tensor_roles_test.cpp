// Role-generic verification: one role vocabulary (core/tensor_role.hpp) that the plugin ABI's
// constants map onto, DLPack-shaped views of tensors, the role-keyed tensor set of RunArgs, and
// per-role verdicts from the judge through verify to the record and back.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/role_tensors.hpp"
#include "core/tensor_role.hpp"
#include "impls/cpu_naive/cpu_naive.hpp"
#include "impls/plugin/plugin_abi.hpp"
#include "judge/judge.hpp"
#include "records/verify_record.hpp"
#include "reports/verify_report.hpp"
#include "verification/verify.hpp"

namespace attn {
namespace {

TEST(TensorRole, NamesParseBackAndAreDistinct) {
  std::set<std::string_view> names;
  for (Role r : all_roles) {
    EXPECT_EQ(parse_role(to_string(r)), r) << to_string(r);
    names.insert(to_string(r));
  }
  EXPECT_EQ(names.size(), role_count);
  EXPECT_FALSE(parse_role("out").has_value());
}

// Every ABI constant has its role and back; weights, the harness's own, and the parameter
// gradients d_sink and d_bias, which no plugin declares, alone have no constant.
TEST(TensorRole, ThePluginAbiRolesMapOntoRolesCompletely) {
  std::set<Role> mapped;
  for (std::int32_t abi = 0; abi < ATTNBENCH_ROLE_COUNT; ++abi) {
    const std::optional<Role> r = plugin::to_role(abi);
    ASSERT_TRUE(r.has_value()) << abi;
    EXPECT_EQ(plugin::to_abi_role(*r), abi) << to_string(*r);
    EXPECT_EQ(plugin::role_name(abi), to_string(*r));
    mapped.insert(*r);
  }
  EXPECT_EQ(mapped.size(), std::size_t(ATTNBENCH_ROLE_COUNT));
  for (Role r : all_roles) EXPECT_EQ(mapped.count(r) == 1, r != Role::weights && r != Role::d_sink && r != Role::d_bias) << to_string(r);
  for (Role r : {Role::weights, Role::d_sink, Role::d_bias}) EXPECT_FALSE(plugin::to_abi_role(r).has_value()) << to_string(r);
  EXPECT_FALSE(plugin::to_role(ATTNBENCH_ROLE_DATA).has_value());
  EXPECT_FALSE(plugin::to_role(ATTNBENCH_ROLE_COUNT).has_value());
  EXPECT_EQ(plugin::to_role(ATTNBENCH_ROLE_D_O), Role::d_o);
  EXPECT_EQ(plugin::to_role(ATTNBENCH_ROLE_LSE), Role::lse);
}

TEST(TensorView, OfATensorIsItsShapeWithDenseRowMajorStrides) {
  Tensor t(DType::bf16, {2, 3, 5, 7});
  const TensorView v = t.view();
  EXPECT_EQ(v.data, t.data());
  EXPECT_EQ(v.dtype, DType::bf16);
  EXPECT_EQ(v.device, Device::cpu);
  EXPECT_EQ(v.rank, 4);
  EXPECT_EQ(v.shape, (TensorView::Extents{2, 3, 5, 7}));
  EXPECT_EQ(v.strides, (TensorView::Extents{105, 35, 7, 1}));
  EXPECT_EQ(v.numel(), t.numel());
  EXPECT_TRUE(v.row_major());
  // Element (1, 2, 3, 4) is where Tensor::offset puts it.
  EXPECT_EQ(1 * v.strides[0] + 2 * v.strides[1] + 3 * v.strides[2] + 4 * v.strides[3], t.offset(1, 2, 3, 4));
  const ConstTensorView c = std::as_const(t).view();
  EXPECT_EQ(c.data, t.data());
  EXPECT_EQ(c.strides, v.strides);
  TensorView bshd = v;  // the same tensor read as BSHD is not row-major in BHSD order
  std::swap(bshd.strides[1], bshd.strides[2]);
  EXPECT_FALSE(bshd.row_major());
}

TEST(RoleTensors, AForwardSetHoldsItsInputsAndOutputsByRole) {
  const Problem p = parse_problem("b=1 hq=2 hkv=1 nq=3 nk=5 dk=4 dv=6 dtype=f16 causal=none regime=diffuse seed=1");
  const CaseInputs in = generate_inputs(p);
  Tensor out = make_output(p), lse = make_lse(p);
  const RoleTensors t = RoleTensors::forward(in, out, &lse);
  EXPECT_EQ(t.input(Role::q), &in.q);
  EXPECT_EQ(t.input(Role::v), &in.v);
  EXPECT_EQ(t.output(Role::o), &out);
  EXPECT_EQ(&t.required_output(Role::lse), &lse);
  EXPECT_EQ(t.input(Role::o), nullptr);  // an output is not an input
  EXPECT_EQ(t.output(Role::q), nullptr);
  EXPECT_EQ(t.output(Role::weights), nullptr);
  EXPECT_FALSE(t.has(Role::dq));
  EXPECT_THROW(t.required_output(Role::weights), std::logic_error);
  EXPECT_EQ(t.input_roles(), (std::vector<Role>{Role::q, Role::k, Role::v}));
  EXPECT_EQ(t.output_roles(), (std::vector<Role>{Role::o, Role::lse}));
  const std::optional<ConstTensorView> k = t.view(Role::k);
  ASSERT_TRUE(k.has_value());
  EXPECT_EQ(k->shape, (TensorView::Extents{1, 1, 5, 4}));
  EXPECT_EQ(t.view(Role::lse)->dtype, DType::f32);
  EXPECT_FALSE(t.view(Role::d_o).has_value());
  EXPECT_FALSE(t.has(Role::bias));

  // A bias is one of the set's inputs, as the mask stores it (broadcast over batches here).
  const Problem biased = parse_problem("b=2 hq=2 hkv=1 nq=3 nk=5 dk=4 dv=6 dtype=f16 causal=none bias=1@h regime=diffuse seed=1");
  const CaseInputs with_bias = generate_inputs(biased);
  Tensor biased_out = make_output(biased);
  const RoleTensors b = RoleTensors::forward(with_bias, biased_out);
  EXPECT_EQ(b.input(Role::bias), &with_bias.mask.bias_tensor());
  EXPECT_EQ(b.input_roles(), (std::vector<Role>{Role::q, Role::k, Role::v, Role::bias}));
  EXPECT_EQ(b.view(Role::bias)->shape, (TensorView::Extents{1, 2, 3, 5}));
}

// An implementation whose output is right and whose LSE is off by far more than its tolerance.
class WrongLse final : public Implementation {
 public:
  std::string name() const override { return "wrong_lse"; }
  Capabilities describe() const override {
    Capabilities c;
    c.summary = "cpu_naive with the LSE of row 0 off by 1e-2";
    c.dtypes = {DType::f32};
    declare_every_mask_and_shape(c);
    c.returns_lse = true;
    return c;
  }
  Support supports(const Problem&) const override { return Support::yes(); }
  std::size_t workspace_bytes(const Problem& p) const override { return naive_workspace_bytes(p); }
  void run(const RunArgs& a) const override {
    naive_attention(a);
    Tensor& lse = a.tensors.required_output(Role::lse);
    lse.set(0, lse.get(0) + 1e-2);
  }
};

const char* const wrong_lse_case = "b=1 hq=2 hkv=1 nq=4 nk=6 dk=8 dv=8 dtype=f32 causal=none regime=diffuse seed=3";

TEST(RoleVerdicts, OnlyTheLseWrongFailsTheLseAloneAndTheCase) {
  const Problem p = parse_problem(wrong_lse_case);
  const CaseInputs in = generate_inputs(p);
  Tensor out = make_output(p), lse = make_lse(p);
  std::vector<std::byte> workspace(naive_workspace_bytes(p));
  WrongLse().run(RunArgs{p, in, RoleTensors::forward(in, out, &lse), workspace});
  const Judgement j = judge_case(p, in, out, &lse);
  EXPECT_FALSE(j.verdict.pass);
  ASSERT_EQ(j.verdict.roles.size(), 2u);
  const RoleVerdict* o = j.verdict.role(Role::o);
  const RoleVerdict* l = j.verdict.role(Role::lse);
  ASSERT_TRUE(o != nullptr && l != nullptr);
  EXPECT_TRUE(o->pass) << (o->reasons.empty() ? "" : o->reasons.front());
  EXPECT_FALSE(l->pass);
  EXPECT_NEAR(l->max_abs, 1e-2, 1e-4);
  EXPECT_GT(l->tolerance, 0);
  EXPECT_EQ(o->tolerance, j.verdict.tolerance());
  ASSERT_EQ(l->reasons.size(), 1u);
  EXPECT_EQ(l->reasons, j.verdict.reasons);  // the case's reasons are the roles'
  EXPECT_NE(l->reasons.front().find("LSE max abs error"), std::string::npos) << l->reasons.front();

  // Without the LSE the same output passes, judged on o alone.
  const Judgement without = judge_case(p, in, out, nullptr);
  EXPECT_TRUE(without.verdict.pass);
  ASSERT_EQ(without.verdict.roles.size(), 1u);
  EXPECT_EQ(without.verdict.roles.front().role, Role::o);
}

// Through verify into the console and the record: "roles" names lse failing and o passing, and reads back.
TEST(RoleVerdicts, VerifyRecordsThemPerRoleAndReadsThemBack) {
  const WrongLse impl;
  VerifyOptions options;
  options.reference.threads = 1;
  options.diagnosis.enabled = false;
  const VerifyRun run = verify({&impl}, {parse_problem(wrong_lse_case)}, options);
  ASSERT_EQ(run.records.size(), 1u);
  std::ostringstream console;
  print_verify_summary(console, run, {});
  EXPECT_NE(console.str().find("  - lse: LSE max abs error"), std::string::npos) << console.str();
  const VerifyRecord record = verify_record(run.records.front());
  EXPECT_EQ(record.status, "fail");
  const nlohmann::json j = to_json(record);
  ASSERT_TRUE(j.contains("roles")) << j.dump(1);
  EXPECT_EQ(j["roles"]["o"]["passed"], true);
  EXPECT_EQ(j["roles"]["lse"]["passed"], false);
  EXPECT_EQ(j["roles"]["lse"]["reasons"], j["reasons"]);
  const VerifyRecord back = read_verify_record(j, 0, "v.json");
  EXPECT_EQ(back.roles, record.roles);
  ASSERT_EQ(back.roles.size(), 2u);
  EXPECT_EQ(back.roles[0].role, "o");  // in role order, whatever the file's key order
  EXPECT_EQ(back.roles[1].role, "lse");
  EXPECT_EQ(to_json(back), j);
  ASSERT_TRUE(back.role("lse") != nullptr);
  EXPECT_FALSE(back.role("lse")->passed);

  nlohmann::json bad = j;
  bad["roles"]["lse"]["passed"] = "no";
  try {
    read_verify_record(bad, 0, "v.json");
    ADD_FAILURE() << "a non-boolean passed was read";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("roles.lse.passed is not true or false"), std::string::npos) << e.what();
  }
  // A record of before the roles reads with none.
  nlohmann::json old = j;
  old.erase("roles");
  EXPECT_TRUE(read_verify_record(old, 0, "v.json").roles.empty());
}

// Tensor::borrow: a caller's elements read where they lie (the Python package's judge), never
// written; a write or a copy takes them into storage of the tensor's own.
TEST(Tensor, ABorrowedTensorReadsTheCallersElementsAndCopiesBeforeAnyWrite) {
  std::vector<float> callers{1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
  Tensor t = Tensor::borrow(DType::f32, {1, 1, 2, 3}, callers.data(), nullptr);
  EXPECT_TRUE(t.borrowed());
  EXPECT_EQ(std::as_const(t).data(), callers.data());  // no copy to read
  EXPECT_EQ(t.get(4), 5.0);
  const Tensor copy = t;  // a copy owns its elements
  EXPECT_FALSE(copy.borrowed());
  EXPECT_NE(copy.data(), static_cast<const void*>(callers.data()));
  EXPECT_TRUE(copy == t);
  Tensor moved = std::move(t);  // a move keeps borrowing
  EXPECT_TRUE(moved.borrowed());
  moved.set(0, 9.0);  // a write copies first: the caller's memory is untouched
  EXPECT_FALSE(moved.borrowed());
  EXPECT_EQ(callers[0], 1.0f);
  EXPECT_EQ(moved.get(0), 9.0);
  EXPECT_EQ(moved.get(5), 6.0);
}

TEST(Tensor, ABorrowedTensorKeepsWhatKeepsItsMemoryAlive) {
  auto owner = std::make_shared<std::vector<double>>(std::vector<double>{0.5, -0.25});
  std::weak_ptr<std::vector<double>> watch = owner;
  Tensor t = Tensor::borrow(DType::f64, {1, 1, 1, 2}, owner->data(), owner);
  owner.reset();
  EXPECT_FALSE(watch.expired());  // the tensor holds it
  EXPECT_EQ(t.get(1), -0.25);
  t = Tensor();
  EXPECT_TRUE(watch.expired());
}

TEST(Tensor, BorrowingMisalignedMemoryIsRefused) {
  std::vector<std::uint64_t> words(4);
  const auto* bytes = reinterpret_cast<const unsigned char*>(words.data());
  EXPECT_THROW(Tensor::borrow(DType::f32, {1, 1, 1, 2}, bytes + 1, nullptr), InputError);
  EXPECT_NO_THROW(Tensor::borrow(DType::f16, {1, 1, 1, 2}, bytes + 2, nullptr));
}

}  // namespace
}  // namespace attn
