// The plugin ABI's harness side without a worker: the problem as data and as the C struct, the
// layouts' strides, broadcast strides of the mask and bias, DLPack dtypes, capabilities and
// support, the description's checks and reserved names, the version 1 shim, the guarded arena's
// plan and fault descriptions, the message channel, and the worker's process tree and memory sizes.
// Just over 500 lines: one suite for the ABI's harness side, sharing its hand-built descriptions.
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/role_tensors.hpp"
#include "impls/plugin/abi_v1_shim.hpp"
#include "impls/plugin/arena_tensors.hpp"
#include "impls/plugin/call_description.hpp"
#include "impls/plugin/guarded_arena.hpp"
#include "impls/plugin/plugin_abi.hpp"
#include "impls/plugin/worker_channel.hpp"
#include "impls/plugin/worker_process.hpp"
#include "impls/registry.hpp"

namespace attn::plugin {
namespace {

int dummy_run(const attnbench_call*, char*, size_t) { return 0; }

const attnbench_role_dtype f32_f16[] = {{ATTNBENCH_ROLE_DATA, {ATTNBENCH_DL_FLOAT, 32, 1}}, {ATTNBENCH_ROLE_DATA, {ATTNBENCH_DL_FLOAT, 16, 1}}};

attnbench_plugin_v2 description() {
  attnbench_plugin_v2 d{};
  d.abi_version = ATTNBENCH_ABI_VERSION;
  d.struct_size = sizeof(attnbench_plugin_v2);
  d.name = "test";
  d.version = "0.1";
  d.description = "a description";
  attnbench_plugin_caps& c = d.capabilities;
  c.operations = ATTNBENCH_OP_BIT(ATTNBENCH_OP_FORWARD);
  c.dtypes = f32_f16;
  c.dtype_count = 2;
  c.layouts = ATTNBENCH_ACCEPTS_BSHD;
  c.features = ATTNBENCH_FEATURE_CAUSAL_TOP_LEFT | ATTNBENCH_FEATURE_BOOL_MASK | ATTNBENCH_FEATURE_LSE | ATTNBENCH_FEATURE_DETERMINISTIC;
  c.min_head_dim = 16;
  c.max_head_dim = 128;
  c.device_type = ATTNBENCH_DL_CPU;
  d.run = dummy_run;
  return d;
}

TEST(PluginAbi, ProblemCrossesAsDataAndBecomesTheCStruct) {
  const Problem p = parse_problem("b=2 hq=4 hkv=2 nq=5 nk=7 dk=16 dv=24 dtype=f16 causal=bottom_right pad=3,7 regime=diffuse seed=9");
  // What the harness sends, read back as the worker reads it: no repro string on the way.
  const CallDescription d = nlohmann::json(describe_call(p)).get<CallDescription>();
  const std::vector<TensorSpec> specs = nlohmann::json(plan_tensors(p, Layout::bshd, true)).get<std::vector<TensorSpec>>();
  int context = 0;
  const AbiCall abi(d, specs, &context);
  const attnbench_call& a = abi.call();
  EXPECT_EQ(a.struct_size, sizeof(attnbench_call));
  EXPECT_EQ(a.operation, ATTNBENCH_OP_FORWARD);
  EXPECT_EQ(a.batch, 2);
  EXPECT_EQ(a.h_q, 4);
  EXPECT_EQ(a.h_kv, 2);
  EXPECT_EQ(a.n_q, 5);
  EXPECT_EQ(a.n_k, 7);
  EXPECT_EQ(a.d_k, 16);
  EXPECT_EQ(a.d_v, 24);
  EXPECT_DOUBLE_EQ(a.scale, 0.25);
  EXPECT_EQ(a.window.left, ATTNBENCH_WINDOW_UNBOUNDED);
  EXPECT_EQ(a.window.right, 0);
  EXPECT_EQ(a.window.align, ATTNBENCH_ALIGN_BOTTOM_RIGHT);
  EXPECT_EQ(a.key_padding, ATTNBENCH_KEY_PADDING_PER_BATCH);
  ASSERT_EQ(a.valid_len_count, 2);
  EXPECT_EQ(a.valid_len[0], 3);
  EXPECT_EQ(a.valid_len[1], 7);
  EXPECT_EQ(a.accumulation, (DlType{ATTNBENCH_DL_FLOAT, 32, 1}));
  EXPECT_EQ(a.cuda_stream, nullptr);
  EXPECT_EQ(a.context, &context);
  EXPECT_EQ(a.tensor_count, ATTNBENCH_ROLE_COUNT);
  const attnbench_dl_tensor* q = attnbench_call_tensor(&a, ATTNBENCH_ROLE_Q);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->data, nullptr);  // described, not yet placed (what supports() sees)
  EXPECT_EQ(q->dtype, (DlType{ATTNBENCH_DL_FLOAT, 16, 1}));
  EXPECT_EQ(q->ndim, 4);
  EXPECT_EQ(std::vector<std::int64_t>(q->shape, q->shape + 4), (std::vector<std::int64_t>{2, 4, 5, 16}));
  EXPECT_EQ(std::vector<std::int64_t>(q->strides, q->strides + 4), (std::vector<std::int64_t>{320, 16, 64, 1}));  // BSHD
  const attnbench_dl_tensor* lse = attnbench_call_tensor(&a, ATTNBENCH_ROLE_LSE);
  ASSERT_NE(lse, nullptr);
  EXPECT_EQ(lse->ndim, 3);
  EXPECT_EQ(lse->dtype, (DlType{ATTNBENCH_DL_FLOAT, 32, 1}));
  EXPECT_EQ(attnbench_call_tensor(&a, ATTNBENCH_ROLE_MASK), nullptr);
  EXPECT_EQ(attnbench_call_tensor(&a, ATTNBENCH_ROLE_DQ), nullptr);
  EXPECT_EQ(attnbench_call_tensor(&a, ATTNBENCH_ROLE_COUNT), nullptr);
}

TEST(PluginAbi, ExplicitScaleAndMasksCarryOver) {
  const Problem p = parse_problem("b=1 hq=2 hkv=2 nq=3 nk=3 dk=8 dv=8 dtype=f64 causal=none scale=0.5 bool=0.5@h bias=1@shared regime=diffuse seed=0");
  const CallDescription d = describe_call(p);
  EXPECT_DOUBLE_EQ(d.scale, 0.5);
  EXPECT_EQ(d.window.left, ATTNBENCH_WINDOW_UNBOUNDED);
  EXPECT_EQ(d.window.right, ATTNBENCH_WINDOW_UNBOUNDED);
  EXPECT_EQ(d.key_padding, ATTNBENCH_KEY_PADDING_NONE);
  EXPECT_TRUE(d.valid_len.empty());
  EXPECT_EQ(d.accumulation, (DlType{ATTNBENCH_DL_FLOAT, 64, 1}));
  const std::vector<TensorSpec> specs = plan_tensors(p, Layout::bhsd, false);
  ASSERT_EQ(specs.size(), 6u);  // q k v out mask bias
  EXPECT_EQ(specs[4].role, ATTNBENCH_ROLE_MASK);
  EXPECT_EQ(specs[4].dtype, dl_bool);
  EXPECT_EQ(specs[4].strides, (Strides{0, 9, 3, 1}));
  EXPECT_EQ(specs[5].role, ATTNBENCH_ROLE_BIAS);
  EXPECT_EQ(specs[5].dtype, (DlType{ATTNBENCH_DL_FLOAT, 64, 1}));
  EXPECT_EQ(specs[5].strides, (Strides{0, 0, 3, 1}));
  const AbiCall abi(d, specs, nullptr);
  EXPECT_EQ(abi.call().valid_len, nullptr);
  EXPECT_EQ(attnbench_call_tensor(&abi.call(), ATTNBENCH_ROLE_LSE), nullptr);
  EXPECT_EQ(attnbench_call_tensor(&abi.call(), ATTNBENCH_ROLE_BIAS)->shape[3], 3);
}

// Dropout: its probability and seed cross as data; the keep mask is an output of bytes (dense
// BHSD whatever the layout), poisoned 0xFF in the arena and read back into the harness's f32
// tensor as each byte's value, so a byte neither 0 nor 1 reaches the judge as it is; a visible
// pair left poisoned is named, a masked one does not matter; the feature bit is the score
// modification.
TEST(PluginAbi, DropoutCrossesWithItsKeepMask) {
  const Problem p =
      parse_problem("b=1 hq=2 hkv=2 nq=3 nk=4 dk=16 dv=16 dtype=f32 causal=top_left dropout=0.25 dropout_seed=77 regime=diffuse seed=5");
  const CallDescription d = nlohmann::json(describe_call(p)).get<CallDescription>();
  EXPECT_DOUBLE_EQ(d.dropout_p, 0.25);
  EXPECT_EQ(d.dropout_seed, 77u);
  EXPECT_EQ(describe_call(parse_problem("b=1 hq=2 hkv=2 nq=3 nk=4 dk=16 dv=16 dtype=f32 causal=none regime=diffuse seed=5")).dropout_p, 0.0);
  const std::vector<TensorSpec> specs = nlohmann::json(plan_tensors(p, Layout::bshd, false)).get<std::vector<TensorSpec>>();
  ASSERT_EQ(specs.size(), 5u);  // q k v out keep
  const TensorSpec& keep_spec = specs.back();
  EXPECT_EQ(keep_spec.role, ATTNBENCH_ROLE_KEEP);
  EXPECT_EQ(keep_spec.dtype, dl_bool);
  EXPECT_EQ(keep_spec.shape, (Tensor::Shape{1, 2, 3, 4}));
  EXPECT_EQ(keep_spec.strides, (Strides{24, 12, 4, 1}));
  const AbiCall abi(d, specs, nullptr);
  EXPECT_DOUBLE_EQ(abi.call().dropout_p, 0.25);
  EXPECT_EQ(abi.call().dropout_seed, 77u);
  ASSERT_NE(attnbench_call_tensor(&abi.call(), ATTNBENCH_ROLE_KEEP), nullptr);
  EXPECT_EQ(attnbench_call_tensor(&abi.call(), ATTNBENCH_ROLE_KEEP)->ndim, 4);

  const CaseInputs in = generate_inputs(p);
  Tensor out = make_output(p), keep = make_keep(p);
  const RunArgs args{p, in, RoleTensors::forward(in, out, nullptr, nullptr, &keep), {}};
  const std::vector<Item> items = call_items(specs, args);
  const Item& k = items.back();
  ASSERT_TRUE(k.bytes_to_f32);
  ASSERT_EQ(item_bytes(k), 24u);
  std::vector<std::byte> arena(item_bytes(k));
  copy_in(k, arena.data());
  EXPECT_TRUE(std::all_of(arena.begin(), arena.end(), [](std::byte b) { return std::to_integer<std::uint8_t>(b) == keep_poison; }));
  copy_out(k, arena.data());
  // Causal top-left: row i sees keys 0..i, 6 pairs per head.
  EXPECT_EQ(unwritten_keep(p, in.mask, keep), "keep not written (still poison 0xFF): 12 visible pair(s), first at b=0 h=0 i=0 j=0");
  for (std::size_t e = 0; e < arena.size(); ++e) arena[e] = std::byte(e % 2);
  arena[std::size_t(keep.offset(0, 1, 2, 1))] = std::byte{7};     // visible: its value reaches the judge
  arena[std::size_t(keep.offset(0, 0, 0, 3))] = std::byte{0xFF};  // masked: does not matter
  copy_out(k, arena.data());
  EXPECT_EQ(keep.get(keep.offset(0, 0, 0, 1)), 1.0);
  EXPECT_EQ(keep.get(keep.offset(0, 0, 1, 0)), 0.0);
  EXPECT_EQ(keep.get(keep.offset(0, 1, 2, 1)), 7.0);
  EXPECT_EQ(keep.get(keep.offset(0, 0, 0, 3)), 255.0);
  EXPECT_EQ(unwritten_keep(p, in.mask, keep), "");

  // Declared or not: the feature bit is ScoreModification::dropout.
  attnbench_plugin_v2 plain = description();
  EXPECT_FALSE(check_capabilities(read_plugin_info(plain, "/x.so"), p).ok);
  EXPECT_NE(check_capabilities(read_plugin_info(plain, "/x.so"), p).reason.find("dropout"), std::string::npos);
  plain.capabilities.features |= ATTNBENCH_FEATURE_DROPOUT;
  const PluginInfo dropping = read_plugin_info(plain, "/x.so");
  EXPECT_EQ(to_capabilities(dropping).score_modifications, std::vector<ScoreModification>{ScoreModification::dropout});
  EXPECT_TRUE(check_capabilities(dropping, p).ok) << check_capabilities(dropping, p).reason;
}

// The backward's tensors, planned by role as the forward's are: q k v o (the lse when given) d_o in,
// in the layout's strides, dq dk dv out; no keep mask (a backward redraws its own); the run's
// tensors copied in and the gradients back out; an unwritten row of dK or dV named by its key.
TEST(PluginAbi, BackwardCrossesByRole) {
  const Problem p = parse_problem(
      "op=backward b=1 hq=4 hkv=2 nq=3 nk=5 dk=8 dv=4 dtype=f16 causal=top_left bias=1@h dropout=0.25 regime=diffuse seed=3");
  const std::vector<TensorSpec> specs = nlohmann::json(plan_tensors(p, Layout::bshd, true)).get<std::vector<TensorSpec>>();
  std::vector<std::string> names;
  for (const TensorSpec& t : specs) names.push_back(t.name + (t.output ? " out" : " in"));
  EXPECT_EQ(names, (std::vector<std::string>{"q in", "k in", "v in", "o in", "lse in", "d_o in", "dq out", "dk out", "dv out", "bias in"}));
  EXPECT_EQ(specs[5].role, ATTNBENCH_ROLE_D_O);
  EXPECT_EQ(specs[5].shape, (Tensor::Shape{1, 4, 3, 4}));
  EXPECT_EQ(specs[5].strides, layout_strides({1, 4, 3, 4}, Layout::bshd));
  EXPECT_EQ(specs[7].role, ATTNBENCH_ROLE_DK);
  EXPECT_EQ(specs[7].shape, (Tensor::Shape{1, 2, 5, 8}));
  EXPECT_EQ(specs[7].dtype, (DlType{ATTNBENCH_DL_FLOAT, 16, 1}));
  EXPECT_EQ(specs[4].ndim, 3);
  EXPECT_EQ(plan_tensors(p, Layout::bhsd, false).size(), specs.size() - 1);  // no lse
  const AbiCall abi(describe_call(p), specs, nullptr);
  EXPECT_EQ(abi.call().operation, ATTNBENCH_OP_BACKWARD);
  EXPECT_DOUBLE_EQ(abi.call().dropout_p, 0.25);
  EXPECT_EQ(attnbench_call_tensor(&abi.call(), ATTNBENCH_ROLE_KEEP), nullptr);
  EXPECT_NE(attnbench_call_tensor(&abi.call(), ATTNBENCH_ROLE_DV), nullptr);

  const CaseInputs in = generate_inputs(p);
  Problem forward = p;
  forward.operation = Operation::forward;
  const Tensor o = make_output(forward), lse = make_lse(forward), d_o = generate_d_o(p);
  Gradients g = make_gradients(p);
  const RunArgs args{p, in, RoleTensors::backward(in, d_o, g.dq, g.dk, g.dv, &o, &lse), {}};
  const std::vector<Item> items = call_items(specs, args);
  ASSERT_EQ(items.size(), specs.size());
  EXPECT_EQ(items[5].source, reinterpret_cast<const std::byte*>(d_o.data()));
  EXPECT_EQ(items[5].destination, nullptr);
  EXPECT_EQ(items[7].destination, static_cast<std::byte*>(g.dk.data()));
  // dV through the arena (BSHD there, BHSD here), written but for key 3's row of kv head 1.
  std::vector<std::byte> arena(item_bytes(items[8]));
  copy_in(items[8], arena.data());
  copy_out(items[8], arena.data());
  EXPECT_EQ(unwritten_output(g.dv, Role::dv, "dv"),
            "dv not written (still poison): 40 element(s) in 10 row(s), first at b=0 h=0 j=0 c=0; rows b=0 h=0 j=0, b=0 h=0 j=1, "
            "b=0 h=0 j=2, b=0 h=0 j=3 and 6 more");
  for (std::int64_t e = 0; e < g.dv.numel(); ++e)
    if (e / p.d_v != (1 * p.n_k + 3)) g.dv.set(e, 0.5);
  EXPECT_EQ(unwritten_output(g.dv, Role::dv, "dv"),
            "dv not written (still poison): 4 element(s) in 1 row(s), first at b=0 h=1 j=3 c=0; rows b=0 h=1 j=3");
  // A plan the run's tensors do not match is the harness's own error, not the plugin's.
  const RunArgs forward_args{p, in, RoleTensors::forward(in, g.dq), {}};
  EXPECT_THROW(call_items(specs, forward_args), std::logic_error);
}

// What loading a description says when it is refused; "accepted" when it is not.
std::string refused(const attnbench_plugin_v2& bad) {
  try {
    read_plugin_info(bad, "/x.so");
  } catch (const std::runtime_error& e) {
    return std::string(e.what());
  }
  return "accepted";
}

TEST(PluginAbi, LayoutStridesInElements) {
  const Tensor::Shape s{2, 3, 5, 7};  // b, h, s, d
  EXPECT_EQ(layout_strides(s, Layout::bhsd), (Strides{105, 35, 7, 1}));
  EXPECT_EQ(layout_strides(s, Layout::bshd), (Strides{105, 7, 21, 1}));
  EXPECT_EQ(storage_elements(s, layout_strides(s, Layout::bshd)), 210);
  EXPECT_EQ(layout_strides(s, Layout::strided), (Strides{3 * 55 + 7, 55, 10, 1}));
  EXPECT_EQ(declared_layouts(ATTNBENCH_ACCEPTS_BSHD), std::vector<Layout>{Layout::bshd});
  EXPECT_EQ(declared_layouts(ATTNBENCH_ACCEPTS_BSHD | ATTNBENCH_ACCEPTS_BHSD), (std::vector<Layout>{Layout::bhsd, Layout::bshd}));
  EXPECT_EQ(declared_layouts(ATTNBENCH_ACCEPTS_STRIDED), std::vector<Layout>{Layout::strided});
  EXPECT_TRUE(declared_layouts(0).empty());
}

TEST(PluginAbi, BroadcastDimensionsGetStrideZero) {
  const Problem p = parse_problem("b=2 hq=3 hkv=3 nq=4 nk=5 dk=8 dv=8 dtype=f32 causal=none regime=diffuse seed=0");
  EXPECT_EQ(broadcast_strides(p, Broadcast::shared), (Strides{0, 0, 5, 1}));
  EXPECT_EQ(broadcast_strides(p, Broadcast::per_batch), (Strides{20, 0, 5, 1}));
  EXPECT_EQ(broadcast_strides(p, Broadcast::per_head), (Strides{0, 20, 5, 1}));
  EXPECT_EQ(broadcast_strides(p, Broadcast::per_batch_head), (Strides{60, 20, 5, 1}));
  EXPECT_EQ(storage_elements({2, 3, 4, 5}, broadcast_strides(p, Broadcast::per_head)), 60);
}

TEST(PluginAbi, DtypesAreDlpacks) {
  for (DType d : {DType::f64, DType::f32, DType::f16, DType::bf16}) EXPECT_EQ(dtype_from_dl(to_dl(d)), d);
  EXPECT_EQ(to_dl(DType::bf16), (DlType{4, 16, 1}));  // kDLBfloat
  EXPECT_EQ(to_dl(DType::f16), (DlType{2, 16, 1}));   // kDLFloat
  EXPECT_FALSE(dtype_from_dl(dl_bool));
  EXPECT_FALSE(dtype_from_dl({ATTNBENCH_DL_FLOAT8_E4M3FN, 8, 1}));
  // DLPack 1.x's codes, fp8 included.
  EXPECT_EQ(ATTNBENCH_DL_BOOL, 6);
  EXPECT_EQ(ATTNBENCH_DL_FLOAT8_E4M3FN, 10);
  EXPECT_EQ(ATTNBENCH_DL_FLOAT8_E5M2, 12);
  EXPECT_EQ(ATTNBENCH_DL_FLOAT4_E2M1FN, 17);
  EXPECT_EQ(dl_name({ATTNBENCH_DL_FLOAT8_E4M3FN, 8, 1}), "fp8_e4m3fn");
  EXPECT_EQ(dl_name({ATTNBENCH_DL_INT, 32, 1}), "int32");
  EXPECT_EQ(dl_bytes({ATTNBENCH_DL_FLOAT4_E2M1FN, 4, 1}), 1u);
  EXPECT_EQ(role_name(ATTNBENCH_ROLE_D_O), "d_o");
  EXPECT_EQ(role_name(ATTNBENCH_ROLE_BLOCK_TABLE), "block_table");
}

TEST(PluginAbi, CapabilitiesDecideSupportWithAReason) {
  const PluginInfo info = read_plugin_info(description(), "/x.so");
  const Capabilities caps = to_capabilities(info);
  EXPECT_EQ(caps.dtypes, (std::vector<DType>{DType::f32, DType::f16}));
  EXPECT_TRUE(caps.returns_lse);
  EXPECT_EQ(caps.device, "cpu");
  EXPECT_TRUE(check_capabilities(info, parse_problem("b=1 hq=2 hkv=2 nq=3 nk=3 dk=16 dv=16 dtype=f32 causal=top_left regime=diffuse seed=0")).ok);
  auto reason = [&](const char* repro) { return check_capabilities(info, parse_problem(repro)).reason; };
  EXPECT_EQ(reason("b=1 hq=1 hkv=1 nq=3 nk=3 dk=16 dv=16 dtype=f64 causal=none regime=diffuse seed=0"), "dtype f64 not declared");
  EXPECT_EQ(reason("b=1 hq=1 hkv=1 nq=3 nk=3 dk=8 dv=8 dtype=f32 causal=none regime=diffuse seed=0"), "head dim d_k=8 not declared (declared: 16 to 128)");
  EXPECT_EQ(reason("b=1 hq=1 hkv=1 nq=3 nk=3 dk=16 dv=32 dtype=f32 causal=none regime=diffuse seed=0"), "d_k != d_v not declared");
  EXPECT_EQ(reason("b=1 hq=2 hkv=1 nq=3 nk=3 dk=16 dv=16 dtype=f32 causal=none regime=diffuse seed=0"), "GQA/MQA (h_kv < h_q) not declared");
  EXPECT_EQ(reason("b=1 hq=1 hkv=1 nq=3 nk=3 dk=16 dv=16 dtype=f32 causal=bottom_right regime=diffuse seed=0"), "causal bottom-right mask not declared");
  EXPECT_EQ(reason("b=1 hq=1 hkv=1 nq=3 nk=3 dk=16 dv=16 dtype=f32 causal=none bias=1@shared regime=diffuse seed=0"), "additive bias not declared");
  // A dtype counts only when q, k, v and o all take it.
  attnbench_plugin_v2 d = description();
  const attnbench_role_dtype q_only[] = {{ATTNBENCH_ROLE_DATA, {ATTNBENCH_DL_FLOAT, 32, 1}}, {ATTNBENCH_ROLE_Q, {ATTNBENCH_DL_FLOAT, 64, 1}},
                                         {ATTNBENCH_ROLE_K, {ATTNBENCH_DL_FLOAT8_E4M3FN, 8, 1}}};
  d.capabilities.dtypes = q_only;
  d.capabilities.dtype_count = 3;
  EXPECT_EQ(read_plugin_info(d, "/x.so").data_dtypes(), std::vector<DType>{DType::f32});
  EXPECT_TRUE(read_plugin_info(d, "/x.so").accepts(ATTNBENCH_ROLE_K, {ATTNBENCH_DL_FLOAT8_E4M3FN, 8, 1}));
  // Declarations version 1 had no field for.
  d.capabilities.features |= ATTNBENCH_FEATURE_MASKED_NONFINITE_SAFE;
  d.capabilities.matmul_unit_roundoff = 1.0 / 2048;
  const Capabilities more = to_capabilities(read_plugin_info(d, "/x.so"));
  EXPECT_TRUE(more.masked_nonfinite_safe);
  EXPECT_EQ(more.matmul_precision, MatmulPrecision::tf32);
  d.capabilities.matmul_unit_roundoff = 1.0 / 1000;  // no arithmetic attnbench knows: refused at load, named
  EXPECT_NE(refused(d).find("capabilities.matmul_unit_roundoff: matmul unit roundoff 0.001: expected 0"), std::string::npos) << refused(d);
  d.capabilities.matmul_unit_roundoff = 0;
  // An f16 accumulator (11 significand bits): judged at 2^-11, the products untouched; the pass
  // rule takes the coarser of the two, and it survives the worker's JSON.
  d.capabilities.accumulation_bits = 11;
  const PluginInfo accumulating = read_plugin_info(d, "/x.so");
  EXPECT_EQ(to_capabilities(accumulating).accumulation_precision, MatmulPrecision::tf32);
  EXPECT_EQ(to_capabilities(accumulating).matmul_precision, MatmulPrecision::working);
  EXPECT_EQ(to_capabilities(accumulating).judged_precision(), MatmulPrecision::tf32);
  EXPECT_EQ(nlohmann::json(accumulating).get<PluginInfo>().accumulation_precision, MatmulPrecision::tf32);
  d.capabilities.accumulation_bits = 5;
  EXPECT_NE(refused(d).find("capabilities.accumulation_bits 5: expected 0"), std::string::npos) << refused(d);
  d.capabilities.accumulation_bits = 0;
  d.capabilities.operations = ATTNBENCH_OP_BIT(ATTNBENCH_OP_BACKWARD);
  EXPECT_EQ(check_capabilities(read_plugin_info(d, "/x.so"), parse_problem("b=1 hq=1 hkv=1 nq=3 nk=3 dk=16 dv=16 dtype=f32 causal=none regime=diffuse seed=0")).reason,
            "operation forward not declared (declared: backward)");
  // A declared backward reaches Capabilities and is handed over; an undeclared one is refused.
  const Problem backward = parse_problem("b=1 hq=1 hkv=1 nq=3 nk=3 dk=16 dv=16 dtype=f32 causal=none regime=diffuse seed=0 op=backward");
  d.capabilities.operations = ATTNBENCH_OP_BIT(ATTNBENCH_OP_FORWARD);
  EXPECT_EQ(check_capabilities(read_plugin_info(d, "/x.so"), backward).reason, "operation backward not declared (declared: forward)");
  d.capabilities.operations = ATTNBENCH_OP_BIT(ATTNBENCH_OP_FORWARD) | ATTNBENCH_OP_BIT(ATTNBENCH_OP_BACKWARD);
  const PluginInfo both = read_plugin_info(d, "/x.so");
  EXPECT_EQ(to_capabilities(both).operations, (std::vector<Operation>{Operation::forward, Operation::backward}));
  EXPECT_TRUE(check_capabilities(both, backward).ok) << check_capabilities(both, backward).reason;
  EXPECT_EQ(describe_call(backward).operation, ATTNBENCH_OP_BACKWARD);  // from the problem, not a constant
}

TEST(PluginAbi, DescriptionIsCheckedAndSurvivesJson) {
  attnbench_plugin_v2 d = description();
  const PluginInfo info = read_plugin_info(d, "/x.so");
  const PluginInfo back = nlohmann::json(info).get<PluginInfo>();
  EXPECT_EQ(back.name, "test");
  EXPECT_EQ(back.abi_version, 2u);
  EXPECT_EQ(back.layouts, ATTNBENCH_ACCEPTS_BSHD);
  EXPECT_EQ(back.features, info.features);
  EXPECT_EQ(back.dtypes, info.dtypes);
  EXPECT_EQ(back.min_head_dim, 16);
  EXPECT_TRUE(back.has(ATTNBENCH_FEATURE_LSE));
  EXPECT_FALSE(back.cuda);
  d.capabilities.device_type = 7;
  EXPECT_EQ(refused(d), "capabilities.device_type 7 is neither CPU (1) nor CUDA (2)");
  d = description();
  d.run = nullptr;
  EXPECT_EQ(refused(d), "its description has no run function");
  d = description();
  d.capabilities.dtype_count = 0;
  EXPECT_EQ(refused(d), "capabilities.dtypes declares no f64, f32, f16 or bf16 for all of q, k, v and o");
  d = description();
  d.capabilities.min_head_dim = 64;
  d.capabilities.max_head_dim = 32;
  EXPECT_EQ(refused(d), "capabilities: head dims [64, 32] is empty and no list is given");
  d = description();
  d.struct_size = 16;
  EXPECT_NE(refused(d).find("struct_size is 16"), std::string::npos);
  d = description();
  d.capabilities.operations = 0;
  EXPECT_EQ(refused(d), "capabilities.operations declares no operation");
}

// A version 1 plugin through the shim: what it declared means the same, and each version 2 call
// reaches its run() as the version 1 problem and views it was written for.
struct SeenByV1 {
  attnbench_problem problem{};
  attnbench_tensor q{}, out{}, lse{};
  bool had_mask = false, had_bias = false;
};
SeenByV1 seen;
int v1_run(const attnbench_problem* p, const attnbench_tensor* q, const attnbench_tensor*, const attnbench_tensor*, const attnbench_tensor* out,
           const attnbench_tensor* lse, const attnbench_tensor* mask, const attnbench_tensor* bias, char* error, size_t error_len) {
  seen.problem = *p;
  seen.q = *q;
  seen.out = *out;
  if (lse != nullptr) seen.lse = *lse;
  seen.had_mask = mask != nullptr;
  seen.had_bias = bias != nullptr;
  std::snprintf(error, error_len, "v1 says hello");
  return 5;
}
int v1_supports(const attnbench_problem* p, char* why, size_t why_len) {
  std::snprintf(why, why_len, "n_q=%lld", static_cast<long long>(p->n_q));
  return p->n_q < 4;
}

TEST(PluginAbiV1Shim, CapabilitiesMeanTheSame) {
  static const int32_t dims[] = {32, 64};
  attnbench_plugin_v1 v1{};
  v1.abi_version = 1;
  v1.name = "old";
  v1.version = "1";
  v1.description = "from before version 2";
  v1.capabilities.dtypes = ATTNBENCH_DTYPE_BIT(ATTNBENCH_DTYPE_F32) | ATTNBENCH_DTYPE_BIT(ATTNBENCH_DTYPE_BF16);
  v1.capabilities.layouts = ATTNBENCH_LAYOUT_BHSD | ATTNBENCH_LAYOUT_STRIDED;
  v1.capabilities.masks = ATTNBENCH_MASK_CAUSAL_BOTTOM_RIGHT | ATTNBENCH_MASK_PADDING_PER_QUERY | ATTNBENCH_MASK_BIAS;
  v1.capabilities.fully_masked_policy = ATTNBENCH_FULLY_MASKED_NAN;
  v1.capabilities.head_dims = dims;
  v1.capabilities.head_dim_count = 2;
  v1.capabilities.gqa = 1;
  v1.capabilities.returns_lse = 1;
  v1.capabilities.device_type = ATTNBENCH_DEVICE_HOST;
  v1.run = v1_run;
  v1.supports = v1_supports;
  const V1Shim shim(v1);
  const PluginInfo info = read_plugin_info(shim.plugin(), "/old.so");
  EXPECT_EQ(info.abi_version, 1u);
  EXPECT_EQ(info.name, "old");
  EXPECT_TRUE(info.has_supports);
  const Capabilities caps = to_capabilities(info);
  EXPECT_EQ(caps.dtypes, (std::vector<DType>{DType::f32, DType::bf16}));
  EXPECT_EQ(caps.layouts, (std::vector<Layout>{Layout::bhsd, Layout::strided}));
  EXPECT_FALSE(caps.masks.causal_top_left);
  EXPECT_TRUE(caps.masks.causal_bottom_right);
  EXPECT_FALSE(caps.masks.padding_per_batch);
  EXPECT_TRUE(caps.masks.padding_per_query);
  EXPECT_FALSE(caps.masks.bool_mask);
  EXPECT_TRUE(caps.masks.bias);
  EXPECT_TRUE(caps.gqa);
  EXPECT_FALSE(caps.different_dk_dv);
  EXPECT_TRUE(caps.returns_lse);
  EXPECT_FALSE(caps.deterministic);
  EXPECT_EQ(caps.fully_masked, FullyMaskedPolicy::nan);
  EXPECT_EQ(caps.head_dims, (std::vector<std::int64_t>{32, 64}));

  // A call: the window back as version 1's causal, the LSE 4-D again, the status and message through.
  const Problem p = parse_problem("b=1 hq=2 hkv=1 nq=5 nk=7 dk=32 dv=32 dtype=bf16 causal=bottom_right bias=1@h regime=diffuse seed=0");
  AbiCall abi(describe_call(p), plan_tensors(p, Layout::strided, true), shim.plugin().context);
  float fake[1];
  for (std::int32_t role : {ATTNBENCH_ROLE_Q, ATTNBENCH_ROLE_K, ATTNBENCH_ROLE_V, ATTNBENCH_ROLE_O, ATTNBENCH_ROLE_LSE, ATTNBENCH_ROLE_BIAS})
    abi.tensor(role)->data = fake;
  char error[64] = {};
  EXPECT_EQ(shim.plugin().run(&abi.call(), error, sizeof error), 5);
  EXPECT_STREQ(error, "v1 says hello");
  EXPECT_EQ(seen.problem.struct_size, sizeof(attnbench_problem));
  EXPECT_EQ(seen.problem.dtype, ATTNBENCH_DTYPE_BF16);
  EXPECT_EQ(seen.problem.causal, ATTNBENCH_CAUSAL_BOTTOM_RIGHT);
  EXPECT_EQ(seen.problem.padding, ATTNBENCH_PADDING_NONE);
  EXPECT_EQ(seen.problem.n_k, 7);
  EXPECT_DOUBLE_EQ(seen.problem.scale, p.effective_scale());
  EXPECT_EQ(seen.problem.has_bool_mask, 0);
  EXPECT_EQ(seen.problem.has_bias, 1);
  EXPECT_TRUE(seen.had_bias);
  EXPECT_FALSE(seen.had_mask);
  EXPECT_EQ(seen.q.dtype, ATTNBENCH_DTYPE_BF16);
  EXPECT_EQ(seen.q.device_type, ATTNBENCH_DEVICE_HOST);
  EXPECT_EQ(seen.q.ndim, 4);
  EXPECT_EQ(seen.q.strides[2], 32 + 3);  // the strided layout's gaps reach it unchanged
  EXPECT_EQ(seen.lse.ndim, 4);
  EXPECT_EQ(seen.lse.shape[3], 1);
  EXPECT_EQ(seen.lse.dtype, ATTNBENCH_DTYPE_F32);
  EXPECT_EQ(seen.out.data, fake);
  // supports() gets the same problem.
  char why[32] = {};
  EXPECT_EQ(shim.plugin().supports(&abi.call(), why, sizeof why), 0);
  EXPECT_STREQ(why, "n_q=5");
  // What version 1 cannot say is refused, never passed on wrong.
  abi.call().window.left = 3;
  EXPECT_NE(shim.plugin().run(&abi.call(), error, sizeof error), 0);
  EXPECT_NE(std::string(error).find("ABI version 1 cannot express a sliding window"), std::string::npos);
  abi.call().window.left = ATTNBENCH_WINDOW_UNBOUNDED;
  abi.call().dropout_p = 0.1;
  EXPECT_NE(shim.plugin().run(&abi.call(), error, sizeof error), 0);
  EXPECT_NE(std::string(error).find("dropout"), std::string::npos) << error;
  abi.call().dropout_p = 0;
  abi.call().operation = ATTNBENCH_OP_BACKWARD;
  EXPECT_EQ(shim.plugin().supports(&abi.call(), why, sizeof why), 0);
}

// Names key results everywhere: the ABI's alphabet only, and a built-in's name is reserved.
TEST(PluginAbi, NamesUseTheDocumentedAlphabet) {
  attnbench_plugin_v2 d = description();
  for (const char* good : {"c_cpu_reference", "flash-attn.v2", "K9"}) {
    d.name = good;
    EXPECT_NO_THROW(read_plugin_info(d, "/x.so")) << good;
  }
  for (const char* bad : {"a/b", "has space", "files:x", "quote\"", "tab\t"}) {
    d.name = bad;
    EXPECT_THROW(read_plugin_info(d, "/x.so"), std::runtime_error) << bad;
  }
  const std::string long_name(65, 'a');
  d.name = long_name.c_str();
  EXPECT_THROW(read_plugin_info(d, "/x.so"), std::runtime_error);
}

TEST(PluginAbi, EveryBuiltInNameIsReserved) {
  Registry registry;
  register_builtin_implementations(registry);
  const auto& reserved = builtin_implementation_names();
  for (const auto& name : registry.names())
    EXPECT_NE(std::find(reserved.begin(), reserved.end(), name), reserved.end()) << name << " is built in but not reserved";
  EXPECT_NE(std::find(reserved.begin(), reserved.end(), "cuda_fused"), reserved.end());  // reserved in a CPU-only build too
}

TEST(WorkerProcess, MemorySizesParseAndPrint) {
  EXPECT_EQ(parse_byte_size("1073741824"), std::uint64_t(1) << 30);
  EXPECT_EQ(parse_byte_size("512M"), std::uint64_t(512) << 20);
  EXPECT_EQ(parse_byte_size("8G"), std::uint64_t(8) << 30);
  EXPECT_EQ(parse_byte_size("8GiB"), std::uint64_t(8) << 30);
  EXPECT_EQ(parse_byte_size("1.5g"), std::uint64_t(3) << 29);
  EXPECT_EQ(parse_byte_size("2T"), std::uint64_t(2) << 40);
  EXPECT_EQ(parse_byte_size("none"), std::uint64_t(0));
  EXPECT_EQ(parse_byte_size("0"), std::uint64_t(0));
  for (const char* bad : {"", "banana", "-1G", "8X", "8GG", "nan", "1e30"}) EXPECT_EQ(parse_byte_size(bad), std::nullopt) << bad;
  EXPECT_EQ(format_bytes(std::uint64_t(1) << 30), "1 GiB");
  EXPECT_EQ(format_bytes(std::uint64_t(3) << 29), "1.5 GiB");
  EXPECT_EQ(format_bytes(100), "100 bytes");
  const DefaultMemoryLimit d = default_memory_limit();
  EXPECT_GT(d.bytes, std::uint64_t(0));
  EXPECT_NE(d.basis.find("half of the"), std::string::npos) << d.basis;
}

// What a plugin starts is found below the process that started it, and killed with it.
TEST(WorkerProcess, ATreeIsFoundAndKilledWhole) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    setpgid(0, 0);
    if (fork() == 0) {
      setsid();  // out of the group: found as a descendant all the same
      pause();
      _exit(0);
    }
    pause();
    _exit(0);
  }
  std::vector<pid_t> below;
  for (int i = 0; i < 500 && below.size() < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    below = descendants_of(child);
  }
  ASSERT_EQ(below.size(), 1u);
  const pid_t grandchild = below[0];
  EXPECT_EQ(children_of(getpid()).size() >= 1, true);
  EXPECT_NE(describe_process(grandchild).find(std::to_string(grandchild)), std::string::npos);
  kill_process_tree(child);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status));
  // The grandchild was killed too: it is gone (or a zombie awaiting its new parent) at once.
  bool gone = false;
  for (int i = 0; i < 500 && !gone; ++i) {
    gone = ::kill(grandchild, 0) != 0;
    if (!gone) {
      std::ifstream stat("/proc/" + std::to_string(grandchild) + "/stat");
      std::string text;
      std::getline(stat, text);
      const auto close = text.rfind(')');
      gone = close != std::string::npos && close + 2 < text.size() && text[close + 2] == 'Z';
    }
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_TRUE(gone);
}

