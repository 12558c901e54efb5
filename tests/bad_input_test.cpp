// Bad input that must not do damage: result paths that are not regular files (core/result_file),
// and problems too large for the machine (core/memory, verification/verify case_memory).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "core/problem.hpp"
#include "core/result_file.hpp"
#include "impls/registry.hpp"
#include "verification/verify.hpp"
#include "reports/verify_report.hpp"

namespace attn {
namespace {

namespace fs = std::filesystem;

std::string read(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class ResultFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("h19-bad-result-file-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // Nothing but the names given is left in the folder (no temporary file).
  void expect_only(std::initializer_list<const char*> names) {
    std::size_t count = 0;
    for (const auto& item : fs::directory_iterator(dir_)) {
      ++count;
      EXPECT_NE(std::find_if(names.begin(), names.end(), [&](const char* n) { return item.path().filename() == n; }), names.end())
          << "left behind: " << item.path();
    }
    EXPECT_EQ(count, names.size());
  }
  fs::path dir_;
};

TEST_F(ResultFile, CreatesAndReplacesRegularFiles) {
  write_result_file(dir_ / "sub" / "r.json", "first");
  EXPECT_EQ(read(dir_ / "sub" / "r.json"), "first");
  write_result_file(dir_ / "sub" / "r.json", "second");
  EXPECT_EQ(read(dir_ / "sub" / "r.json"), "second");
  write_result_file(dir_ / "empty", "");
  EXPECT_TRUE(fs::is_regular_file(dir_ / "empty"));
  EXPECT_EQ(fs::file_size(dir_ / "empty"), 0u);
  expect_only({"sub", "empty"});
}

TEST_F(ResultFile, RefusesWhatIsNotARegularFileAndLeavesIt) {
  std::ofstream(dir_ / "target") << "kept";
  fs::create_symlink("target", dir_ / "file_link");
  fs::create_symlink("/dev/null", dir_ / "device_link");
  ASSERT_EQ(::mkfifo((dir_ / "fifo").c_str(), 0600), 0);
  fs::create_directory(dir_ / "folder");
  const std::pair<const char*, const char*> refused[] = {
      {"file_link", "symbolic link"}, {"device_link", "symbolic link"}, {"fifo", "FIFO"}, {"folder", "directory"}};
  for (auto [name, kind] : refused) {
    SCOPED_TRACE(name);
    const fs::path path = dir_ / name;
    for (int writer = 0; writer < 2; ++writer) {
      try {
        if (writer == 0)
          write_result_file(path, "new", "--json");
        else
          prepare_result_path(path, "--json");
        ADD_FAILURE() << "not refused";
      } catch (const InputError& e) {
        const std::string message = e.what();
        EXPECT_NE(message.find("--json " + path.string()), std::string::npos) << message;
        EXPECT_NE(message.find(kind), std::string::npos) << message;
      }
    }
  }
  EXPECT_TRUE(fs::is_symlink(dir_ / "file_link"));
  EXPECT_EQ(fs::read_symlink(dir_ / "device_link"), "/dev/null");
  EXPECT_TRUE(fs::is_fifo(dir_ / "fifo"));
  EXPECT_TRUE(fs::is_directory(dir_ / "folder"));
  EXPECT_EQ(read(dir_ / "target"), "kept");
  expect_only({"target", "file_link", "device_link", "fifo", "folder"});
}

TEST_F(ResultFile, AFileOnThePathOrAnEmptyPathIsBadInput) {
  std::ofstream(dir_ / "plain") << "x";
  EXPECT_THROW(write_result_file(dir_ / "plain" / "r.json", "new"), InputError);
  EXPECT_THROW(prepare_result_path(dir_ / "plain" / "r.json"), InputError);
  EXPECT_THROW(prepare_result_dir(dir_ / "plain"), InputError);
  EXPECT_THROW(prepare_result_dir(dir_ / "plain" / "sub"), InputError);
  EXPECT_THROW(write_result_file("", "new"), InputError);
  EXPECT_THROW(prepare_result_path(dir_ / "new" / ""), InputError);  // "DIR/": a directory, not a file
  EXPECT_FALSE(fs::exists(dir_ / "new"));
  EXPECT_EQ(read(dir_ / "plain"), "x");
  prepare_result_dir(dir_ / "made" / "here");
  EXPECT_TRUE(fs::is_directory(dir_ / "made" / "here"));
  prepare_result_path(dir_ / "made" / "r.json");
  EXPECT_FALSE(fs::exists(dir_ / "made" / "r.json"));  // checked, not created
  expect_only({"plain", "made"});
}

// A results path that turns into a link while the run goes on: the saves during the run do not
// end it, and the last one puts the results beside the path and says where.
TEST_F(ResultFile, ARunWhosePathIsReplacedKeepsItsResults) {
  const fs::path path = dir_ / "r.json";
  ResultsFile file(path.string());
  file.save({{"cases", 1}});
  EXPECT_EQ(nlohmann::json::parse(read(path))["cases"], 1);
  fs::remove(path);
  fs::create_symlink("/dev/null", path);
  EXPECT_NO_THROW(file.save({{"cases", 2}}));
  const fs::path rescue = dir_ / ("r.json.rescued-" + std::to_string(::getpid()) + ".json");
  try {
    file.finish({{"cases", 3}});
    ADD_FAILURE() << "the final save into a link did not fail";
  } catch (const InputError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(path.string() + ": is a symbolic link"), std::string::npos) << message;
    EXPECT_NE(message.find("the results were saved to " + rescue.string() + " instead"), std::string::npos) << message;
  }
  EXPECT_EQ(nlohmann::json::parse(read(rescue))["cases"], 3);
  EXPECT_EQ(fs::read_symlink(path), "/dev/null");
  expect_only({"r.json", rescue.filename().c_str()});
}

Problem problem(const std::string& shape) {
  return parse_problem(shape + " dtype=f32 causal=none regime=diffuse seed=0");
}

// The estimate's parts, counted by hand for one small case.
TEST(CaseMemory, CountsInputsYardstickAndOutputs) {
  const Problem p = problem("b=2 hq=4 hkv=2 nq=8 nk=16 dk=32 dv=16");
  const CaseMemory m = case_memory(p, {});
  const double q = 2 * 4 * 8 * 32, k = 2 * 2 * 16 * 32, v = 2 * 2 * 16 * 16, o = 2 * 4 * 8 * 16, rows = 2 * 4 * 8;
  EXPECT_DOUBLE_EQ(m.inputs, 4 * (q + k + v));
  EXPECT_DOUBLE_EQ(m.yardstick, 4 * o + 4 * rows + 4 * (8 * 16 + 8 * 32 + 16 * (32 + 16) + 16));
  EXPECT_DOUBLE_EQ(m.outputs, 2 * (4 * o + 4 * rows));
  EXPECT_GT(m.reference, 8 * (q + k + v));
  EXPECT_EQ(m.workspace, 0);
  Registry registry;
  register_builtin_implementations(registry);
  const CaseMemory with_naive = case_memory(p, {}, {registry.find("cpu_naive")});
  EXPECT_GT(with_naive.workspace, 0);
  EXPECT_DOUBLE_EQ(with_naive.total(), m.total() + with_naive.workspace);
}

TEST(CaseMemory, AbsurdSizesGiveAFigureAndAreRefused) {
  // n_q = n_k = 2^31 with d = 16: the naive score matrix alone is 2^62 elements, past size_t in bytes.
  const Problem p = problem("b=1 hq=1 hkv=1 nq=2147483648 nk=2147483648 dk=16 dv=16");
  const CaseMemory m = case_memory(p, {});
  EXPECT_GE(m.yardstick, 4.0 * 2147483648.0 * 2147483648.0);
  EXPECT_TRUE(std::isfinite(m.total()));
  Registry registry;
  register_builtin_implementations(registry);
  try {
    check_case_memory(p, {}, registry.all());
    ADD_FAILURE() << "not refused";
  } catch (const InputError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("needs about 16 EiB"), std::string::npos) << message;
    EXPECT_NE(message.find(p.repro()), std::string::npos) << message;
    EXPECT_NE(message.find("is available here"), std::string::npos) << message;
  }
  // verify() refuses it before it runs anything.
  bool called = false;
  EXPECT_THROW(verify({registry.find("cpu_naive")}, {problem("b=1 hq=1 hkv=1 nq=4 nk=4 dk=8 dv=8"), p}, {},
                      [&](const VerifyRun&, const Record&) { called = true; }),
               InputError);
  EXPECT_FALSE(called);
  // A small case fits.
  EXPECT_NO_THROW(check_case_memory(problem("b=1 hq=1 hkv=1 nq=4 nk=4 dk=8 dv=8"), {}, registry.all()));
}

TEST(Memory, FormatsBytesAndKnowsWhatIsAvailable) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(64.0 * 1024 * 1024 * 1024), "64 GiB");
  const auto available = available_memory_bytes();
  ASSERT_TRUE(available.has_value());  // Linux: /proc/meminfo
  EXPECT_GT(*available, 0);
  EXPECT_THROW(check_memory_fits(*available * 2 + 1, "this"), InputError);
  EXPECT_NO_THROW(check_memory_fits(1, "this"));
}

}  // namespace
}  // namespace attn
