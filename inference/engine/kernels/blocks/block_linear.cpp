// Linear layers over GGUF block types (block_dot.h): the packer from a file's raw blocks, the
// de-quantizer of raw blocks (embedding rows, the tests' reference), and y = x @ W.T with x's rows
// quantized per block. A row's result never depends on the rows beside it, and every ISA's version
// gives the same bits.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "blocks/block_amx.h"
#include "blocks/block_dot.h"
#include "common/cpu_isa.h"
#include "common/kernels.h"

namespace minivllm {
namespace {

int64_t row_bytes(const BlockTraits& t, int64_t columns) {
  TORCH_CHECK(columns % t.weights == 0, "a ", t.name, " row is whole blocks of ", t.weights, " weights, not ", columns);
  return columns / t.weights * t.bytes;
}

void check_raw(const torch::Tensor& raw, int64_t bytes) {
  TORCH_CHECK(raw.device().is_cpu() && raw.scalar_type() == torch::kByte && raw.is_contiguous() && raw.numel() == bytes,
              "raw: the tensor's ", bytes, " bytes of GGUF blocks, contiguous uint8");
}

const BlockTraits& kernel_traits(BlockType type) {
  const BlockTraits& t = traits(type);
  TORCH_CHECK(t.levels != LevelBits::Byte && type != BlockType::Q4_0 && type != BlockType::Q4_1,
              t.name, " weights run through the group kernel (gguf_groups, group_linear)");
  return t;
}

uint8_t table_index(uint8_t level) {
  return static_cast<uint8_t>(std::find(kIq4Levels, kIq4Levels + 16, level) - kIq4Levels);
}

// Channel c's decoded block into its super-block of the packed layout (block_dot.h).
void place(const BlockTraits& t, const DecodedBlock& b, int64_t c, uint8_t* to) {
  const int64_t units = t.weights / 32, subs = t.weights / t.sub, ub = unit_bytes(t.levels);
  const bool table = t.levels == LevelBits::NibbleTable, minimum = t.offset == 0;
  for (int64_t u = 0; u < units; ++u) {
    uint8_t* unit = to + u * ub;
    const uint8_t* level = b.level + 32 * u;
    uint8_t low[32];
    for (int64_t i = 0; i < 32; ++i) low[i] = (table ? table_index(level[i]) : level[i]) & 15;
    for (int64_t p = 0; p < 4; ++p)
      for (int64_t j = 0; j < 4; ++j) unit[64 * p + 4 * c + j] = low[4 * p + j] | low[16 + 4 * p + j] << 4;
    for (int64_t j = 0; j < 4; ++j) {
      if (t.levels == LevelBits::Nibble1) {
        uint8_t bits = 0;
        for (int64_t s = 0; s < 8; ++s) bits |= ((level[4 * s + j] >> 4) & 1) << s;
        unit[256 + 4 * c + j] = bits;
      } else if (t.levels == LevelBits::Nibble2) {
        for (int64_t h = 0; h < 2; ++h) {
          uint8_t bits = 0;
          for (int64_t s = 0; s < 4; ++s) bits |= ((level[4 * (4 * h + s) + j] >> 4) & 3) << (2 * s);
          unit[256 + 64 * h + 4 * c + j] = bits;
        }
      }
    }
  }
  uint8_t* sc = to + units * ub;
  for (int64_t j = 0; j < subs; ++j) sc[j * kBlockChannels + c] = static_cast<uint8_t>(b.sc[j]);
  uint8_t* d = sc + subs * kBlockChannels;
  if (minimum) {
    for (int64_t j = 0; j < subs; ++j) d[j * kBlockChannels + c] = static_cast<uint8_t>(b.mn[j]);
    d += subs * kBlockChannels;
  }
  std::memcpy(d + 2 * c, &b.d, 2);
  if (minimum) std::memcpy(d + 2 * kBlockChannels + 2 * c, &b.dmin, 2);
}

// The two types of a Q4_K_M file's bulk, placed straight from the file's bytes (the generic
// decode above costs ~4x as much, and a 1.5B model's start waits on it): the same bytes `place` writes.
// A unit's 32 weights are one nibble (`shift`) of 32 file bytes; packed byte 4p + j of the channel
// holds weights 4p + j and 16 + 4p + j of the unit.
void place_nibbles(const uint8_t* src, int shift, int64_t c, uint8_t* unit) {
  uint8_t v[16];
  for (int i = 0; i < 16; ++i) v[i] = ((src[i] >> shift) & 15) | (((src[16 + i] >> shift) & 15) << 4);
  for (int p = 0; p < 4; ++p) std::memcpy(unit + 64 * p + 4 * c, v + 4 * p, 4);
}

void place_q4_k(const uint8_t* b, int64_t c, uint8_t* to) {  // d, dmin, scales[12], qs[128]
  for (int u = 0; u < 8; ++u) place_nibbles(b + 16 + 32 * (u / 2), 4 * (u % 2), c, to + 256 * u);
  int8_t sc[8], mn[8];
  k_scales_of(b + 4, sc, mn);
  for (int j = 0; j < 8; ++j) {
    to[2048 + 16 * j + c] = static_cast<uint8_t>(sc[j]);
    to[2048 + 128 + 16 * j + c] = static_cast<uint8_t>(mn[j]);
  }
  std::memcpy(to + 2048 + 256 + 2 * c, b, 2);
  std::memcpy(to + 2048 + 256 + 32 + 2 * c, b + 2, 2);
}

void place_q6_k(const uint8_t* b, int64_t c, uint8_t* to) {  // ql[128], qh[64], scales[16], d
  for (int u = 0; u < 8; ++u) {
    const int h = u / 4, t = u % 4;  // weights 128h + 32t + l
    uint8_t* unit = to + 384 * u;
    place_nibbles(b + 64 * h + 32 * (t % 2), 4 * (t / 2), c, unit);
    const uint8_t* qh = b + 128 + 32 * h;
    for (int half = 0; half < 2; ++half)
      for (int j = 0; j < 4; ++j) {
        uint8_t bits = 0;
        for (int s = 0; s < 4; ++s) bits |= ((qh[16 * half + 4 * s + j] >> (2 * t)) & 3) << (2 * s);
        unit[256 + 64 * half + 4 * c + j] = bits;
      }
  }
  for (int j = 0; j < 16; ++j) to[3072 + 16 * j + c] = b[192 + j];
  std::memcpy(to + 3072 + 256 + 2 * c, b + 208, 2);
}

}  // namespace

std::vector<const uint8_t*> ordered_rows(const std::vector<const uint8_t*>& rows, const torch::Tensor& order) {
  const int64_t n = static_cast<int64_t>(rows.size());
  TORCH_CHECK(order.scalar_type() == torch::kLong && order.dim() == 1 && order.numel() == n, "order: int64 [rows]");
  const auto o = order.contiguous();
  std::vector<const uint8_t*> ordered(n);
  for (int64_t r = 0; r < n; ++r) {
    const int64_t from = o.data_ptr<int64_t>()[r];
    TORCH_CHECK(from >= 0 && from < n, "order: row ", from, " outside the ", n, " rows");
    ordered[r] = rows[from];
  }
  return ordered;
}

void quantize_blocks_int8(const float* x, int64_t rows, int64_t K, int64_t S, int64_t sub, int8_t* q, float* scale, int32_t* bsum) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < K / S; ++b) {
      const float* p = x + r * K + b * S;
      float top = 0.0f;
      for (int64_t i = 0; i < S; ++i) top = std::max(top, std::fabs(p[i]));
      const float inverse = top > 0.0f ? 127.0f / top : 0.0f;
      scale[r * (K / S) + b] = top / 127.0f;
      int8_t* to = q + r * K + b * S;
      for (int64_t i = 0; i < S; ++i) to[i] = static_cast<int8_t>(std::nearbyint(p[i] * inverse));
      for (int64_t j = 0; j < S / sub; ++j) {
        int32_t sum = 0;
        for (int64_t i = 0; i < sub; ++i) sum += to[j * sub + i];
        bsum[r * (K / sub) + b * (S / sub) + j] = sum;
      }
    }
  }
}