TEST(GuardedArena, BuffersEndAtAGuardPage) {
  const ArenaLayout l = ArenaLayout::plan({{"q", 0, 100, 0, 4}, {"out", 0, 8192, 0, 4}}, 4096);
  ASSERT_EQ(l.buffers.size(), 2u);
  ASSERT_EQ(l.guards.size(), 3u);
  for (std::size_t i = 0; i < 2; ++i) EXPECT_EQ(l.buffers[i].offset + l.buffers[i].bytes, l.guards[i + 1]);
  EXPECT_EQ(l.buffers[0].slack, 4096u - 100u);
  EXPECT_EQ(l.buffers[1].slack, 0u);
  EXPECT_EQ(l.total, l.guards.back() + 4096);
  const ArenaLayout back = nlohmann::json(l).get<ArenaLayout>();
  EXPECT_EQ(back.guards, l.guards);
  EXPECT_EQ(back.buffers[1].offset, l.buffers[1].offset);
}

TEST(GuardedArena, FaultsNameTheBufferAndTheDistance) {
  const ArenaLayout l = ArenaLayout::plan({{"q", 0, 100, 0, 4}, {"out", 0, 64, 0, 4}}, 4096);
  const std::size_t out_end = l.buffers[1].offset + 64;
  EXPECT_EQ(*l.describe_fault(out_end, 2),
            "wrote past the end of out: guard page hit at byte offset +0 after its last element (4-byte elements: element index 16 of a "
            "16-element buffer)");
  EXPECT_NE(l.describe_fault(l.buffers[0].offset + 100 + 8, 1)->find("read past the end of q: guard page hit at byte offset +8"),
            std::string::npos);
  // The guard page before out's page, nearer its start than q's end.
  EXPECT_NE(l.describe_fault(l.guards[1] + 4095, 2)->find("wrote before the start of out"), std::string::npos);
  EXPECT_FALSE(l.describe_fault(l.buffers[1].offset, 2).has_value());
}

