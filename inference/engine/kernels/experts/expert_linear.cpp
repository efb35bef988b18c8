// A mixture-of-experts layer's linear: each of R rows multiplies one x row by one of E experts'
// weights, stacked in block_pack's (or float_pack's) layout. Rows are grouped by expert, so each
// chosen expert's weights are read once for all the rows that chose it, and an expert no row chose
// is never read. Every row's result is the bits block_linear (float_linear) gives it alone on that
// expert's weight: never dependent on the rows beside it, the same on every ISA.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "blocks/block_dot.h"
#include "common/cpu_isa.h"
#include "common/kernels.h"
#include "floats/float_dot.h"

namespace minivllm {
namespace {

static_assert(kBlockChannels == kFloatChannels, "both layouts: blocks of 16 output channels");

bool is_float_kind(const std::string& kind) { return kind == "f16" || kind == "bf16" || kind == "f32"; }

// The rows sorted by expert, keeping their order within one (a counting sort): rows order[start[e]
// .. start[e + 1]) chose expert e.
struct ExpertGroups {
  std::vector<int64_t> order, start;
  std::vector<int64_t> chosen;  // the experts at least one row chose, ascending
};

ExpertGroups group_by_expert(const int64_t* row_expert, int64_t R, int64_t E) {
  ExpertGroups g;
  g.start.assign(E + 1, 0);
  for (int64_t r = 0; r < R; ++r) ++g.start[row_expert[r] + 1];
  for (int64_t e = 0; e < E; ++e) {
    if (g.start[e + 1] > 0) g.chosen.push_back(e);
    g.start[e + 1] += g.start[e];
  }
  g.order.resize(R);
  std::vector<int64_t> next(g.start.begin(), g.start.end() - 1);
  for (int64_t r = 0; r < R; ++r) g.order[next[row_expert[r]]++] = r;
  return g;
}

// Work item i: chosen expert i / NB's channel block i % NB, with `run(e, b)`; parallel over all of them.
template <class Run>
void over_expert_blocks(const ExpertGroups& g, int64_t NB, const Run& run) {
  at::parallel_for(0, static_cast<int64_t>(g.chosen.size()) * NB, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) run(g.chosen[i / NB], i % NB);
  });
}

void float_avx512_dot(FloatWeight weight, const float* x, int64_t rows, int64_t K, const uint8_t* block, float* out,
                      int64_t out_stride, int64_t channels) {
  float_dot_avx512(weight, x, rows, K, block, out, out_stride, channels);
}

}  // namespace

