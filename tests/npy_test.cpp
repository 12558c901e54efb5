// core/npy: round trips for every element type and format version, byte-identity with files
// NumPy 2.4 wrote, a table of malformed files each with the message it must give, and the file
// route's encodings (core/case_files): bf16 as f32 values, output files read into tensors, a
// cases directory written, read back and checked against its inputs.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/case_files.hpp"
#include "core/error.hpp"
#include "core/npy.hpp"

namespace attn {
namespace {

using npy::Array;
using npy::ElementType;

std::vector<std::byte> bytes_of(std::string_view s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}

std::vector<std::byte> from_hex(std::string_view hex) {
  std::vector<std::byte> out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(std::byte(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  return out;
}

// A version 1.0 file as NumPy writes it: the header padded with spaces so the data starts at 128.
std::vector<std::byte> numpy_file(std::string_view dict, std::string_view data_hex) {
  std::string header(dict);
  header.append(128 - 10 - header.size() - 1, ' ');
  header += '\n';
  std::string preamble("\x93NUMPY\x01\x00", 8);
  preamble += char(header.size() & 0xff);
  preamble += char(header.size() >> 8);
  auto out = bytes_of(preamble + header);
  const auto data = from_hex(data_hex);
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

Array array_of(ElementType type, std::vector<std::int64_t> shape, std::uint8_t first = 1) {
  Array a;
  a.type = type;
  a.shape = std::move(shape);
  a.data.resize(std::size_t(a.numel() * npy::item_bytes(type)));
  for (std::size_t i = 0; i < a.data.size(); ++i) a.data[i] = std::byte((first + 37 * i) & 0xff);
  if (type == ElementType::boolean)
    for (auto& b : a.data) b = std::byte(std::to_integer<int>(b) & 1);
  return a;
}

TEST(Npy, RoundTripsEveryTypeAndVersion) {
  for (ElementType type : {ElementType::f16, ElementType::f32, ElementType::f64, ElementType::boolean, ElementType::u8, ElementType::u16,
                           ElementType::i32, ElementType::i64})
    for (int version : {1, 2, 3})
      for (const auto& shape : std::vector<std::vector<std::int64_t>>{{2, 3, 5, 7}, {4}, {}, {3, 0, 2}}) {
        const Array a = array_of(type, shape);
        const auto bytes = npy::serialize(a, version);
        EXPECT_EQ(std::to_integer<int>(bytes[6]), version);
        EXPECT_EQ((bytes.size() - a.data.size()) % 64, 0u) << "data aligned to 64 bytes";
        EXPECT_EQ(npy::parse(bytes, "x.npy"), a) << npy::descr(type) << " v" << version << " " << npy::shape_string(shape);
      }
}

TEST(Npy, WritesWhatNumPyWritesAndReadsIt) {
  // np.save(np.arange(6, dtype='<f4').reshape(2, 3)), np.array([True, False, True]),
  // np.array([1.5, -2], dtype='<f2') and np.float64(3.0), from NumPy 2.4.6.
  struct Sample {
    std::string dict, data;
    Array array;
  };
  const std::vector<Sample> samples = {
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", "000000000000803f0000004000004040000080400000a040",
       {ElementType::f32, {2, 3}, from_hex("000000000000803f0000004000004040000080400000a040")}},
      {"{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", "010001", {ElementType::boolean, {3}, from_hex("010001")}},
      {"{'descr': '<f2', 'fortran_order': False, 'shape': (2,), }", "003e00c0", {ElementType::f16, {2}, from_hex("003e00c0")}},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (), }", "0000000000000840", {ElementType::f64, {}, from_hex("0000000000000840")}},
  };
  for (const auto& s : samples) {
    const auto file = numpy_file(s.dict, s.data);
    EXPECT_EQ(npy::parse(file, "numpy.npy"), s.array) << s.dict;
    EXPECT_EQ(npy::serialize(s.array), file) << s.dict;
  }
}

TEST(Npy, ReadsTheSpellingsOfOlderWriters) {
  // Double quotes, no trailing comma, Python 2 longs, '?' for bool, fortran_order on a 1-D array.
  const auto f = numpy_file(R"({"descr": "<f4", "fortran_order": False, "shape": (2L, 1L)})", "0000803f00000040");
  EXPECT_EQ(npy::parse(f, "old.npy").shape, (std::vector<std::int64_t>{2, 1}));
  EXPECT_EQ(npy::parse(numpy_file("{'descr': '?', 'fortran_order': True, 'shape': (2,)}", "0100"), "b.npy").type, ElementType::boolean);
}

// Every malformed file gets a message naming the file and the fault.
TEST(Npy, MalformedFilesNameTheFault) {
  const std::string f4 = "0000803f00000040";
  struct Bad {
    std::vector<std::byte> file;
    std::string message;
  };
  auto with_version = [](std::vector<std::byte> f, int major) {
    f[6] = std::byte(major);
    return f;
  };
  const auto good = numpy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", f4);
  auto truncated = good;
  truncated.resize(good.size() - 3);
  auto short_header = good;
  short_header.resize(60);
  auto long_length = good;
  long_length[8] = std::byte(0xff);
  const std::vector<Bad> table = {
      {{}, "bad.npy: empty file, not a .npy file"},
      {bytes_of("\x93NUM"), "bad.npy: truncated: 4 bytes, shorter than the .npy preamble"},
      {bytes_of("PK\x03\x04 this is a zip file"), "bad.npy: bad magic: not a .npy file"},
      {with_version(good, 4), "bad.npy: .npy format version 4.0 is not supported"},
      {bytes_of(std::string("\x93NUMPY\x02\x00\x05\x00", 10)), "bad.npy: truncated: 10 bytes, shorter than the version 2.0 preamble (12 bytes)"},
      {short_header, "bad.npy: truncated header: the preamble says 118 header bytes but only 50 follow"},
      {long_length, "bad.npy: truncated header: the preamble says 255 header bytes but only 126 follow"},
      {truncated, "bad.npy: header says shape (2,) = 2 elements of 4 bytes but the file holds 5 data bytes"},
      {numpy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 17, 64), }", f4),
       "bad.npy: header says shape (1, 2, 17, 64) = 2176 elements of 4 bytes but the file holds 8 data bytes"},
      {numpy_file("{'fortran_order': False, 'shape': (2,), }", f4), "bad.npy: header dict has no 'descr'"},
      {numpy_file("{'descr': '<f4', 'shape': (2,), }", f4), "bad.npy: header dict has no 'fortran_order'"},
      {numpy_file("{'descr': '<f4', 'fortran_order': False, }", f4), "bad.npy: header dict has no 'shape'"},
      {numpy_file("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", f4),
       "bad.npy: descr '>f4' is big-endian; only little-endian data is read (save it as '<f4')"},
      {numpy_file("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", f4), "bad.npy: descr '<c8' is not supported"},
      {numpy_file("{'descr': '<f4', 'fortran_order': True, 'shape': (1, 2), }", f4),
       "bad.npy: fortran_order is True: only C-order arrays are read"},
      {numpy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1, }", f4), "bad.npy: header dict: unsupported value for 'extra'"},
      {numpy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 'y', }", f4), "bad.npy: header dict has an unknown key 'x'"},
      {numpy_file("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", f4), "bad.npy: header dict has key 'descr' twice"},
      {numpy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", f4), "bad.npy: header dict: 'shape' has a negative dimension"},
      {numpy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }", f4), "bad.npy: header dict: 'shape' is not a tuple of integers"},
      {numpy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", f4), "a dimension of 'shape' is too large"},
      {numpy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", f4), "bad.npy: shape (4294967296, 4294967296) is too large"},
      {numpy_file("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", f4), "structured dtypes are not supported"},
      {numpy_file("{'descr': '<f4', 'fortran_order': 0, 'shape': (2,), }", f4), "bad.npy: header dict: unsupported value for 'fortran_order'"},
      {numpy_file("{'descr': 4, 'fortran_order': False, 'shape': (2,), }", f4), "bad.npy: header dict: unsupported value for 'descr'"},
      {numpy_file("{'descr': '<f4', 'fortran_order': False, 'shape': 2, }", f4), "bad.npy: header dict: unsupported value for 'shape'"},
      {numpy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2,) ", f4), "bad.npy: header dict: expected ',' or '}' at offset"},
      {numpy_file("['descr', '<f4']", f4), "bad.npy: the header is not a dict"},
      {numpy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } x", f4), "bad.npy: header has trailing text after the dict"},
      {numpy_file("{'descr: '<f4', 'fortran_order': False, 'shape': (2,), }", f4), "bad.npy: header dict: expected ':' after key"},
      {numpy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'unterminated", f4), "bad.npy: header dict: unterminated string"},
  };
  for (const auto& bad : table) {
    try {
      npy::parse(bad.file, "bad.npy");
      ADD_FAILURE() << "accepted; expected: " << bad.message;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(bad.message), std::string::npos) << "got: " << e.what() << "\nexpected: " << bad.message;
    }
  }
}

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("npy_test_" + std::to_string(::getpid()) + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

using NpyFiles = TempDir;

TEST_F(NpyFiles, MissingAndDirectoryNamed) {
  EXPECT_THROW(
      {
        try {
          npy::read_file(dir_ / "none.npy");
        } catch (const InputError& e) {
          EXPECT_NE(std::string(e.what()).find("none.npy: no such file"), std::string::npos) << e.what();
          throw;
        }
      },
      InputError);
  EXPECT_THROW(npy::read_file(dir_), InputError);
  const Array a = array_of(ElementType::f64, {3, 2});
  npy::write_file(dir_ / "a.npy", a);
  EXPECT_EQ(npy::read_file(dir_ / "a.npy"), a);
}

std::string read_error(const std::filesystem::path& path) {
  try {
    (void)npy::read_file(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(read without an error)";
}

// The reader takes no more than the header promises: what is not a regular file is never read,
// a size that disagrees with the header is refused before the data is read, and a promise larger
// than the memory here is refused before it is allocated.
TEST_F(NpyFiles, ReadsAtMostWhatTheHeaderPromises) {
  namespace fs = std::filesystem;
  fs::create_symlink("/dev/zero", dir_ / "zero.npy");
  EXPECT_NE(read_error(dir_ / "zero.npy").find("zero.npy: not a regular file"), std::string::npos) << read_error(dir_ / "zero.npy");
  ASSERT_EQ(::mkfifo((dir_ / "fifo.npy").c_str(), 0600), 0);  // no writer: a blocking open would hang here
  EXPECT_NE(read_error(dir_ / "fifo.npy").find("fifo.npy: not a regular file"), std::string::npos) << read_error(dir_ / "fifo.npy");

  const Array a = array_of(ElementType::f32, {4, 8});
  npy::write_file(dir_ / "a.npy", a);
  const auto whole = fs::file_size(dir_ / "a.npy");
  fs::copy_file(dir_ / "a.npy", dir_ / "long.npy");
  std::ofstream(dir_ / "long.npy", std::ios::app | std::ios::binary) << std::string(1000, 'x');
  EXPECT_NE(read_error(dir_ / "long.npy").find("but the file holds 1128 data bytes"), std::string::npos) << read_error(dir_ / "long.npy");
  fs::copy_file(dir_ / "a.npy", dir_ / "short.npy");
  fs::resize_file(dir_ / "short.npy", whole - 5);
  EXPECT_NE(read_error(dir_ / "short.npy").find("but the file holds 123 data bytes"), std::string::npos) << read_error(dir_ / "short.npy");
  fs::copy_file(dir_ / "a.npy", dir_ / "header_only.npy");
  fs::resize_file(dir_ / "header_only.npy", 20);
  EXPECT_NE(read_error(dir_ / "header_only.npy").find("truncated header"), std::string::npos) << read_error(dir_ / "header_only.npy");

  // 2^40 bytes promised, and a sparse file of exactly that size: refused for memory, not allocated.
  Array huge;
  huge.type = ElementType::f32;
  huge.shape = {std::int64_t(1) << 38};
  const auto bytes = npy::serialize(Array{huge.type, {1}, std::vector<std::byte>(4)}, 1);
  std::string header(reinterpret_cast<const char*>(bytes.data()), bytes.size() - 4);
  const auto at = header.find("(1,)");
  ASSERT_NE(at, std::string::npos) << header;
  header.replace(at, 4, "(274877906944,)");
  header.erase(header.find_last_not_of(" \n") + 1);  // the padding is recomputed below
  const std::size_t padded = (header.size() + 1 + 63) / 64 * 64;
  header.append(padded - header.size() - 1, ' ').push_back('\n');
  const std::uint16_t length = std::uint16_t(header.size() - 10);
  header[8] = char(length & 0xff), header[9] = char(length >> 8);
  std::ofstream(dir_ / "huge.npy", std::ios::binary) << header;
  std::error_code ec;
  fs::resize_file(dir_ / "huge.npy", header.size() + (std::uintmax_t(1) << 40), ec);
  if (ec) GTEST_SKIP() << "no sparse file of 1 TiB here: " << ec.message();
  const std::string message = read_error(dir_ / "huge.npy");
  EXPECT_NE(message.find("huge.npy (1099511627776 bytes of data) needs about 1 TiB of memory"), std::string::npos) << message;
}

Problem small(DType dtype, std::string extra = "") {
  if (extra.find("causal=") == std::string::npos) extra += " causal=none";
  return parse_problem(fmt::format("b=2 hq=2 hkv=1 nq=5 nk=7 dk=4 dv=3 dtype={} {} regime=diffuse seed=11", to_string(dtype), extra));
}

TEST(CaseFiles, Bf16IsWrittenAsExactF32Values) {
  const Problem p = small(DType::bf16);
  const CaseInputs in = generate_inputs(p);
  const Array a = tensor_to_npy(in.q);
  ASSERT_EQ(a.type, ElementType::f32);
  for (std::int64_t e = 0; e < in.q.numel(); ++e) {
    float x;
    std::memcpy(&x, a.data.data() + 4 * e, 4);
    EXPECT_EQ(double(x), in.q.get(e));
  }
  EXPECT_EQ(tensor_to_npy(generate_inputs(small(DType::f16)).q).type, ElementType::f16);
}

TEST(CaseFiles, VisibilityMaskCombinesEveryPartAndBroadcasts) {
  const Problem p = small(DType::f32, "causal=top_left pad=7,2 bool=0.5@h");
  const Mask mask(p);
  const Array m = visibility_mask_npy(p, mask);
  ASSERT_EQ(m.shape, (std::vector<std::int64_t>{2, 2, 5, 7}));
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t h = 0; h < 2; ++h)
      for (std::int64_t i = 0; i < 5; ++i)
        for (std::int64_t j = 0; j < 7; ++j)
          EXPECT_EQ(m.data[std::size_t(((b * 2 + h) * 5 + i) * 7 + j)] != std::byte{0}, mask.visible(b, h, i, j));
  EXPECT_EQ(visibility_mask_npy(small(DType::f32, "causal=bottom_right"), Mask(small(DType::f32, "causal=bottom_right"))).shape,
            (std::vector<std::int64_t>{1, 1, 5, 7}));
}

using OutputFiles = TempDir;

TEST_F(OutputFiles, ReadIntoTheOutputTensorOrNameTheFault) {
  const Problem p = small(DType::bf16);
  Tensor want = make_output(p);
  for (std::int64_t e = 0; e < want.numel(); ++e) want.set(e, 0.01 * double(e) - 0.3);
  npy::write_file(dir_ / "out.npy", tensor_to_npy(want));
  Tensor got = make_output(p);
  read_output_file(dir_ / "out.npy", p, got);
  EXPECT_EQ(got, want);

  // bf16 bits as '<u2' are accepted too.
  Array bits{ElementType::u16, {2, 2, 5, 3}, {}};
  bits.data.resize(want.bytes());
  std::memcpy(bits.data.data(), want.data(), want.bytes());
  npy::write_file(dir_ / "bits.npy", bits);
  Tensor from_bits = make_output(p);
  read_output_file(dir_ / "bits.npy", p, from_bits);
  EXPECT_EQ(from_bits, want);

  auto expect_fault = [&](const std::string& file, const std::string& message) {
    Tensor out = make_output(p);
    try {
      read_output_file(dir_ / file, p, out);
      ADD_FAILURE() << file << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  // An f32 value bf16 cannot hold: the program wrote its f32 result, not its bf16 output.
  Array f32 = tensor_to_npy(want);
  const float not_bf16 = 0.1f;
  std::memcpy(f32.data.data() + 4 * 7, &not_bf16, 4);
  npy::write_file(dir_ / "f32.npy", f32);
  expect_fault("f32.npy", "f32.npy: element 7 = 0.10000000149011612 is not a bf16 value");
  Array shape = tensor_to_npy(want);
  shape.shape = {2, 2, 3, 5};
  npy::write_file(dir_ / "shape.npy", shape);
  expect_fault("shape.npy", "shape.npy: shape (2, 2, 3, 5) but the case expects (2, 2, 5, 3)");
  npy::write_file(dir_ / "f64.npy", Array{ElementType::f64, {2, 2, 5, 3}, std::vector<std::byte>(60 * 8)});
  expect_fault("f64.npy", "f64.npy: descr '<f8' but a bf16 case's output is '<f4' (bf16 values) or '<u2' (bf16 bits)");
  expect_fault("missing.npy", "missing.npy: no such file");
}

using CaseDirectories = TempDir;

TEST_F(CaseDirectories, WrittenReadBackAndCheckedAgainstTheirInputs) {
  const std::vector<Problem> cases = {small(DType::f32, "causal=top_left"), small(DType::f16, "bias=1@bh"), small(DType::f64)};
  write_case_directory(dir_ / "cases", cases, {3, 5, 9});
  const CaseDirectory d = read_case_directory(dir_ / "cases");
  ASSERT_EQ(d.cases.size(), 3u);
  EXPECT_EQ(d.cases[1].index, 5u);
  EXPECT_EQ(d.cases[1].problem, cases[1]);
  EXPECT_EQ(d.cases[0].mask, "mask_0003.npy");
  EXPECT_EQ(d.cases[1].bias, "bias_0005.npy");
  EXPECT_TRUE(d.cases[2].mask.empty() && d.cases[2].bias.empty());
  EXPECT_EQ(d.cases[2].out, "out_0009.npy");
  for (const auto& entry : d.cases) EXPECT_NO_THROW(check_case_inputs(d, entry, generate_inputs(entry.problem)));

  // Another seed's inputs are not these files.
  Problem other = cases[0];
  other.seed = 12;
  try {
    check_case_inputs(d, d.cases[0], generate_inputs(other));
    ADD_FAILURE() << "inputs of another seed accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("q_0003.npy: does not hold case 3's q (element 0 [0, 0, 0, 0] differs)"), std::string::npos) << e.what();
  }

  // A manifest whose fields contradict its repro string is bad input, named.
  auto manifest = nlohmann::json::parse(std::ifstream(dir_ / "cases" / "manifest.json"));
  manifest["cases"][1]["scale"] = 1.0;
  std::ofstream(dir_ / "cases" / "manifest.json") << manifest.dump();
  try {
    read_case_directory(dir_ / "cases");
    ADD_FAILURE() << "a contradicting scale accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("manifest.json: case 5: scale 1 does not match the repro string's 0.5"), std::string::npos) << e.what();
  }
  manifest["cases"][1]["scale"] = 0.5;
  manifest["cases"][1]["q"]["file"] = "../q_0005.npy";
  std::ofstream(dir_ / "cases" / "manifest.json") << manifest.dump();
  EXPECT_THROW(read_case_directory(dir_ / "cases"), InputError);
  EXPECT_THROW(read_case_directory(dir_ / "nowhere"), InputError);
}

// A backward case (cases --backward): its dO file is generate_d_o's and is checked like the inputs,
// the manifest names the gradient files with their shapes, a gradient file is read as an output
// is, and a directory holding d_o files is an earlier cases directory that may be written over.
TEST_F(CaseDirectories, BackwardCasesCarryTheirUpstreamGradientAndNameTheGradients) {
  Problem p = small(DType::bf16, "causal=top_left");
  p.operation = Operation::backward;
  const std::vector<Problem> cases = {small(DType::f32), p};
  write_case_directory(dir_ / "cases", cases);
  write_case_directory(dir_ / "cases", cases);  // again over the d_o files
  const CaseDirectory d = read_case_directory(dir_ / "cases");
  ASSERT_EQ(d.cases.size(), 2u);
  EXPECT_TRUE(d.cases[0].d_o.empty() && d.cases[0].dq.empty() && d.cases[0].dk.empty() && d.cases[0].dv.empty());
  EXPECT_EQ(d.cases[1].problem, p);
  EXPECT_EQ(d.cases[1].d_o, "d_o_0001.npy");
  EXPECT_EQ(d.cases[1].gradient_file(Role::dq), "dq_0001.npy");
  EXPECT_EQ(d.cases[1].gradient_file(Role::dk), "dk_0001.npy");
  EXPECT_EQ(d.cases[1].gradient_file(Role::dv), "dv_0001.npy");
  const Array d_o = npy::read_file(dir_ / "cases" / "d_o_0001.npy");
  EXPECT_EQ(d_o.data, tensor_to_npy(generate_d_o(p)).data);
  EXPECT_EQ(d_o.shape, output_shape(p));
  for (const auto& entry : d.cases) EXPECT_NO_THROW(check_case_inputs(d, entry, generate_inputs(entry.problem)));
  auto manifest = nlohmann::json::parse(std::ifstream(dir_ / "cases" / "manifest.json"));
  EXPECT_EQ(manifest["cases"][1]["operation"], "backward");
  EXPECT_EQ(manifest["cases"][1]["dk"]["shape"], nlohmann::json({2, 1, 7, 4}));
  EXPECT_EQ(manifest["cases"][1]["dv"]["npy_dtype"], "<f4");
  EXPECT_TRUE(manifest["cases"][0]["d_o"].is_null() && manifest["cases"][0]["dq"].is_null());

  // An edited dO is not this case's.
  Array edited = d_o;
  edited.data[4] ^= std::byte{1};
  npy::write_file(dir_ / "cases" / "d_o_0001.npy", edited);
  try {
    check_case_inputs(d, d.cases[1], generate_inputs(p));
    ADD_FAILURE() << "an edited d_o accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("d_o_0001.npy: does not hold case 1's d_o (element 1 [0, 0, 0, 1] differs)"), std::string::npos)
        << e.what();
  }

  // A gradient file is read into its tensor, or its fault named.
  Gradients want = make_gradients(p);
  for (std::int64_t e = 0; e < want.dk.numel(); ++e) want.dk.set(e, 0.25 * double(e) - 1.0);
  npy::write_file(dir_ / "dk.npy", tensor_to_npy(want.dk));
  Gradients got = make_gradients(p);
  read_gradient_file(dir_ / "dk.npy", p, Role::dk, got.dk);
  EXPECT_EQ(got.dk, want.dk);
  try {
    read_gradient_file(dir_ / "dk.npy", p, Role::dq, got.dq);
    ADD_FAILURE() << "a dk file accepted as dq";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("dk.npy: shape (2, 1, 7, 4) but the case expects (2, 2, 5, 4)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_gradient_file(dir_ / "dv.npy", p, Role::dv, got.dv), InputError);

  // A manifest without the gradients of its backward case, or with them on a forward case, is bad input.
  manifest = nlohmann::json::parse(std::ifstream(dir_ / "cases" / "manifest.json"));
  auto expect_fault = [&](const nlohmann::json& changed, const std::string& message) {
    std::ofstream(dir_ / "cases" / "manifest.json") << changed.dump();
    try {
      read_case_directory(dir_ / "cases");
      ADD_FAILURE() << message << ": accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  auto changed = manifest;
  changed["cases"][1]["dv"] = nullptr;
  expect_fault(changed, "case 1: the manifest names no 'dv' file but the repro string is a backward case (op=backward)");
  changed = manifest;
  changed["cases"][0]["d_o"] = manifest["cases"][1]["d_o"];
  expect_fault(changed, "case 0: the manifest names a 'd_o' file but the repro string is a forward case");
  changed = manifest;
  changed["cases"][1]["dq"]["shape"] = nlohmann::json({2, 2, 5, 3});
  expect_fault(changed, "case 1: 'dq' shape (2, 2, 5, 3) does not match the repro string's (2, 2, 5, 4)");
}

// What a declaration made of a set (cases --declare): the declaration, each projection's origin and
// the skipped cases read back, and named_cases gives the set as it was named, in index order.
TEST_F(CaseDirectories, KeepTheDeclarationTheProjectionsAndTheSkips) {
  const Problem named = small(DType::f16, "bias=1@bh"), projected = small(DType::f64), skipped = small(DType::bf16);
  CaseDeclaration declaration;
  declaration.capabilities_json = R"({"dtypes": ["f64"], "fully_masked": "nan"})";
  declaration.fully_masked = "nan";
  declaration.skipped = {{1, skipped.repro(), "dtype bf16 not declared"}};
  write_case_directory(dir_ / "cases", {projected}, {2}, {}, &declaration, {{named.repro(), "dtype f16 -> f64, bias dropped"}});
  const CaseDirectory d = read_case_directory(dir_ / "cases");
  ASSERT_EQ(d.cases.size(), 1u);
  EXPECT_EQ(d.cases[0].problem, projected);
  EXPECT_EQ(d.cases[0].projected_from, named.repro());
  EXPECT_EQ(d.cases[0].projection, "dtype f16 -> f64, bias dropped");
  EXPECT_EQ(nlohmann::json::parse(d.declaration_json), nlohmann::json::parse(declaration.capabilities_json));
  ASSERT_EQ(d.skipped.size(), 1u);
  EXPECT_EQ(d.skipped[0].reason, "dtype bf16 not declared");
  const auto cases = named_cases(d);
  ASSERT_EQ(cases.size(), 2u);
  EXPECT_EQ(cases[0], std::make_pair(std::size_t{1}, skipped));
  EXPECT_EQ(cases[1], std::make_pair(std::size_t{2}, named));
  auto manifest = nlohmann::json::parse(std::ifstream(dir_ / "cases" / "manifest.json"));
  EXPECT_EQ(manifest["cases"][0]["fully_masked_rows"], "nan");

  // A projected_from or skipped case that is no problem, or an index twice, is bad input, named.
  auto expect_fault = [&](const nlohmann::json& edited, const std::string& message) {
    std::ofstream(dir_ / "cases" / "manifest.json") << edited.dump();
    try {
      read_case_directory(dir_ / "cases");
      ADD_FAILURE() << message << ": accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  auto edited = manifest;
  edited["cases"][0]["projected_from"] = "b=1 hq=2 frob=3";
  expect_fault(edited, "case 2: projected_from: ");
  edited = manifest;
  edited["skipped"][0]["repro"] = "dtype=f17";
  expect_fault(edited, "skipped case 1: repro string: ");
  edited = manifest;
  edited["skipped"][0]["index"] = 2;
  expect_fault(edited, "case index 2 appears twice");
  edited = manifest;
  edited["declaration"] = "f64";
  expect_fault(edited, "'declaration' is not a JSON object");
}

}  // namespace
}  // namespace attn