PackJob block_pack_job(const std::vector<torch::Tensor>& raws, int64_t columns, const std::string& kind,
                       const std::optional<torch::Tensor>& order) {
  const BlockType type = block_type(kind);
  const BlockTraits& t = kernel_traits(type);
  const int64_t bytes = row_bytes(t, columns), blocks = columns / t.weights, sb = superblock_bytes(t);
  std::vector<const uint8_t*> source;  // each output row's bytes in the parts, in our row order
  for (const auto& raw : raws) {
    TORCH_CHECK(raw.device().is_cpu() && raw.scalar_type() == torch::kByte && raw.is_contiguous() && raw.numel() % bytes == 0,
                "raws: contiguous uint8 tensors of whole ", t.name, " rows of ", columns, " weights (", bytes, " bytes)");
    for (int64_t r = 0; r < raw.numel() / bytes; ++r) source.push_back(raw.data_ptr<uint8_t>() + r * bytes);
  }
  const int64_t rows = static_cast<int64_t>(source.size());
  if (order) source = ordered_rows(source, *order);
  PackJob job;
  job.blocks = (rows + kBlockChannels - 1) / kBlockChannels;
  job.packed = torch::empty({job.blocks, blocks * sb}, torch::dtype(torch::kByte));
  uint8_t* to = job.packed.data_ptr<uint8_t>();
  job.pack_block = [=, source = std::move(source), &t, keep = raws](int64_t channel_block) {  // keep: the rows' owners
    uint8_t* block_out = to + channel_block * blocks * sb;
    std::memset(block_out, 0, blocks * sb);  // padding channels stay zero
    DecodedBlock decoded;
    for (int64_t n = channel_block * kBlockChannels; n < std::min(rows, (channel_block + 1) * kBlockChannels); ++n)
      for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* block = source[n] + b * t.bytes;
        uint8_t* super = block_out + b * sb;
        if (type == BlockType::Q4_K) {
          place_q4_k(block, n % kBlockChannels, super);
        } else if (type == BlockType::Q6_K) {
          place_q6_k(block, n % kBlockChannels, super);
        } else {
          decode_block(type, block, decoded);
          place(t, decoded, n % kBlockChannels, super);
        }
      }
  };
  return job;
}

