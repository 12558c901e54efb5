// The plugin ABI's harness side without a worker: a problem as the C struct, the layouts'
// strides, broadcast strides of the mask and bias, capabilities and support, the description's
// checks and reserved names, the guarded arena's plan and fault descriptions, the message channel,
// and the worker's process tree and memory sizes.
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

#include "impls/plugin/guarded_arena.hpp"
#include "impls/plugin/plugin_abi.hpp"
#include "impls/plugin/worker_channel.hpp"
#include "impls/plugin/worker_process.hpp"
#include "impls/registry.hpp"

namespace attn::plugin {
namespace {

int dummy_run(const attnbench_problem*, const attnbench_tensor*, const attnbench_tensor*, const attnbench_tensor*, const attnbench_tensor*,
              const attnbench_tensor*, const attnbench_tensor*, const attnbench_tensor*, char*, size_t) {
  return 0;
}

attnbench_plugin_v1 description() {
  attnbench_plugin_v1 d{};
  d.abi_version = ATTNBENCH_PLUGIN_ABI_VERSION;
  d.name = "test";
  d.version = "0.1";
  d.description = "a description";
  d.capabilities.dtypes = ATTNBENCH_DTYPE_BIT(ATTNBENCH_DTYPE_F32) | ATTNBENCH_DTYPE_BIT(ATTNBENCH_DTYPE_F16);
  d.capabilities.layouts = ATTNBENCH_LAYOUT_BSHD;
  d.capabilities.masks = ATTNBENCH_MASK_CAUSAL_TOP_LEFT | ATTNBENCH_MASK_BOOL;
  d.capabilities.min_head_dim = 16;
  d.capabilities.max_head_dim = 128;
  d.capabilities.returns_lse = 1;
  d.capabilities.device_type = ATTNBENCH_DEVICE_HOST;
  d.run = dummy_run;
  return d;
}

TEST(PluginAbi, ProblemBecomesTheCStruct) {
  const Problem p = parse_problem("b=2 hq=4 hkv=2 nq=5 nk=7 dk=16 dv=24 dtype=f16 causal=bottom_right pad=3,7 regime=diffuse seed=9");
  const attnbench_problem a = to_abi(p);
  EXPECT_EQ(a.struct_size, sizeof(attnbench_problem));
  EXPECT_EQ(a.dtype, ATTNBENCH_DTYPE_F16);
  EXPECT_EQ(a.batch, 2);
  EXPECT_EQ(a.h_q, 4);
  EXPECT_EQ(a.h_kv, 2);
  EXPECT_EQ(a.n_q, 5);
  EXPECT_EQ(a.n_k, 7);
  EXPECT_EQ(a.d_k, 16);
  EXPECT_EQ(a.d_v, 24);
  EXPECT_DOUBLE_EQ(a.scale, 0.25);
  EXPECT_EQ(a.causal, ATTNBENCH_CAUSAL_BOTTOM_RIGHT);
  EXPECT_EQ(a.padding, ATTNBENCH_PADDING_PER_BATCH);
  ASSERT_EQ(a.valid_len_count, 2);
  EXPECT_EQ(a.valid_len, p.padding.valid_len.data());
  EXPECT_EQ(a.valid_len[0], 3);
  EXPECT_EQ(a.has_bool_mask, 0);
  EXPECT_EQ(a.has_bias, 0);
  EXPECT_EQ(a.cuda_stream, nullptr);
}

TEST(PluginAbi, ExplicitScaleAndMasksCarryOver) {
  const Problem p = parse_problem("b=1 hq=2 hkv=2 nq=3 nk=3 dk=8 dv=8 dtype=f32 causal=none scale=0.5 bool=0.5@h bias=1@shared regime=diffuse seed=0");
  const attnbench_problem a = to_abi(p);
  EXPECT_DOUBLE_EQ(a.scale, 0.5);
  EXPECT_EQ(a.has_bool_mask, 1);
  EXPECT_EQ(a.has_bias, 1);
  EXPECT_EQ(a.padding, ATTNBENCH_PADDING_NONE);
  EXPECT_EQ(a.valid_len, nullptr);
}

TEST(PluginAbi, LayoutStridesInElements) {
  const Tensor::Shape s{2, 3, 5, 7};  // b, h, s, d
  EXPECT_EQ(layout_strides(s, Layout::bhsd), (Strides{105, 35, 7, 1}));
  EXPECT_EQ(layout_strides(s, Layout::bshd), (Strides{105, 7, 21, 1}));
  EXPECT_EQ(storage_elements(s, layout_strides(s, Layout::bshd)), 210);
  EXPECT_EQ(layout_strides(s, Layout::strided), (Strides{3 * 55 + 7, 55, 10, 1}));
  EXPECT_EQ(declared_layouts(ATTNBENCH_LAYOUT_BSHD), std::vector<Layout>{Layout::bshd});
  EXPECT_EQ(declared_layouts(ATTNBENCH_LAYOUT_BSHD | ATTNBENCH_LAYOUT_BHSD), (std::vector<Layout>{Layout::bhsd, Layout::bshd}));
  EXPECT_EQ(declared_layouts(ATTNBENCH_LAYOUT_STRIDED), std::vector<Layout>{Layout::strided});
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

TEST(PluginAbi, DtypeCodesRoundTrip) {
  for (DType d : {DType::f64, DType::f32, DType::f16, DType::bf16}) EXPECT_EQ(dtype_from_abi(to_abi(d)), d);
  EXPECT_THROW(dtype_from_abi(ATTNBENCH_DTYPE_BOOL), std::invalid_argument);
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
}

TEST(PluginAbi, DescriptionIsCheckedAndSurvivesJson) {
  attnbench_plugin_v1 d = description();
  const PluginInfo info = read_plugin_info(d, "/x.so");
  const PluginInfo back = nlohmann::json(info).get<PluginInfo>();
  EXPECT_EQ(back.name, "test");
  EXPECT_EQ(back.layouts, ATTNBENCH_LAYOUT_BSHD);
  EXPECT_EQ(back.min_head_dim, 16);
  EXPECT_TRUE(back.returns_lse);
  EXPECT_FALSE(back.cuda);
  d.capabilities.device_type = 7;
  EXPECT_THROW(read_plugin_info(d, "/x.so"), std::runtime_error);
  d = description();
  d.run = nullptr;
  EXPECT_THROW(read_plugin_info(d, "/x.so"), std::runtime_error);
  d = description();
  d.capabilities.dtypes = 0;
  EXPECT_THROW(read_plugin_info(d, "/x.so"), std::runtime_error);
  d = description();
  d.capabilities.min_head_dim = 64;
  d.capabilities.max_head_dim = 32;
  EXPECT_THROW(read_plugin_info(d, "/x.so"), std::runtime_error);
}

// Names key results everywhere: the ABI's alphabet only, and a built-in's name is reserved.
TEST(PluginAbi, NamesUseTheDocumentedAlphabet) {
  attnbench_plugin_v1 d = description();
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
