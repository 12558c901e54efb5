#pragma once
// The integer logic of cuda_fused shared by the host API, the device code and the CPU unit tests:
// tile shapes per (dtype, head dimension), which rows' keys are hidden by causality, which key
// tiles a query tile visits (and which of them need per-element masking), and how b * h_q *
// query tiles map onto a grid that never hits the 65535 limit of gridDim.y/z.
// Plain C++ that nvcc also compiles for the device (ATTN_HD); no CUDA headers needed.
#include <cstdint>

#if defined(__CUDACC__)
#define ATTN_HD __host__ __device__
#else
#define ATTN_HD
#endif

namespace attn::cuda_fused {

// The head dimensions the kernels are instantiated for (one d for Q, K, V and O).
inline constexpr int supported_head_dims[] = {32, 64, 96, 128, 256};

ATTN_HD constexpr bool is_supported_head_dim(std::int64_t d) {
  return d == 32 || d == 64 || d == 96 || d == 128 || d == 256;
}

// The kernel a problem with head dimensions d_k and d_v runs on: the smallest instantiated d at
// least both (0 past 256). Where it differs from d_k or d_v, the run pads with zero columns: zero
// columns of Q and K add exact zeros to every score, and O's extra columns (from V's zero ones)
// are dropped.
ATTN_HD constexpr std::int64_t kernel_head_dim(std::int64_t d_k, std::int64_t d_v) {
  const std::int64_t d = d_k > d_v ? d_k : d_v;
  for (int candidate : supported_head_dims)
    if (d <= candidate) return candidate;
  return 0;
}

// One thread block's tile: block_m queries, key tiles of block_n keys, threads per block.
struct TileShape {
  int block_m = 0;
  int block_n = 0;
  int threads = 0;
};

// Tensor-core path (f16/bf16): 4 warps, each owning m_tiles_per_warp 16-row mma tiles. d <= 128: 128 queries (2 m-tiles per warp); d = 256: 64 queries (1 m-tile), so that the
// O accumulator (m-tiles x d/8 x 4 floats per thread) stays within the register file.
ATTN_HD constexpr int mma_m_tiles_per_warp(int head_dim) { return head_dim <= 128 ? 2 : 1; }
// Key tiles: 64 keys for d <= 64; 32 for d >= 96, where the O accumulator (96 or 128 floats per
// thread) leaves too few registers for 64 keys of scores (ptxas spilled at 64).
ATTN_HD constexpr int mma_block_n(int head_dim) { return head_dim >= 96 ? 32 : 64; }
ATTN_HD constexpr TileShape mma_tile_shape(int head_dim) {
  return TileShape{16 * 4 * mma_m_tiles_per_warp(head_dim), mma_block_n(head_dim), 128};
}
// Shared memory of the tensor-core kernel, in bytes: Q (block_m rows), K and V (block_n rows each)
// with rows padded by 8 elements (16 bytes: ldmatrix's eight row addresses then fall in distinct
// banks), P for the rare non-finite-V path (block_m x (block_n + 8)), one flag byte per thread and
// the block's key-limit reduction (2 x 4 warps x int64).
inline constexpr int smem_row_pad = 8;
ATTN_HD constexpr int mma_smem_bytes(int head_dim) {
  const TileShape t = mma_tile_shape(head_dim);
  return (t.block_m + 2 * t.block_n) * (head_dim + smem_row_pad) * 2 + t.block_m * (t.block_n + smem_row_pad) * 2 + t.threads +
         2 * 4 * 8;
}
// Hopper path (sm_90a, forward_wgmma_kernel.cuh): f16/bf16 at d = 128 without a boolean mask or
// bias. 2 warpgroups x 64 query rows, key tiles of 128 keys double-buffered.
ATTN_HD constexpr bool wgmma_eligible(bool tensor_cores, std::int64_t head_dim, bool element_mask) {
  return tensor_cores && head_dim == 128 && !element_mask;
}
ATTN_HD constexpr TileShape wgmma_tile_shape() { return TileShape{128, 128, 256}; }
// Q, two K and two V stages (128 x 128 x 2 bytes each, no padding: wgmma's swizzled layout), P
// for the rare non-finite-V path (128 x (128 + 8)), one flag byte per thread, the key-limit
// reduction (2 x 8 warps x int64), and 1024 bytes to align the base to a swizzle atom.
ATTN_HD constexpr int wgmma_smem_bytes() { return 5 * 128 * 128 * 2 + 128 * (128 + smem_row_pad) * 2 + 256 + 2 * 8 * 8 + 1024; }
// f32 path (FMA): 4 warps of 4 query rows each, 32-key tiles (one key per lane for the scores).
ATTN_HD constexpr TileShape simt_tile_shape() { return TileShape{16, 32, 128}; }
// Q (block_m x d), K (block_n x (d + 1): lane j reads row j, conflict-free), V (block_n x d), f32.
ATTN_HD constexpr int simt_smem_bytes(int head_dim) {
  const TileShape t = simt_tile_shape();
  return (t.block_m * head_dim + t.block_n * (head_dim + 1) + t.block_n * head_dim) * 4;
}

// Causality as the kernels see it (the end of Mask::key_range for a causal window, without
// padding): query i sees keys j < limit. Device code keeps its own copy of core's window rule.
enum class CausalMode : int { none = 0, top_left = 1, bottom_right = 2 };

ATTN_HD constexpr std::int64_t causal_key_limit(CausalMode mode, std::int64_t i, std::int64_t n_q, std::int64_t n_k) {
  std::int64_t limit = n_k;
  if (mode == CausalMode::top_left) limit = i + 1 < n_k ? i + 1 : n_k;
  if (mode == CausalMode::bottom_right) limit = i + 1 + (n_k - n_q) < n_k ? i + 1 + (n_k - n_q) : n_k;
  return limit > 0 ? limit : 0;
}

// The key tiles one query tile visits, from the smallest and largest key limit of its rows
// (rows past n_q excluded; limits already clamped to [0, n_k]). Tiles [0, end) are visited,
// tiles >= end hold no visible key for any row and are skipped; tiles t < first_masked have
// every key visible to every row (keys < min_limit), so they need no per-element mask; tiles in
// [first_masked, end) do (the diagonal under causality, the last partial tile, padding edges).
struct KeyTileRange {
  std::int64_t end = 0;
  std::int64_t first_masked = 0;
};

ATTN_HD constexpr KeyTileRange key_tile_range(std::int64_t min_limit, std::int64_t max_limit, std::int64_t block_n) {
  KeyTileRange r;
  r.end = (max_limit + block_n - 1) / block_n;
  r.first_masked = min_limit / block_n;
  if (r.first_masked > r.end) r.first_masked = r.end;
  return r;
}

// The backward pass (backward_kernel.cuh): f16/bf16 at d = 64 and 128 (other head dimensions up to
// 128, and d_k != d_v, zero-padded to the next one, as the forward pads). Two kernels after the
// preprocessing (D = rowsum(dO * O)), 4 warps each, one 16-row mma tile per warp:
//   dK/dV: a block owns block_n = 64 keys of one (batch, kv head), 16 per warp, and streams
//     block_m queries per step over every query head of the group; block_m = 64 at d = 64, 32 at
//     d = 128, where dK and dV (d / 2 floats each per thread) and S^T, dP^T (block_m / 2 each)
//     must stay within the register file.
//   dQ: a block owns block_m = 64 queries of one (batch, query head), 16 per warp, and streams
//     key tiles of block_n = 64.
inline constexpr int backward_head_dims[] = {64, 128};
ATTN_HD constexpr std::int64_t backward_kernel_head_dim(std::int64_t d_k, std::int64_t d_v) {
  const std::int64_t d = d_k > d_v ? d_k : d_v;
  return d <= 64 ? 64 : d <= 128 ? 128 : 0;
}
ATTN_HD constexpr TileShape backward_dk_dv_tile_shape(int head_dim) { return TileShape{head_dim <= 64 ? 64 : 32, 64, 128}; }
ATTN_HD constexpr TileShape backward_dq_tile_shape() { return TileShape{64, 64, 128}; }
// dK/dV: K and V of the block's keys, Q and dO of a step in two stages (the next step's load
// runs under this one's products), rows padded by 8 elements as in the forward; per stage and
// query the row's LSE (base 2), D and key limit within the tile (4 bytes each).
ATTN_HD constexpr int backward_dk_dv_smem_bytes(int head_dim) {
  const TileShape t = backward_dk_dv_tile_shape(head_dim);
  return 2 * t.block_n * (head_dim + smem_row_pad) * 2 + 2 * 2 * t.block_m * (head_dim + smem_row_pad) * 2 + 2 * 3 * t.block_m * 4;
}
// dQ: Q and dO of the block's queries, K and V in two stages, the key-limit reduction (2 x 4
// warps x int64).
ATTN_HD constexpr int backward_dq_smem_bytes(int head_dim) {
  const TileShape t = backward_dq_tile_shape();
  return 2 * t.block_m * (head_dim + smem_row_pad) * 2 + 2 * 2 * t.block_n * (head_dim + smem_row_pad) * 2 + 2 * 4 * 8;
}

// The first query row that sees key `key` (< n_k) under causality: every earlier row's limit is
// at most `key`, and causal limits grow with the row, so a dK/dV block starts at this row's tile.
// n_q when no row does. Padding only lowers a row's limit (the uploaded limits include
// causality), so the bound holds with padding too.
ATTN_HD constexpr std::int64_t first_query_seeing(CausalMode mode, std::int64_t key, std::int64_t n_q, std::int64_t n_k) {
  std::int64_t first = 0;
  if (mode == CausalMode::top_left) first = key;                   // min(i + 1, n_k) > key
  if (mode == CausalMode::bottom_right) first = key - (n_k - n_q);  // min(i + 1 + n_k - n_q, n_k) > key
  return first < 0 ? 0 : (first > n_q ? n_q : first);
}

// The grid: every (batch, query head, query tile) is one block, numbered linearly with the query
// tiles of one head adjacent (heads of one kv head next to each other, for L2 reuse) and, within
// a head, the last query tile first (under causality the longest rows start first). A 1-D grid
// while the count fits gridDim.x (2^31 - 1); otherwise 2-D, gridDim.y <= 65535, where blocks
// past the count return at once.
inline constexpr std::int64_t max_grid_x = 2147483647;
inline constexpr std::int64_t max_grid_y = 65535;

struct GridShape {
  std::int64_t x = 0, y = 0;
  bool ok = false;  // false: more blocks than a grid can hold
};

ATTN_HD constexpr GridShape grid_shape(std::int64_t total_blocks) {
  GridShape g;
  if (total_blocks < 1) return g;
  g.y = (total_blocks + max_grid_x - 1) / max_grid_x;
  g.x = (total_blocks + g.y - 1) / g.y;
  g.ok = g.y <= max_grid_y;
  return g;
}

struct BlockCoord {
  std::int64_t batch = 0, head = 0, m_block = 0;
};

ATTN_HD constexpr BlockCoord block_coord(std::int64_t linear, std::int64_t num_m_blocks, std::int64_t h_q) {
  BlockCoord c;
  const std::int64_t bh = linear / num_m_blocks;
  c.m_block = num_m_blocks - 1 - (linear - bh * num_m_blocks);
  c.head = bh % h_q;
  c.batch = bh / h_q;
  return c;
}

}  // namespace attn::cuda_fused