void run_pack_jobs(const std::vector<PackJob>& jobs) {
  std::vector<std::pair<size_t, int64_t>> items;  // (job, channel block)
  for (size_t j = 0; j < jobs.size(); ++j)
    for (int64_t b = 0; b < jobs[j].blocks; ++b) items.emplace_back(j, b);
  const int64_t n = static_cast<int64_t>(items.size());
  // dynamic: a thread the OS parks (the tokenizer loads beside the packing) leaves its share to the others
#pragma omp parallel for schedule(dynamic, 8) num_threads(at::get_num_threads())
  for (int64_t i = 0; i < n; ++i) jobs[items[i].first].pack_block(items[i].second);
}

torch::Tensor block_pack(const std::vector<torch::Tensor>& raws, int64_t columns, const std::string& kind,
                         const std::optional<torch::Tensor>& order) {
  std::vector<PackJob> jobs{block_pack_job(raws, columns, kind, order)};
  run_pack_jobs(jobs);
  return jobs[0].packed;
}

std::vector<torch::Tensor> pack_file_weights(const std::vector<PackSpec>& specs) {
  std::vector<PackJob> jobs;
  for (const auto& [raws, columns, kind, order] : specs) {
    const bool is_float = kind == "f16" || kind == "bf16" || kind == "f32";
    jobs.push_back(is_float ? float_pack_job(raws, columns, kind, order) : block_pack_job(raws, columns, kind, order));
  }
  run_pack_jobs(jobs);
  std::vector<torch::Tensor> packed;
  for (const auto& job : jobs) packed.push_back(job.packed);
  return packed;
}

