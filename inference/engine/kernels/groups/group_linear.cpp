// Linear layers over weights in groups of 32 (group_dot.h): y = x @ W.T for float32 x, with the
// activations rounded to int8 per group of 32. A row's result never depends on the rows beside
// it (each row is rounded alone and its float operations run in a fixed order), and every ISA's
// version gives the same bits.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/cpu_isa.h"
#include "groups/group_amx.h"
#include "groups/group_dot.h"
#include "common/kernels.h"

namespace minivllm {
namespace {

float max_abs(const float* p) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_andnot_ps(sign, _mm256_loadu_ps(p));
  for (int i = 1; i < kGroup / 8; ++i) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(p + 8 * i)));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  float top = 0.0f;
  for (float lane : lanes) top = lane > top ? lane : top;
  return top;
}

// Where a level of channel c, weight k of a group, sits in the group's bytes, and its nibble.
int64_t level_byte(int64_t bits, int64_t c, int64_t k, int* shift) {
  if (bits == 8) {
    *shift = 0;
    return 64 * (k / 4) + 4 * c + k % 4;
  }
  *shift = k < 16 ? 0 : 4;
  return 64 * ((k % 16) / 4) + 4 * c + k % 4;
}

void check_bits(int64_t bits) { TORCH_CHECK(bits == 4 || bits == 8, "bits must be 4 or 8"); }

void check_packed(const torch::Tensor& packed, int64_t K, int64_t N, int64_t bits) {
  check_bits(bits);
  TORCH_CHECK(packed.device().is_cpu() && packed.dim() == 2 && packed.scalar_type() == torch::kByte && packed.is_contiguous(),
              "packed: group_pack_weight's uint8 blocks");
  TORCH_CHECK(K % kGroup == 0 && packed.size(1) == K / kGroup * group_bytes(bits), "the packed weight's K is not ", K);
  TORCH_CHECK(packed.size(0) == (N + kGroupChannels - 1) / kGroupChannels, "out_features and the packed weight disagree");
}

// 32 int32 lanes (each within int8's range) as 32 bytes in order.
void store_bytes(const __m256i lanes[4], int8_t* to) {
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m256i words = _mm256_packs_epi16(_mm256_packs_epi32(lanes[0], lanes[1]), _mm256_packs_epi32(lanes[2], lanes[3]));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(to), _mm256_permutevar8x32_epi32(words, order));
}

int32_t lane_sum(const __m256i lanes[4]) {
  alignas(32) int32_t parts[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(parts),
                     _mm256_add_epi32(_mm256_add_epi32(lanes[0], lanes[1]), _mm256_add_epi32(lanes[2], lanes[3])));
  int32_t sum = 0;
  for (int32_t part : parts) sum += part;
  return sum;
}

}  // namespace

void quantize_groups_int8(const float* x, int64_t rows, int64_t K, int8_t* q, float* scale, float* scaled_sum) {
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const int64_t groups = K / kGroup;
  const __m256 steps = _mm256_set1_ps(128.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const float* p = x + r * K + g * kGroup;
      const float top = max_abs(p);
      const __m256 inverse = _mm256_set1_ps(top > 0.0f ? 127.0f / top : 0.0f);
      __m256i first[4], second[4];
      for (int i = 0; i < 4; ++i) {
        const __m256 t = _mm256_mul_ps(_mm256_loadu_ps(p + 8 * i), inverse);  // |t| <= 127 (up to rounding)
        const __m256 level = _mm256_round_ps(t, kRound);
        first[i] = _mm256_cvtps_epi32(level);
        second[i] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_sub_ps(t, level), steps), kRound));  // |q2| <= 64
      }
      int8_t* to = q + (r * groups + g) * 2 * kGroup;
      store_bytes(first, to);
      store_bytes(second, to + kGroup);
      const float e = top / 127.0f / 128.0f;
      scale[r * groups + g] = e;
      scaled_sum[r * groups + g] = e * static_cast<float>(128 * lane_sum(first) + lane_sum(second));
    }
  }
}

