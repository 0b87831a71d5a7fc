// The explicit 128-byte-swizzle addressing that K3's CUDA-core compute uses must agree with CuTe's
// swizzled shared-memory tensors (which is what the TMA writes and GMMA reads).
#include <gtest/gtest.h>

#include <cute/tensor.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "kernels/bwd_sm90/bwd_sm90_split_keys.cuh"
#include "kernels/common/backward_passes.cuh"
#include "kernels/sm90/common/fp8_pv.cuh"
#include "kernels/sm90/common/staged_output.cuh"
#include "kernels/sm90/common/tma.cuh"

namespace {

template <int Rows, int D>
void expect_same_addresses() {
  using E = cutlass::bfloat16_t;
  using Layout = hfa::sm90::TileLayout<E, Rows, D>;
  alignas(1024) static E smem[Rows * D];
  auto t = cute::make_tensor(cute::make_smem_ptr(smem), Layout{});
  for (int row = 0; row < Rows; ++row)
    for (int c8 = 0; c8 < D / 8; ++c8)
      for (int e = 0; e < 8; ++e) {
        const E* cute_addr = cute::raw_pointer_cast(&t(row, c8 * 8 + e));
        const E* ours = hfa::sm90::Sw128Rows<Rows>::chunk(smem, row, c8) + e;
        ASSERT_EQ(cute_addr, ours) << "row " << row << " col " << c8 * 8 + e;
      }
}

TEST(Sm90Layouts, Sw128RowsMatchesCute) {
  expect_same_addresses<64, 64>();
  expect_same_addresses<64, 128>();
  expect_same_addresses<64, 256>();
  expect_same_addresses<128, 128>();
}

// KMajorBytes (k7's V transpose) addresses e4m3 tiles as CuTe lays them out: 64-byte swizzle at
// D = 64, 128-byte above, atoms down the rows first.
template <int Rows, int Cols>
void expect_same_byte_addresses() {
  using E = cute::float_e4m3_t;
  alignas(1024) static E smem[Rows * Cols];
  auto t = cute::make_tensor(cute::make_smem_ptr(smem), hfa::sm90::TileLayout<E, Rows, Cols>{});
  for (int row = 0; row < Rows; ++row)
    for (int col = 0; col < Cols; ++col) {
      const auto cute_offset = reinterpret_cast<const char*>(cute::raw_pointer_cast(&t(row, col))) -
                               reinterpret_cast<const char*>(smem);
      ASSERT_EQ(cute_offset, (hfa::sm90::KMajorBytes<Rows, Cols>::offset(row, col)))
          << Rows << " x " << Cols << " row " << row << " col " << col;
    }
}

TEST(Sm90Layouts, KMajorBytesMatchesCuteForE4m3) {
  expect_same_byte_addresses<128, 64>();
  expect_same_byte_addresses<128, 128>();
  expect_same_byte_addresses<128, 256>();
  expect_same_byte_addresses<64, 128>();
  expect_same_byte_addresses<256, 128>();
  expect_same_byte_addresses<256, 64>();  // d = 256's transposed 64-key V tile
  expect_same_byte_addresses<64, 256>();
  expect_same_byte_addresses<128, 192>();  // k7's transposed 192-key V tiles (64-byte swizzle)
  expect_same_byte_addresses<64, 192>();
  expect_same_byte_addresses<192, 128>();  // and its 192-key K and V tiles
  expect_same_byte_addresses<192, 64>();
  expect_same_byte_addresses<128, 224>();  // a 224-key transposed V (32-byte swizzle; no kernel yet)
  expect_same_byte_addresses<64, 224>();
  expect_same_byte_addresses<224, 128>();
}

// The key renaming of the FP8 P V (fp8_pv.cuh): a permutation of each 16 keys, and the one that
// maps S's accumulator order onto the e4m3 A operand's. A thread (q = lane % 4) holds keys
// 2q, 2q + 1, 2q + 8, 2q + 9 of each 16 in the accumulator (PTX's fp32 D fragment: pairs per
// 8-key group) and columns 4q .. 4q + 3 in the A operand (PTX's k32 A fragment).
TEST(Sm90Layouts, Fp8KeyRenamingMatchesTheFragments) {
  std::vector<int> seen(128, 0);
  for (int key = 0; key < 128; ++key) {
    const int col = hfa::sm90::permuted_key_column(key);
    ASSERT_GE(col, key - key % 16);
    ASSERT_LT(col, key - key % 16 + 16);
    ++seen[col];
  }
  for (int c = 0; c < 128; ++c) EXPECT_EQ(seen[c], 1) << "column " << c;
  for (int q = 0; q < 4; ++q) {
    const int acc_keys[4] = {2 * q, 2 * q + 1, 2 * q + 8, 2 * q + 9};
    for (int i = 0; i < 4; ++i) EXPECT_EQ(hfa::sm90::permuted_key_column(acc_keys[i]), 4 * q + i);
  }
}

// K7's V transpose (transpose_v_tile) emulated on the host with the PTX semantics of its three
// instructions, for every tile shape k7 uses, walking the units in its slabs (each unit once):
// each lane's addresses (the slab forms, src_offset / dst_offset) agree with KMajorBytes, every (key, channel) of V lands at (channel, permuted_key_column(key)) of Vt, every
// byte of Vt is written once, and no 8-lane phase of either instruction has a bank conflict.
uint32_t host_prmt(uint32_t a, uint32_t b, uint32_t sel) {
  const uint64_t bytes = (uint64_t{b} << 32) | a;
  uint32_t out = 0;
  for (int k = 0; k < 4; ++k) out |= ((bytes >> (8 * ((sel >> (4 * k)) & 7))) & 0xff) << (8 * k);
  return out;
}
uint16_t load_u16(const std::vector<uint8_t>& m, uint32_t at) { return m[at] | (m[at + 1] << 8); }

// The 16-byte bank group of each lane of one 8-lane phase must differ.
void expect_conflict_free(const uint32_t (&address)[32], const char* what) {
  for (int phase = 0; phase < 4; ++phase) {
    std::vector<int> used(8, 0);
    for (int l = 8 * phase; l < 8 * phase + 8; ++l) ++used[address[l] % 128 / 16];
    for (int g = 0; g < 8; ++g) EXPECT_LE(used[g], 1) << what << " phase " << phase;
  }
}

template <int BlockN, int D>
void expect_transpose_emulation() {
  using Units = hfa::sm90::VTransposeUnits<BlockN, D>;
  std::vector<uint8_t> v(BlockN * D), vt(BlockN * D, 0);
  std::vector<int> writes(BlockN * D, 0);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  std::vector<int> unit_seen(Units::kUnits, 0);
  for (uint32_t i = 0; i < Units::kSlabs * Units::kSlabUnits; ++i) {  // transpose_v_tile's walk
    const uint32_t slab = i / Units::kSlabUnits;
    const int j = static_cast<int>(i % Units::kSlabUnits);
    const uint32_t u = Units::slab_first_unit(slab) + j;
    ASSERT_LT(u, static_cast<uint32_t>(Units::kUnits));
    ++unit_seen[u];
    const int key0 = 16 * (u % Units::kKeyGroups), col0 = 32 * (u / Units::kKeyGroups);
    uint32_t src[32], dst[32], regs[32][4];
    for (uint32_t l = 0; l < 32; ++l) {
      src[l] = Units::src_in_slab(Units::src_slab_base(l, slab), j);
      dst[l] = Units::dst_in_slab(Units::dst_slab_base(l, slab), Units::dst_chunk_xor(l), j);
      ASSERT_EQ(src[l], Units::src_offset(l, u)) << "slab " << slab << " unit " << j;
      ASSERT_EQ(dst[l], Units::dst_offset(l, u)) << "slab " << slab << " unit " << j;
      ASSERT_EQ(src[l], (Units::Src::offset(key0 + Units::load_key(l), col0 + Units::load_col(l))));
      ASSERT_EQ(dst[l], (Units::Dst::offset(col0 + Units::store_row(l), key0)));
    }
    expect_conflict_free(src, "ldmatrix");
    expect_conflict_free(dst, "stmatrix");
    for (int t = 0; t < 32; ++t) {
      uint32_t r[4];
      for (int m = 0; m < 4; ++m) {  // ldmatrix .trans: (row 2 (t % 4), col t / 4) and row + 1
        const uint32_t lo = load_u16(v, src[8 * m + 2 * (t % 4)] + 2 * (t / 4));
        const uint32_t hi = load_u16(v, src[8 * m + 2 * (t % 4) + 1] + 2 * (t / 4));
        r[m] = lo | (hi << 16);
      }
      const bool swapped = t / 4 >= 4;
      const uint32_t first = swapped ? 0x7531 : 0x6420, second = swapped ? 0x6420 : 0x7531;
      regs[t][0] = host_prmt(r[0], r[1], first);
      regs[t][1] = host_prmt(r[0], r[1], second);
      regs[t][2] = host_prmt(r[2], r[3], first);
      regs[t][3] = host_prmt(r[2], r[3], second);
    }
    for (int t = 0; t < 32; ++t)  // stmatrix: register m of lane t -> row t / 4, bytes 4 (t % 4)
      for (int m = 0; m < 4; ++m)
        for (int b = 0; b < 4; ++b) {
          const uint32_t at = dst[8 * m + t / 4] + 4 * (t % 4) + b;
          vt[at] = static_cast<uint8_t>(regs[t][m] >> (8 * b));
          ++writes[at];
        }
  }
  for (int u = 0; u < Units::kUnits; ++u) ASSERT_EQ(unit_seen[u], 1) << "unit " << u;
  for (int i = 0; i < BlockN * D; ++i) ASSERT_EQ(writes[i], 1) << "byte " << i;
  for (int key = 0; key < BlockN; ++key)
    for (int c = 0; c < D; ++c)
      ASSERT_EQ(vt[Units::Dst::offset(c, hfa::sm90::permuted_key_column(key))],
                v[Units::Src::offset(key, c)])
          << BlockN << " x " << D << " key " << key << " channel " << c;
}

TEST(Sm90Layouts, Fp8VTransposeEmulated) {
  expect_transpose_emulation<128, 64>();
  expect_transpose_emulation<128, 128>();
  expect_transpose_emulation<64, 256>();
  expect_transpose_emulation<128, 256>();  // d = 256's 128-key tiles
  expect_transpose_emulation<192, 128>();
  expect_transpose_emulation<192, 64>();
  expect_transpose_emulation<256, 64>();
  expect_transpose_emulation<224, 128>();  // 32-byte swizzled destination rows (no kernel yet)
  expect_transpose_emulation<224, 64>();
}

// K6's O staging computes chunk addresses as a row base XOR a constant (staged_output.cuh); each
// lane of stmatrix addresses chunk j or j + 1 (odd) of its row through the same formula. TileRows:
// the staged 64 rows are rows [part * 64, part * 64 + 64) of a TileRows-row tile, addressed from
// that part's first row (the backward's dS^T: a warpgroup's 64 keys of a 128-key tile).
template <int D, int TileRows = hfa::sm90::kStagedRows>
void expect_staged_offsets_match() {
  constexpr int Rows = hfa::sm90::kStagedRows;
  using E = cutlass::bfloat16_t;
  alignas(1024) static E smem[TileRows * D];
  for (int part = 0; part < TileRows / Rows; ++part)
    for (int row = 0; row < Rows; ++row)
      for (int c8 = 0; c8 < D / 8; ++c8) {
        const E* part_base = smem + part * Rows * 64;  // row part * 64 of the first 64-column slab
        const auto ref = static_cast<uint32_t>(
            reinterpret_cast<const char*>(hfa::sm90::Sw128Rows<TileRows>::chunk(smem, part * Rows + row, c8)) -
            reinterpret_cast<const char*>(part_base));
        const uint32_t base = hfa::sm90::staged_row_base(row);
        ASSERT_EQ(hfa::sm90::staged_chunk_offset<TileRows>(base, c8), ref)
            << "part " << part << " row " << row << " chunk " << c8;
        if (c8 % 2 == 1)  // the odd chunk of a pair, as stage_output's matrices 2 and 3 address it
          ASSERT_EQ(hfa::sm90::staged_chunk_offset<TileRows>(base ^ 16, c8 - 1), ref)
              << "part " << part << " row " << row << " chunk " << c8;
      }
}

TEST(Sm90Layouts, StagedOutputOffsetsMatchSw128Rows) {
  expect_staged_offsets_match<64>();
  expect_staged_offsets_match<128>();
  expect_staged_offsets_match<256>();
  expect_staged_offsets_match<64, 128>();   // bwd_sm90's dS^T, d <= 128, 64-row Q blocks
  expect_staged_offsets_match<128, 128>();  // and d = 64's 128-row Q blocks
}

// The backward's dQ staging (DqStage): the XOR form that bwd_sm90 stores through (one row base per
// thread, immediates per store) addresses exactly what offset() does, for every row, every column
// of a fragment's pair (col % 8 even), and the thread's other rows (8 and 64 rows on: the
// second 64-row atom of a 128-row block) through + 128 bytes per row; for fp32 and for the int64
// of fixed-point dQ (16-column slabs).
template <int BlockM, int D, int ElemBytes = 4>
void expect_dq_stage_forms_match() {
  using Stage = hfa::DqStage<BlockM, ElemBytes>;
  for (int row = 0; row < BlockM; ++row)
    for (int col0 = 0; col0 < D; col0 += Stage::kSlabCols)  // a thread's first column: in a slab's first 8
      for (int lane_col = 0; lane_col < 8; lane_col += 2) {
        const int first = col0 + lane_col;
        const int row0 = row % 8 + row % 64 / 16 * 16;  // the thread's first row
        const uint32_t base = Stage::row_base(row0, lane_col) + Stage::byte_offset(0, col0);
        for (int dcol = 0; first + dcol < D; dcol += 8) {
          const int col = first + dcol;
          const uint32_t ref = static_cast<uint32_t>(Stage::offset(row, col)) * ElemBytes;
          ASSERT_EQ(Stage::byte_offset(base, dcol) + (row - row0) * 128, ref)
              << "row " << row << " col " << col << " element bytes " << ElemBytes;
          // The odd rows' swapped base: the partner group's column, in the same slab.
          const int partner = col ^ (8 * Stage::kOddRowGroupSwap);
          ASSERT_EQ(partner / Stage::kSlabCols, col / Stage::kSlabCols);
          ASSERT_EQ(Stage::byte_offset(Stage::swapped(base), dcol) + (row - row0) * 128,
                    static_cast<uint32_t>(Stage::offset(row, partner)) * ElemBytes)
              << "row " << row << " col " << col << " swapped, element bytes " << ElemBytes;
        }
      }
}

TEST(Sm90Layouts, DqStageXorFormMatchesOffsets) {
  expect_dq_stage_forms_match<64, 64>();
  expect_dq_stage_forms_match<64, 128>();
  expect_dq_stage_forms_match<128, 64>();  // bwd_sm90's d = 64 blocks
  expect_dq_stage_forms_match<128, 256>();
  expect_dq_stage_forms_match<64, 64, 8>();  // fixed-point dQ (the deterministic mode, d <= 128)
  expect_dq_stage_forms_match<64, 128, 8>();
}

// The bank conflicts of one pair-store instruction of the C fragment (8 rows x 4 lanes: lane l
// holds row r0 + l / 4, columns 2 (l % 4) + 8 k and the next), each lane storing 2 elements of
// ElemBytes: the hardware serves the warp in phases of 128 / (2 ElemBytes) lanes, and a phase
// needs one wavefront per distinct 128-byte line position a bank is asked for. Returns the
// wavefronts beyond one per phase. With `swap`, lanes of odd rows store group k ^
// kOddRowGroupSwap instead (DqStage, bwd_sm90's staging).
template <int ElemBytes>
int dq_stage_extra_wavefronts(int r0, int k, bool swap) {
  using Stage = hfa::DqStage<64, ElemBytes>;
  constexpr int kLanesPerPhase = 128 / (2 * ElemBytes);
  int extra = 0;
  for (int phase = 0; phase < 32 / kLanesPerPhase; ++phase) {
    std::set<int> words[32];  // per bank: the distinct 4-byte words (byte / 4) asked of it
    for (int lane = phase * kLanesPerPhase; lane < (phase + 1) * kLanesPerPhase; ++lane) {
      const int row = r0 + lane / 4;
      const int group = swap && row % 2 == 1 ? k ^ Stage::kOddRowGroupSwap : k;
      const int byte = Stage::offset(row, 2 * (lane % 4) + 8 * group) * ElemBytes;
      for (int w = 0; w < 2 * ElemBytes / 4; ++w) words[(byte / 4 + w) % 32].insert(byte / 4 + w);
    }
    size_t most = 0;
    for (const auto& bank : words) most = std::max(most, bank.size());
    extra += static_cast<int>(most) - 1;
  }
  return extra;
}

// Every (row, 16-byte chunk) of a staged slab is used exactly once (DqStageXorFormMatchesOffsets
// covers the addresses), and with the odd rows' group swap every phase of every pair store is
// conflict-free, for both element sizes; without it, each phase is 2-way conflicted (what ncu
// measured before the swap: twice the ideal wavefronts, 69.8 M conflicts in bwd_sm90 at d = 64,
// 2.0 M after it; session 35).
template <int ElemBytes>
void expect_dq_stage_conflict_free() {
  using Stage = hfa::DqStage<64, ElemBytes>;
  for (int k = 0; k < Stage::kSlabCols / 8; ++k)
    for (int r0 = 0; r0 < 64; r0 += 8) {
      EXPECT_EQ(dq_stage_extra_wavefronts<ElemBytes>(r0, k, /*swap=*/true), 0)
          << "rows " << r0 << " group " << k << " element bytes " << ElemBytes;
      constexpr int kPhases = 32 * 2 * ElemBytes / 128;  // one 2-way conflict in each
      EXPECT_EQ(dq_stage_extra_wavefronts<ElemBytes>(r0, k, /*swap=*/false), kPhases)
          << "rows " << r0 << " group " << k << " element bytes " << ElemBytes;
    }
}

TEST(Sm90Layouts, DqStagePairStoresAreConflictFree) {
  expect_dq_stage_conflict_free<4>();
  expect_dq_stage_conflict_free<8>();
}

// Fixed-point dQ (BwdProblem::dq_fixed_point): the exponent puts the row's bound 4 ||dO||_1
// max|K| max|V| in [2^55, 2^58) after scaling (so no sum overflows and no resolution is wasted),
// and gives 0 for factors that are 0 or not finite.
TEST(FixedPointDq, ExponentPutsTheBoundBelow2To58) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> mantissa(1.f, 2.f);
  std::uniform_int_distribution<int> exponent(-40, 40);
  for (int i = 0; i < 20000; ++i) {
    const float l1 = std::ldexp(mantissa(rng), exponent(rng)), mk = std::ldexp(mantissa(rng), exponent(rng)),
                mv = std::ldexp(mantissa(rng), exponent(rng));
    const int e = hfa::dq_fixed_point_exponent(l1, mk, mv);
    const double scaled = std::ldexp(4.0 * l1 * mk * mv, e);
    if (e > -126 && e < 126) ASSERT_GE(scaled, std::ldexp(1.0, 55)) << l1 << " " << mk << " " << mv;
    ASSERT_LT(scaled, std::ldexp(1.0, 58)) << l1 << " " << mk << " " << mv;
  }
  EXPECT_EQ(hfa::dq_fixed_point_exponent(0.f, 1.f, 1.f), 0);
  EXPECT_EQ(hfa::dq_fixed_point_exponent(1.f, 0.f, 1.f), 0);
  EXPECT_EQ(hfa::dq_fixed_point_exponent(1.f, 1.f, INFINITY), 0);
  EXPECT_EQ(hfa::dq_fixed_point_exponent(NAN, 1.f, 1.f), 0);
  EXPECT_EQ(hfa::dq_fixed_point_exponent(1e-30f, 1e-30f, 1e-30f), 126);    // clamped: 2^126 is a float
  EXPECT_EQ(hfa::dq_fixed_point_exponent(1e30f, 1e30f, 1e30f), -126);
}