torch::Tensor expert_linear(const torch::Tensor& x, const torch::Tensor& row_x, const torch::Tensor& row_expert,
                            const torch::Tensor& packed, int64_t out_features, const std::string& kind, const std::string& isa) {
  TORCH_CHECK(x.device().is_cpu() && x.dim() == 2 && x.scalar_type() == torch::kFloat && x.is_contiguous(),
              "x: contiguous float32 [X, K] on CPU");
  for (const auto* ids : {&row_x, &row_expert})
    TORCH_CHECK(ids->device().is_cpu() && ids->dim() == 1 && ids->scalar_type() == torch::kLong && ids->is_contiguous(),
                "row_x and row_expert: contiguous int64 [R] on CPU");
  TORCH_CHECK(row_x.numel() == row_expert.numel(), "row_x and row_expert: one entry per output row, not ", row_x.numel(), " and ",
              row_expert.numel());
  TORCH_CHECK(out_features >= 0, "out_features: ", out_features, " < 0");
  const bool is_float = is_float_kind(kind);
  const int64_t X = x.size(0), K = x.size(1), N = out_features, R = row_x.numel();
  // the layout's bytes a block of 16 channels, as block_linear / float_linear check them
  int64_t block_bytes = 0;
  BlockType type = BlockType::Q4_0;
  FloatWeight weight = FloatWeight::F32;
  if (is_float) {
    weight = kind == "f16" ? FloatWeight::F16 : kind == "bf16" ? FloatWeight::BF16 : FloatWeight::F32;
    block_bytes = K * kFloatChannels * float_bytes(weight);
  } else {
    type = block_type(kind);
    const BlockTraits& t = traits(type);
    TORCH_CHECK(t.levels != LevelBits::Byte && type != BlockType::Q4_0 && type != BlockType::Q4_1,
                t.name, " weights run through the group kernel (gguf_groups, group_linear)");
    TORCH_CHECK(K % t.weights == 0, "a ", t.name, " weight's K is whole blocks of ", t.weights, ", not ", K);
    block_bytes = K / t.weights * superblock_bytes(t);
  }
  const int64_t NB = (N + kBlockChannels - 1) / kBlockChannels;
  TORCH_CHECK(packed.device().is_cpu() && packed.dim() == 3 && packed.scalar_type() == torch::kByte && packed.is_contiguous() &&
                  packed.size(1) == NB && packed.size(2) == block_bytes,
              "packed: uint8 [E, ", NB, ", ", block_bytes, "], each expert's ", is_float ? "float_pack" : "block_pack",
              " blocks of a ", kind, " [", N, ", ", K, "] weight, experts stacked; not ", packed.sizes());
  const int64_t E = packed.size(0);
  const int64_t* which_x = row_x.data_ptr<int64_t>();
  const int64_t* which_expert = row_expert.data_ptr<int64_t>();
  for (int64_t r = 0; r < R; ++r) {
    TORCH_CHECK(which_x[r] >= 0 && which_x[r] < X, "row_x[", r, "] = ", which_x[r], " outside x's ", X, " rows");
    TORCH_CHECK(which_expert[r] >= 0 && which_expert[r] < E, "row_expert[", r, "] = ", which_expert[r], " outside the ", E,
                " experts");
  }
  auto out = torch::empty({R, N}, x.options());
  if (R == 0 || N == 0) return out;

  const ExpertGroups g = group_by_expert(which_expert, R, E);
  const float* xp = x.data_ptr<float>();
  const uint8_t* wp = packed.data_ptr<uint8_t>();
  std::vector<float> sorted(R * N);  // the outputs in sorted order: each expert's rows one stride apart, as the dots write them
  float* sp = sorted.data();

  if (is_float) {
    const FloatDotFn dot = by_isa<FloatDotFn>(isa, float_dot_avx2, float_avx512_dot, float_avx512_dot);
    std::vector<float> xs(R * K);  // x's rows in sorted order: a group's rows contiguous, as the dot reads them
    at::parallel_for(0, R, 64, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) std::memcpy(xs.data() + i * K, xp + which_x[g.order[i]] * K, K * sizeof(float));
    });
    over_expert_blocks(g, NB, [&](int64_t e, int64_t b) {
      const int64_t first = g.start[e];
      dot(weight, xs.data() + first * K, g.start[e + 1] - first, K, wp + (e * NB + b) * block_bytes,
          sp + first * N + b * kFloatChannels, N, std::min(kFloatChannels, N - b * kFloatChannels));
    });
  } else {
    const BlockTraits& t = traits(type);
    const int64_t S = t.weights, sub = t.sub;
    const BlockDotFn dot = by_isa<BlockDotFn>(isa, block_dot_avx2, block_dot_avx512bw, block_dot_avx512_vnni);
    const int64_t prefetch = weight_prefetch_bytes();
    // Each sorted row quantized on its own (a row's levels never depend on another's): a few times
    // x's rows for top-k routing, cheap beside the products.
    std::vector<int8_t> q(R * K);
    std::vector<float> scale(R * K / S);
    std::vector<int32_t> bsum(R * K / sub);
    at::parallel_for(0, R, 16, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        quantize_blocks_int8(xp + which_x[g.order[i]] * K, 1, K, S, sub, q.data() + i * K, scale.data() + i * (K / S),
                             bsum.data() + i * (K / sub));
    });
    // A block's prefetches reach `prefetch` bytes past its end: allowed only while they stay in
    // chosen experts' bytes (the work items after it), so an unchosen expert's weights are never
    // touched, not even by a prefetch. reach[e]: where the run of chosen experts from e ends.
    std::vector<int64_t> reach(E, 0);
    for (int64_t e = E - 1; e >= 0; --e)
      reach[e] = e + 1 < E && g.start[e + 2] > g.start[e + 1] ? reach[e + 1] : (e + 1) * NB * block_bytes;
    over_expert_blocks(g, NB, [&](int64_t e, int64_t b) {
      const int64_t first = g.start[e], offset = (e * NB + b) * block_bytes;
      const ActivationBlocks activations{q.data() + first * K, scale.data() + first * (K / S), bsum.data() + first * (K / sub), K};
      dot(type, activations, g.start[e + 1] - first, wp + offset, offset + block_bytes + prefetch <= reach[e] ? prefetch : 0,
          sp + first * N + b * kBlockChannels, N, std::min(kBlockChannels, N - b * kBlockChannels));
    });
  }

  // back to the caller's order
  float* op = out.data_ptr<float>();
  at::parallel_for(0, R, 64, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) std::memcpy(op + g.order[i] * N, sp + i * N, N * sizeof(float));
  });
  return out;
}

}  // namespace minivllm
