// A mixture-of-experts layer's linear: each of R rows multiplies one x row by one of E experts'
// weights, stacked in block_pack's (or float_pack's) layout. Rows are grouped by expert, so each
// chosen expert's weights are read once for all the rows that chose it, and an expert no row chose
// is never read. Every row's result is the bits block_linear (float_linear) gives it alone on that
// expert's weight: never dependent on the rows beside it, the same on every ISA.
//
// expert_mlp is a whole expert feed-forward in one call (block kinds): gate/up, act(gate) * up and
// down over the rows sorted by expert once, each token's x quantized once for its k experts; a
// row's bits those of expert_linear, the activation (a slab of rows a thread) and expert_linear.
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

// A stacked block-kind weight as the dots read it, checked against the call's shape.
struct StackedBlocks {
  BlockType type;
  const uint8_t* data;
  int64_t E, NB, N, block_bytes;
};

StackedBlocks stacked_blocks(const torch::Tensor& packed, const std::string& kind, int64_t N, int64_t K) {
  const BlockType type = block_type(kind);
  const BlockTraits& t = traits(type);
  TORCH_CHECK(t.levels != LevelBits::Byte && type != BlockType::Q4_0 && type != BlockType::Q4_1,
              t.name, " weights run through the group kernel (gguf_groups, group_linear)");
  TORCH_CHECK(K % t.weights == 0, "a ", t.name, " weight's K is whole blocks of ", t.weights, ", not ", K);
  const int64_t NB = (N + kBlockChannels - 1) / kBlockChannels, block_bytes = K / t.weights * superblock_bytes(t);
  TORCH_CHECK(packed.device().is_cpu() && packed.dim() == 3 && packed.scalar_type() == torch::kByte && packed.is_contiguous() &&
                  packed.size(1) == NB && packed.size(2) == block_bytes,
              "packed: uint8 [E, ", NB, ", ", block_bytes, "], each expert's block_pack blocks of a ", kind, " [", N, ", ", K,
              "] weight, experts stacked; not ", packed.sizes());
  return {type, packed.data_ptr<uint8_t>(), packed.size(0), NB, N, block_bytes};
}

// Rows of K floats quantized for a block type (block_dot.h), one after the other.
struct QuantizedRows {
  std::vector<int8_t> q;
  std::vector<float> scale;
  std::vector<int32_t> bsum;
  int64_t K, S, sub;
  QuantizedRows(int64_t rows, int64_t K_, BlockType type) : K(K_), S(traits(type).weights), sub(traits(type).sub) {
    q.resize(rows * K);
    scale.resize(rows * K / S);
    bsum.resize(rows * K / sub);
  }
  void quantize(const float* x, int64_t row, int64_t count) {
    quantize_blocks_int8(x, count, K, S, sub, q.data() + row * K, scale.data() + row * (K / S), bsum.data() + row * (K / sub));
  }
  void copy_row(const QuantizedRows& from, int64_t from_row, int64_t row) {
    std::memcpy(q.data() + row * K, from.q.data() + from_row * K, K);
    std::memcpy(scale.data() + row * (K / S), from.scale.data() + from_row * (K / S), K / S * sizeof(float));
    std::memcpy(bsum.data() + row * (K / sub), from.bsum.data() + from_row * (K / sub), K / sub * sizeof(int32_t));
  }
  ActivationBlocks from(int64_t row) const { return {q.data() + row * K, scale.data() + row * (K / S), bsum.data() + row * (K / sub), K}; }
};

// out (sorted order, [R, N]) = each sorted row's activations @ its expert's weight.T, parallel over
// the chosen experts' channel blocks.
void sorted_block_products(const ExpertGroups& g, const StackedBlocks& w, const QuantizedRows& x, float* out, const std::string& isa) {
  const BlockDotFn dot = by_isa<BlockDotFn>(isa, block_dot_avx2, block_dot_avx512bw, block_dot_avx512_vnni);
  const int64_t prefetch = weight_prefetch_bytes(), NB = w.NB, N = w.N;
  // A block's prefetches reach `prefetch` bytes past its end: allowed only while they stay in
  // chosen experts' bytes (the work items after it), so an unchosen expert's weights are never
  // touched, not even by a prefetch. reach[e]: where the run of chosen experts from e ends.
  std::vector<int64_t> reach(w.E, 0);
  for (int64_t e = w.E - 1; e >= 0; --e)
    reach[e] = e + 1 < w.E && g.start[e + 2] > g.start[e + 1] ? reach[e + 1] : (e + 1) * NB * w.block_bytes;
  over_expert_blocks(g, NB, [&](int64_t e, int64_t b) {
    const int64_t first = g.start[e], offset = (e * NB + b) * w.block_bytes;
    dot(w.type, x.from(first), g.start[e + 1] - first, w.data + offset, offset + w.block_bytes + prefetch <= reach[e] ? prefetch : 0,
        out + first * N + b * kBlockChannels, N, std::min(kBlockChannels, N - b * kBlockChannels));
  });
}