// A row of dQ the way bwd_sm90's deterministic mode sums it: per KV block of 128 keys an fp32
// sum of dS_ij K_jc (dS = P (dP - D), P a softmax over 4096 keys, K and V with outliers 30x their
// typical size), scaled by the row's 2^e, rounded to int64 and added in two different block
// orders: the same bits, never near overflow, within half a step per block of the exact sum of
// the fp32 block sums, and those steps below 1e-8 of the row's largest |dQ|.
TEST(FixedPointDq, RowSumsAreOrderFreeAndExact) {
  constexpr int kKeys = 4096, kD = 64, kBlock = 128;
  std::mt19937 rng(9);
  std::normal_distribution<float> normal;
  std::vector<float> k(kKeys * kD), v(kKeys * kD), dout(kD), s(kKeys);
  for (float& x : k) x = normal(rng);
  for (float& x : v) x = normal(rng);
  for (int j = 0; j < kKeys; j += 97) k[j * kD + j % kD] *= 30.f, v[j * kD + (j + 1) % kD] *= 30.f;
  for (float& x : dout) x = normal(rng);
  for (float& x : s) x = normal(rng);
  float max_k = 0.f, max_v = 0.f, l1 = 0.f;
  for (int i = 0; i < kKeys * kD; ++i) max_k = std::max(max_k, std::fabs(k[i])), max_v = std::max(max_v, std::fabs(v[i]));
  for (float x : dout) l1 += std::fabs(x);
  double z = 0;
  for (float x : s) z += std::exp(double(x));
  std::vector<double> p(kKeys), dp(kKeys);
  double d_row = 0;  // D = dO . O, O = sum P V
  for (int j = 0; j < kKeys; ++j) {
    p[j] = std::exp(double(s[j])) / z;
    for (int c = 0; c < kD; ++c) dp[j] += double(dout[c]) * v[j * kD + c], d_row += p[j] * double(dout[c]) * v[j * kD + c];
  }
  const int e = hfa::dq_fixed_point_exponent(l1, max_k, max_v);
  std::vector<double> ref(kD, 0.0), block_sums(kD, 0.0);
  std::vector<std::vector<long long>> blocks(kKeys / kBlock, std::vector<long long>(kD));
  for (int b = 0; b < kKeys / kBlock; ++b)
    for (int c = 0; c < kD; ++c) {
      float part = 0.f;  // the GEMM's fp32 sum over the block's keys
      for (int j = b * kBlock; j < (b + 1) * kBlock; ++j) {
        const float ds = static_cast<float>(p[j] * (dp[j] - d_row));
        part += ds * k[j * kD + c];
        ref[c] += p[j] * (dp[j] - d_row) * k[j * kD + c];
      }
      block_sums[c] += part;
      const double scaled = std::ldexp(double(part), e);
      ASSERT_LT(std::fabs(scaled), std::ldexp(1.0, 58));
      blocks[b][c] = std::llrint(static_cast<float>(scaled));  // the kernel's float multiply is exact (2^e)
    }
  double max_ref = 0;
  for (double x : ref) max_ref = std::max(max_ref, std::fabs(x));
  const double step = std::ldexp(1.0, -e);
  EXPECT_LT(step, 1e-8 * max_ref);
  for (int c = 0; c < kD; ++c) {
    unsigned long long forward = 0, backward = 0;  // wrapping sums, as the u64 reductions add
    for (int b = 0; b < kKeys / kBlock; ++b) forward += static_cast<unsigned long long>(blocks[b][c]);
    for (int b = kKeys / kBlock - 1; b >= 0; --b) backward += static_cast<unsigned long long>(blocks[b][c]);
    ASSERT_EQ(forward, backward);
    const double got = std::ldexp(double(static_cast<long long>(forward)), -e);
    EXPECT_NEAR(got, block_sums[c], 0.5 * step * (kKeys / kBlock)) << "column " << c;
    EXPECT_NEAR(got, ref[c], 1e-4 * max_ref) << "column " << c;  // fp32 block sums' own error
  }
}