torch::Tensor group_pack_weight(const torch::Tensor& levels, const torch::Tensor& scales, const torch::Tensor& minimums, int64_t bits) {
  check_bits(bits);
  TORCH_CHECK(levels.dim() == 2 && levels.scalar_type() == torch::kByte, "levels: uint8 [N, K]");
  const int64_t N = levels.size(0), K = levels.size(1), G = K / kGroup;
  TORCH_CHECK(K > 0 && K % kGroup == 0, "K must be a multiple of ", kGroup);
  TORCH_CHECK(bits == 8 || N == 0 || levels.max().item<uint8_t>() <= 15, "4-bit levels must be 0..15");
  for (const auto* t : {&scales, &minimums})
    TORCH_CHECK(t->scalar_type() == torch::kHalf && t->sizes() == torch::IntArrayRef({N, G}), "scales and minimums: float16 [N, K / 32]");
  const auto q = levels.contiguous();
  const auto d = scales.contiguous(), m = minimums.contiguous();
  const uint8_t* from = q.data_ptr<uint8_t>();
  const uint16_t* dp = reinterpret_cast<const uint16_t*>(d.data_ptr<at::Half>());
  const uint16_t* mp = reinterpret_cast<const uint16_t*>(m.data_ptr<at::Half>());
  const int64_t blocks = (N + kGroupChannels - 1) / kGroupChannels, bytes = group_bytes(bits), level_bytes = group_level_bytes(bits);
  auto packed = torch::zeros({blocks, G * bytes}, levels.options());  // padding channels: all zero
  uint8_t* to = packed.data_ptr<uint8_t>();
  at::parallel_for(0, N, 64, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const int64_t c = n % kGroupChannels;
      for (int64_t g = 0; g < G; ++g) {
        uint8_t* group = to + (n / kGroupChannels) * G * bytes + g * bytes;
        const uint8_t* w = from + n * K + g * kGroup;
        for (int64_t s = 0; s < kGroupSteps; ++s)
          for (int64_t j = 0; j < 4; ++j) {
            if (bits == 8) group[64 * s + 4 * c + j] = w[4 * s + j];
            else if (s < kGroupSteps / 2) group[64 * s + 4 * c + j] = w[4 * s + j] | (w[16 + 4 * s + j] << 4);
          }
        std::memcpy(group + level_bytes + 2 * c, dp + n * G + g, 2);
        std::memcpy(group + level_bytes + 2 * kGroupChannels + 2 * c, mp + n * G + g, 2);
      }
    }
  });
  return packed;
}

std::vector<torch::Tensor> gguf_groups(const torch::Tensor& raw, int64_t rows, int64_t columns, const std::string& kind) {
  const int64_t block = kind == "q4_0" ? 18 : kind == "q4_1" ? 20 : kind == "q8_0" ? 34 : 0;
  TORCH_CHECK(block > 0, "GGUF blocks must be q4_0, q4_1 or q8_0, not ", kind);
  TORCH_CHECK(columns % kGroup == 0, "a GGUF row is whole blocks of ", kGroup);
  const int64_t G = columns / kGroup;
  TORCH_CHECK(raw.device().is_cpu() && raw.scalar_type() == torch::kByte && raw.is_contiguous() && raw.numel() == rows * G * block,
              "raw: the matrix's ", rows * G * block, " bytes of ", kind, " blocks");
  auto levels = torch::empty({rows, columns}, raw.options());
  auto scales = torch::empty({rows, G}, raw.options().dtype(torch::kHalf)), minimums = torch::empty_like(scales);
  const uint8_t* from = raw.data_ptr<uint8_t>();
  uint8_t* lp = levels.data_ptr<uint8_t>();
  uint16_t* sp = reinterpret_cast<uint16_t*>(scales.data_ptr<at::Half>());
  uint16_t* mp = reinterpret_cast<uint16_t*>(minimums.data_ptr<at::Half>());
  const int offset = kind == "q8_0" ? 128 : 8;  // Q8_0 and Q4_0 store signed q: level q + offset, minimum -offset * scale
  at::parallel_for(0, rows * G, 1024, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const uint8_t* b = from + i * block;
      uint8_t* level = lp + i * kGroup;  // row-major [rows, columns]: block i is row i / G, group i % G
      std::memcpy(sp + i, b, 2);
      const c10::Half scale(sp[i], c10::Half::from_bits());
      if (kind == "q4_1") {
        std::memcpy(mp + i, b + 2, 2);
      } else {
        mp[i] = c10::Half(static_cast<float>(scale) * static_cast<float>(-offset)).x;
      }
      if (kind == "q8_0") {
        for (int64_t k = 0; k < kGroup; ++k) level[k] = static_cast<uint8_t>(static_cast<int8_t>(b[2 + k]) + offset);
      } else {
        const uint8_t* nibbles = b + (kind == "q4_1" ? 4 : 2);
        for (int64_t k = 0; k < kGroup / 2; ++k) {
          level[k] = nibbles[k] & 15;  // weight k in the low nibble, 16 + k in the high one
          level[16 + k] = nibbles[k] >> 4;
        }
      }
    }
  });
  return {levels, scales, minimums};
}