torch::Tensor gguf_dequantize_rows(const torch::Tensor& raw, int64_t columns, const std::string& kind, const torch::Tensor& ids) {
  TORCH_CHECK(ids.device().is_cpu() && ids.scalar_type() == torch::kLong, "ids: int64 on CPU");
  TORCH_CHECK(raw.device().is_cpu() && raw.scalar_type() == torch::kByte && raw.is_contiguous(), "raw: contiguous uint8 GGUF blocks");
  const auto flat = ids.contiguous().view(-1);
  const int64_t T = flat.numel();
  auto out = torch::empty({T, columns}, torch::TensorOptions().dtype(torch::kFloat));
  const int64_t* idp = flat.data_ptr<int64_t>();
  const uint8_t* from = raw.data_ptr<uint8_t>();
  float* op = out.data_ptr<float>();
  const bool plain = kind == "f32" || kind == "f16" || kind == "bf16";
  const int64_t element = kind == "f32" ? 4 : 2;
  const bool half = kind == "f16";
  const BlockType type = plain ? BlockType::Q4_0 : block_type(kind);
  const int64_t bytes = plain ? columns * element : row_bytes(traits(type), columns), rows = raw.numel() / bytes;
  TORCH_CHECK(raw.numel() % bytes == 0, "raw is not whole rows of ", columns, " ", kind, " weights");
  for (int64_t i = 0; i < T; ++i) TORCH_CHECK(idp[i] >= 0 && idp[i] < rows, "row id ", idp[i], " outside the tensor's ", rows, " rows");
  at::parallel_for(0, T, 1, [&](int64_t begin, int64_t end) {
    DecodedBlock decoded;
    for (int64_t i = begin; i < end; ++i) {
      const uint8_t* row = from + idp[i] * bytes;
      float* o = op + i * columns;
      if (element == 4) {
        std::memcpy(o, row, columns * 4);
      } else if (plain) {
        for (int64_t k = 0; k < columns; ++k) {
          uint16_t bits;
          std::memcpy(&bits, row + 2 * k, 2);
          o[k] = half ? static_cast<float>(c10::Half(bits, c10::Half::from_bits()))
                      : static_cast<float>(c10::BFloat16(bits, c10::BFloat16::from_bits()));
        }
      } else {
        const BlockTraits& t = traits(type);
        for (int64_t b = 0; b < columns / t.weights; ++b) {
          decode_block(type, row + b * t.bytes, decoded);
          dequantize_block(type, decoded, o + b * t.weights);
        }
      }
    }
  });
  auto shape = ids.sizes().vec();
  shape.push_back(columns);
  return out.view(shape);
}

torch::Tensor block_linear(const torch::Tensor& x, const torch::Tensor& packed, int64_t out_features, const std::string& kind,
                           const std::string& isa) {
  TORCH_CHECK(x.device().is_cpu() && x.dim() == 2 && x.scalar_type() == torch::kFloat && x.is_contiguous(),
              "x: contiguous float32 [M, K] on CPU");
  const BlockType type = block_type(kind);
  const BlockTraits& t = kernel_traits(type);
  const int64_t M = x.size(0), K = x.size(1), N = out_features, S = t.weights, sub = t.sub;
  TORCH_CHECK(K % S == 0, "a ", t.name, " weight's K is whole blocks of ", S, ", not ", K);
  TORCH_CHECK(packed.device().is_cpu() && packed.dim() == 2 && packed.scalar_type() == torch::kByte && packed.is_contiguous() &&
                  packed.size(0) == (N + kBlockChannels - 1) / kBlockChannels && packed.size(1) == K / S * superblock_bytes(t),
              "packed: block_pack's blocks of this ", t.name, " [", N, ", ", K, "] weight");
  // "amx" by name (the tests), or "auto" with rows enough where the CPU has the tiles (and no cap forbids them)
  const bool tiles = isa == "amx" ? checked_isa("amx") == "amx" : isa == "auto" && M >= kBlockAmxMinRows && linear_isa() == "amx";
  const BlockDotFn dot = tiles ? nullptr : by_isa<BlockDotFn>(isa, block_dot_avx2, block_dot_avx512bw, block_dot_avx512_vnni);
  const int64_t prefetch = weight_prefetch_bytes();

  std::vector<int8_t> q(M * K);
  std::vector<float> scale(M * K / S);
  std::vector<int32_t> bsum(M * K / sub);
  const float* xp = x.data_ptr<float>();
  at::parallel_for(0, M, 16, [&](int64_t begin, int64_t end) {
    quantize_blocks_int8(xp + begin * K, end - begin, K, S, sub, q.data() + begin * K, scale.data() + begin * (K / S),
                         bsum.data() + begin * (K / sub));
  });
  const ActivationBlocks activations{q.data(), scale.data(), bsum.data(), K};

  auto out = torch::empty({M, N}, x.options());
  float* op = out.data_ptr<float>();
  const uint8_t* wp = packed.data_ptr<uint8_t>();
  const int64_t block_bytes = packed.size(1);
  at::parallel_for(0, packed.size(0), 1, [&](int64_t begin, int64_t end) {
    if (tiles) return block_amx_blocks(type, activations, M, wp, begin, end, prefetch, op, N);
    for (int64_t b = begin; b < end; ++b)
      dot(type, activations, M, wp + b * block_bytes, prefetch, op + b * kBlockChannels, N, std::min(kBlockChannels, N - b * kBlockChannels));
  });
  return out;
}

}  // namespace minivllm