TEST(GuardedArena, CanariesBeforeABufferAreChecked) {
  SharedArena arena(ArenaLayout::plan({{"out", 0, 40, 0, 4}}, std::size_t(sysconf(_SC_PAGESIZE))));
  const ArenaBuffer& out = arena.layout().buffer("out");
  EXPECT_FALSE(arena.layout().check_slack(arena.base(), out).has_value());
  EXPECT_EQ(arena.status().fault.magic, 0u);
  arena.data(out)[-3] = std::byte{0};
  EXPECT_EQ(*arena.layout().check_slack(arena.base(), out),
            "wrote before the start of out: canary byte 3 bytes before its first element changed (0x00)");
}

TEST(WorkerChannel, MessagesAndADescriptorCrossASocket) {
  int s[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, s), 0);
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  const std::string big(100000, 'x');  // longer than one socket buffer fill
  std::string received;
  int fd = -1;
  std::thread sender([&] { EXPECT_TRUE(send_message(s[0], big, p[1])); });
  EXPECT_EQ(receive_message(s[1], 5000, received, &fd), Received::message);
  sender.join();
  EXPECT_EQ(received, big);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "ok", 2), 2);  // the passed descriptor is the pipe's write end
  char buffer[2];
  ASSERT_EQ(read(p[0], buffer, 2), 2);
  EXPECT_EQ(std::string(buffer, 2), "ok");
  EXPECT_EQ(receive_message(s[1], 10, received), Received::timed_out);
  close(s[0]);
  EXPECT_EQ(receive_message(s[1], 1000, received), Received::closed);
  EXPECT_FALSE(send_message(s[1], "to nobody"));  // no SIGPIPE: an error return
  for (int f : {fd, p[0], p[1], s[1]}) close(f);
}

TEST(PluginAbi, SignalsAreNamed) {
  EXPECT_EQ(signal_description(SIGSEGV), "SIGSEGV (segmentation fault)");
  EXPECT_EQ(signal_description(SIGABRT), "SIGABRT (abort)");
}

}  // namespace
}  // namespace attn::plugin