torch::Tensor group_linear(const torch::Tensor& x, const torch::Tensor& packed, int64_t out_features, int64_t bits,
                           const std::string& isa) {
  TORCH_CHECK(x.device().is_cpu() && x.dim() == 2 && x.scalar_type() == torch::kFloat && x.is_contiguous(),
              "x: contiguous float32 [M, K] on CPU");
  const int64_t M = x.size(0), K = x.size(1), N = out_features, G = K / kGroup;
  check_packed(packed, K, N, bits);
  // "amx" by name (the tests), or "auto" with rows enough where the CPU has the tiles (and no cap forbids them)
  const bool tiles = isa == "amx" ? checked_isa("amx") == "amx" : isa == "auto" && M >= kGroupAmxMinRows && linear_isa() == "amx";
  const GroupDotFn dot = tiles ? nullptr : by_isa<GroupDotFn>(isa, group_dot_avx2, group_dot_avx512bw, group_dot_avx512_vnni);
  const int64_t prefetch = weight_prefetch_bytes();

  std::vector<int8_t> q(2 * M * K);
  std::vector<float> scale(M * G), scaled_sum(M * G);
  const float* xp = x.data_ptr<float>();
  at::parallel_for(0, M, 16, [&](int64_t begin, int64_t end) {
    quantize_groups_int8(xp + begin * K, end - begin, K, q.data() + 2 * begin * K, scale.data() + begin * G, scaled_sum.data() + begin * G);
  });
  const ActivationGroups activations{q.data(), scale.data(), scaled_sum.data(), G};

  auto out = torch::empty({M, N}, x.options());
  float* op = out.data_ptr<float>();
  const uint8_t* wp = packed.data_ptr<uint8_t>();
  const int64_t block_bytes = G * group_bytes(bits);
  at::parallel_for(0, packed.size(0), 1, [&](int64_t begin, int64_t end) {
    if (tiles) return group_amx_blocks(activations, M, wp, bits, begin, end, prefetch, op, N);
    for (int64_t b = begin; b < end; ++b)
      dot(activations, M, wp + b * block_bytes, bits, prefetch, op + b * kGroupChannels, N, std::min(kGroupChannels, N - b * kGroupChannels));
  });
  return out;
}

torch::Tensor group_dequantize_rows(const torch::Tensor& packed, const torch::Tensor& ids, int64_t in_features, int64_t bits) {
  TORCH_CHECK(ids.device().is_cpu() && ids.scalar_type() == torch::kLong, "ids: int64 on CPU");
  const int64_t K = in_features, G = K / kGroup, bytes = group_bytes(bits), level_bytes = group_level_bytes(bits);
  check_packed(packed, K, packed.size(0) * kGroupChannels, bits);
  const auto flat = ids.contiguous().view(-1);
  const int64_t T = flat.numel(), rows = packed.size(0) * kGroupChannels;
  const int64_t* idp = flat.data_ptr<int64_t>();
  auto out = torch::empty({T, K}, torch::TensorOptions().dtype(torch::kFloat));
  float* op = out.data_ptr<float>();
  const uint8_t* wp = packed.data_ptr<uint8_t>();
  for (int64_t t = 0; t < T; ++t) {
    const int64_t n = idp[t], c = n % kGroupChannels;
    TORCH_CHECK(n >= 0 && n < rows, "row id ", n, " outside the packed weight");
    for (int64_t g = 0; g < G; ++g) {
      const uint8_t* group = wp + (n / kGroupChannels) * G * bytes + g * bytes;
      uint16_t half_scale, half_minimum;
      std::memcpy(&half_scale, group + level_bytes + 2 * c, 2);
      std::memcpy(&half_minimum, group + level_bytes + 2 * kGroupChannels + 2 * c, 2);
      const float d = static_cast<float>(c10::Half(half_scale, c10::Half::from_bits())),
                  m = static_cast<float>(c10::Half(half_minimum, c10::Half::from_bits()));
      for (int64_t k = 0; k < kGroup; ++k) {
        int shift;
        const int level = (group[level_byte(bits, c, k, &shift)] >> shift) & (bits == 8 ? 255 : 15);
        op[t * K + g * kGroup + k] = d * static_cast<float>(level) + m;
      }
    }
  }
  auto shape = ids.sizes().vec();
  shape.push_back(K);
  return out.view(shape);
}

}  // namespace minivllm
