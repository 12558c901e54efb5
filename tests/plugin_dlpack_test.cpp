// The plugin ABI's tensors are DLPack's (impls/plugin/attnbench_plugin.h): checked here against
// dlpack.h itself, where the build finds one (Debian's libdlpack-dev; the test is not built
// without it). The header stands alone, so this is the only place the two meet: every field
// DLTensor, DLDataType and DLDevice share sits at the same offset with the same size, and the
// codes DLPack defines in the version found are ours.
#include <dlpack/dlpack.h>

#include <cstddef>

#include <gtest/gtest.h>

#include "impls/plugin/attnbench_plugin.h"

namespace {

#define ATTN_SAME_FIELD(ours, theirs, field)                                                         \
  static_assert(offsetof(ours, field) == offsetof(theirs, field), #field " moved against DLPack");  \
  static_assert(sizeof(ours::field) == sizeof(theirs::field), #field " resized against DLPack")

ATTN_SAME_FIELD(attnbench_dl_datatype, DLDataType, code);
ATTN_SAME_FIELD(attnbench_dl_datatype, DLDataType, bits);
ATTN_SAME_FIELD(attnbench_dl_datatype, DLDataType, lanes);
static_assert(sizeof(attnbench_dl_datatype) == sizeof(DLDataType));
ATTN_SAME_FIELD(attnbench_dl_device, DLDevice, device_type);
ATTN_SAME_FIELD(attnbench_dl_device, DLDevice, device_id);
static_assert(sizeof(attnbench_dl_device) == sizeof(DLDevice));
ATTN_SAME_FIELD(attnbench_dl_tensor, DLTensor, data);
ATTN_SAME_FIELD(attnbench_dl_tensor, DLTensor, device);
ATTN_SAME_FIELD(attnbench_dl_tensor, DLTensor, ndim);
ATTN_SAME_FIELD(attnbench_dl_tensor, DLTensor, dtype);
ATTN_SAME_FIELD(attnbench_dl_tensor, DLTensor, shape);
ATTN_SAME_FIELD(attnbench_dl_tensor, DLTensor, strides);
ATTN_SAME_FIELD(attnbench_dl_tensor, DLTensor, byte_offset);
static_assert(sizeof(attnbench_dl_tensor) == sizeof(DLTensor));

static_assert(ATTNBENCH_DL_INT == kDLInt && ATTNBENCH_DL_UINT == kDLUInt && ATTNBENCH_DL_FLOAT == kDLFloat &&
              ATTNBENCH_DL_OPAQUE_HANDLE == kDLOpaqueHandle && ATTNBENCH_DL_BFLOAT == kDLBfloat && ATTNBENCH_DL_COMPLEX == kDLComplex);
static_assert(ATTNBENCH_DL_CPU == kDLCPU && ATTNBENCH_DL_CUDA == kDLCUDA);
#if defined(DLPACK_MAJOR_VERSION) && DLPACK_MAJOR_VERSION >= 1
static_assert(ATTNBENCH_DL_BOOL == kDLBool);
static_assert(ATTNBENCH_DL_FLOAT8_E4M3FN == kDLFloat8_e4m3fn && ATTNBENCH_DL_FLOAT8_E5M2 == kDLFloat8_e5m2 &&
              ATTNBENCH_DL_FLOAT4_E2M1FN == kDLFloat4_e2m1fn);
#endif

TEST(PluginDlpack, AViewReadsTheSameThroughDlpacksType) {
  float data[6] = {0, 1, 2, 3, 4, 5};
  int64_t shape[2] = {2, 3}, strides[2] = {1, 2};
  const attnbench_dl_tensor ours{data, {ATTNBENCH_DL_CPU, 0}, 2, {ATTNBENCH_DL_FLOAT, 32, 1}, shape, strides, 0};
  const auto* theirs = reinterpret_cast<const DLTensor*>(&ours);
  EXPECT_EQ(theirs->data, data);
  EXPECT_EQ(theirs->device.device_type, kDLCPU);
  EXPECT_EQ(theirs->ndim, 2);
  EXPECT_EQ(theirs->dtype.code, kDLFloat);
  EXPECT_EQ(theirs->dtype.bits, 32);
  EXPECT_EQ(theirs->dtype.lanes, 1);
  EXPECT_EQ(theirs->shape[1], 3);
  EXPECT_EQ(theirs->strides[1], 2);
  EXPECT_EQ(theirs->byte_offset, 0u);
}

}  // namespace