// bwd_sm90 at d = 256 (bwd_sm90_split_keys.cuh): the (64 x 64) P / dS tile that dQ reads whole is
// the two warpgroups' (64 x 32) halves side by side, each where that warpgroup writes it and reads
// it back transposed (key x query) for dV^T and dK^T.
TEST(Sm90Layouts, SplitKeysHalvesMakeTheWholeTile) {
  using Config = hfa::bwd_sm90::SplitKeysConfig<__nv_bfloat16>;
  using E = Config::E;
  constexpr int kRows = Config::kBlockM, kKeys = Config::kKeysPerWarpgroup;
  alignas(1024) static E smem[Config::kBlockM * Config::kBlockN];
  auto whole = cute::make_tensor(cute::make_smem_ptr(smem), Config::PdSLayout{});
  for (int w = 0; w < 2; ++w) {
    auto half = cute::make_tensor(cute::make_smem_ptr(smem + w * kRows * kKeys), Config::HalfLayout{});
    auto view = cute::make_tensor(cute::make_smem_ptr(smem + w * kRows * kKeys), Config::HalfViewLayout{});
    for (int row = 0; row < kRows; ++row)
      for (int key = 0; key < kKeys; ++key) {
        const E* in_whole = cute::raw_pointer_cast(&whole(row, w * kKeys + key));
        ASSERT_EQ(in_whole, cute::raw_pointer_cast(&half(row, key))) << "half " << w << " row " << row << " key " << key;
        ASSERT_EQ(in_whole, cute::raw_pointer_cast(&view(key, row))) << "half " << w << " row " << row << " key " << key;
      }
  }
}

}  // namespace