// Sorted rows back to the caller's order: out[order[i]] = sorted[i].
void unsort(const ExpertGroups& g, const float* sorted, float* out, int64_t N) {
  const int64_t R = static_cast<int64_t>(g.order.size());
  at::parallel_for(0, R, 64, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) std::memcpy(out + g.order[i] * N, sorted + i * N, N * sizeof(float));
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
  const int64_t NB = (N + kBlockChannels - 1) / kBlockChannels;
  const FloatWeight weight = kind == "f16" ? FloatWeight::F16 : kind == "bf16" ? FloatWeight::BF16 : FloatWeight::F32;
  const int64_t float_block_bytes = K * kFloatChannels * float_bytes(weight);  // as float_linear checks it
  if (is_float)
    TORCH_CHECK(packed.device().is_cpu() && packed.dim() == 3 && packed.scalar_type() == torch::kByte && packed.is_contiguous() &&
                    packed.size(1) == NB && packed.size(2) == float_block_bytes,
                "packed: uint8 [E, ", NB, ", ", float_block_bytes, "], each expert's float_pack blocks of a ", kind, " [", N, ", ", K,
                "] weight, experts stacked; not ", packed.sizes());
  const int64_t E = is_float ? packed.size(0) : stacked_blocks(packed, kind, N, K).E;
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
  std::vector<float> sorted(R * N);  // the outputs in sorted order: each expert's rows one stride apart, as the dots write them
  float* sp = sorted.data();

  if (is_float) {
    const FloatDotFn dot = by_isa<FloatDotFn>(isa, float_dot_avx2, float_avx512_dot, float_avx512_dot);
    const uint8_t* wp = packed.data_ptr<uint8_t>();
    std::vector<float> xs(R * K);  // x's rows in sorted order: a group's rows contiguous, as the dot reads them
    at::parallel_for(0, R, 64, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) std::memcpy(xs.data() + i * K, xp + which_x[g.order[i]] * K, K * sizeof(float));
    });
    over_expert_blocks(g, NB, [&](int64_t e, int64_t b) {
      const int64_t first = g.start[e];
      dot(weight, xs.data() + first * K, g.start[e + 1] - first, K, wp + (e * NB + b) * float_block_bytes,
          sp + first * N + b * kFloatChannels, N, std::min(kFloatChannels, N - b * kFloatChannels));
    });
  } else {
    // Each sorted row quantized on its own (a row's levels never depend on another's): a few times
    // x's rows for top-k routing, cheap beside the products.
    QuantizedRows sorted_x(R, K, block_type(kind));
    at::parallel_for(0, R, 16, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) sorted_x.quantize(xp + which_x[g.order[i]] * K, i, 1);
    });
    sorted_block_products(g, stacked_blocks(packed, kind, N, K), sorted_x, sp, isa);
  }
  unsort(g, sp, out.data_ptr<float>(), N);
  return out;
}

torch::Tensor expert_mlp(const torch::Tensor& x, const torch::Tensor& expert_ids, const torch::Tensor& gate_up,
                         const std::string& gate_up_kind, const torch::Tensor& down, const std::string& down_kind, int64_t intermediate,
                         bool gelu_tanh, const std::string& isa) {
  TORCH_CHECK(x.device().is_cpu() && x.dim() == 2 && x.scalar_type() == torch::kFloat && x.is_contiguous(),
              "x: contiguous float32 [T, H] on CPU");
  TORCH_CHECK(expert_ids.device().is_cpu() && expert_ids.dim() == 2 && expert_ids.scalar_type() == torch::kLong &&
                  expert_ids.is_contiguous() && expert_ids.size(0) == x.size(0),
              "expert_ids: contiguous int64 [T, k] on CPU, a row per x row");
  TORCH_CHECK(intermediate > 0, "intermediate: ", intermediate, " <= 0");
  const int64_t T = x.size(0), H = x.size(1), k = expert_ids.size(1), R = T * k, I = intermediate;
  const StackedBlocks gu = stacked_blocks(gate_up, gate_up_kind, 2 * I, H), dn = stacked_blocks(down, down_kind, H, I);
  TORCH_CHECK(gu.E == dn.E, "gate_up and down: the same experts, not ", gu.E, " and ", dn.E);
  const int64_t* which_expert = expert_ids.data_ptr<int64_t>();
  for (int64_t r = 0; r < R; ++r)
    TORCH_CHECK(which_expert[r] >= 0 && which_expert[r] < gu.E, "expert_ids[", r / k, ", ", r % k, "] = ", which_expert[r],
                " outside the ", gu.E, " experts");
  auto out = torch::empty({R, H}, x.options());
  if (R == 0) return out;
  const ExpertGroups g = group_by_expert(which_expert, R, gu.E);

  // each token's x quantized once (its levels are the same for each of its k experts), copied to its sorted rows
  QuantizedRows tokens(T, H, gu.type), sorted_x(R, H, gu.type);
  at::parallel_for(0, T, 16, [&](int64_t begin, int64_t end) { tokens.quantize(x.data_ptr<float>() + begin * H, begin, end - begin); });
  at::parallel_for(0, R, 64, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) sorted_x.copy_row(tokens, g.order[i] / k, i);
  });
  auto gate_up_out = torch::empty({R, 2 * I}, x.options());
  sorted_block_products(g, gu, sorted_x, gate_up_out.data_ptr<float>(), isa);

  // act(gate) * up per slab of sorted rows, each slab in one thread (so a row's elements go through
  // the same vector loop whatever its neighbours), then quantized for down
  QuantizedRows hidden(R, I, dn.type);
  at::parallel_for(0, R, 16, [&](int64_t begin, int64_t end) {
    const auto slab = gate_up_out.narrow(0, begin, end - begin), gate = slab.narrow(1, 0, I);
    const auto h = ((gelu_tanh ? at::gelu(gate, "tanh") : at::silu(gate)) * slab.narrow(1, I, I)).contiguous();
    hidden.quantize(h.data_ptr<float>(), begin, end - begin);
  });
  std::vector<float> sorted(R * H);
  sorted_block_products(g, dn, hidden, sorted.data(), isa);
  unsort(g, sorted.data(), out.data_ptr<float>(), H);
  return out;
}

}  // namespace minivllm
