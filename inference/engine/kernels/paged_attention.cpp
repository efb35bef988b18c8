// Decode attention that reads K and V from the paged cache in place (float32, AVX2).
//
// The torch path gathers each sequence's blocks into a padded copy per layer before its two
// matmuls; at 32 sequences of a few hundred tokens that copy costs as much as the maths. Here
// each (sequence, kv head) task walks its block table directly: one query token per sequence,
// the query heads of a GQA group sharing every K/V row read. Softmax stays in torch between
// the two calls (its vectorized exp), which is why there are two kernels, not one.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <limits>
#include <vector>

#include "simd.h"
#include "kernels.h"

namespace minivllm {
namespace {

struct PagedView {
  int64_t kv_heads, num_blocks, block_size, dim;
  const float* data;
  // Row of token `t` of kv head `h`, given the sequence's block table.
  const float* row(int64_t h, const int64_t* table, int64_t t) const {
    return data + ((h * num_blocks + table[t / block_size]) * block_size + t % block_size) * dim;
  }
};

PagedView view_of(const torch::Tensor& cache) {
  TORCH_CHECK(cache.dim() == 4 && cache.scalar_type() == torch::kFloat && cache.is_contiguous(),
              "cache: contiguous float32 [kv_heads, num_blocks, block_size, head_dim]");
  TORCH_CHECK(cache.size(3) % 8 == 0, "head_dim must be a multiple of 8");
  return {cache.size(0), cache.size(1), cache.size(2), cache.size(3), cache.data_ptr<float>()};
}

// Every length within its table and every block within the cache: the kernels index with them unchecked.
void check_tables(const torch::Tensor& tables, const torch::Tensor& lengths, int64_t batch, const PagedView& cache) {
  TORCH_CHECK(tables.dim() == 2 && tables.size(0) == batch && tables.scalar_type() == torch::kLong && tables.is_contiguous(),
              "block_tables: contiguous int64 [batch, blocks]");
  TORCH_CHECK(lengths.numel() == batch && lengths.scalar_type() == torch::kLong && lengths.is_contiguous(), "lengths: contiguous int64 [batch]");
  const int64_t* lens = lengths.data_ptr<int64_t>();
  const int64_t* blocks = tables.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch; ++b)
    TORCH_CHECK(lens[b] > 0 && lens[b] <= tables.size(1) * cache.block_size, "length outside its block table");
  for (int64_t i = 0; i < tables.numel(); ++i)
    TORCH_CHECK(blocks[i] >= 0 && blocks[i] < cache.num_blocks, "block id outside the cache");
}

// Score rows are as wide as the block tables, rounded up to whole 16-float vectors, never
// just the longest length: torch's softmax sums a row narrower than a vector in another order
// than a wider one, so a short sequence's probabilities would change with the batch beside
// it. With whole vectors, the -inf padding only adds exact zeros.
constexpr int64_t kRowAlign = 16;

int64_t score_width(const torch::Tensor& block_tables, int64_t block_size) {
  return (block_tables.size(1) * block_size + kRowAlign - 1) / kRowAlign * kRowAlign;
}

}  // namespace

// [B, heads, score_width] scaled q.k scores; -inf past each sequence's length.
torch::Tensor paged_attention_scores(const torch::Tensor& q, const torch::Tensor& k_cache, const torch::Tensor& block_tables,
                                     const torch::Tensor& lengths, double scale) {
  TORCH_CHECK(q.dim() == 3 && q.scalar_type() == torch::kFloat && q.is_contiguous(), "q: contiguous float32 [B, heads, head_dim]");
  const PagedView keys = view_of(k_cache);
  const int64_t batch = q.size(0), heads = q.size(1), dim = q.size(2);
  TORCH_CHECK(dim == keys.dim && heads % keys.kv_heads == 0, "q does not fit the cache");
  check_tables(block_tables, lengths, batch, keys);
  const int64_t group = heads / keys.kv_heads;
  const int64_t* lens = lengths.data_ptr<int64_t>();
  const int64_t width = score_width(block_tables, keys.block_size);
  auto scores = torch::empty({batch, heads, width}, q.options());
  const float* qp = q.data_ptr<float>();
  const int64_t* tables = block_tables.data_ptr<int64_t>();
  float* sp = scores.data_ptr<float>();
  const float s = static_cast<float>(scale);
  at::parallel_for(0, batch * keys.kv_heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / keys.kv_heads, h = task % keys.kv_heads;
      const int64_t* table = tables + b * block_tables.size(1);
      const float* query = qp + (b * heads + h * group) * dim;
      float* out = sp + (b * heads + h * group) * width;
      for (int64_t t = 0; t < lens[b]; ++t) {
        const float* key = keys.row(h, table, t);
        for (int64_t g = 0; g < group; ++g) out[g * width + t] = dot(query + g * dim, key, dim) * s;
      }
      for (int64_t g = 0; g < group; ++g)
        std::fill(out + g * width + lens[b], out + (g + 1) * width, -std::numeric_limits<float>::infinity());
    }
  });
  return scores;
}

// [B, heads, head_dim]: each head's probabilities over its sequence's values.
torch::Tensor paged_attention_values(const torch::Tensor& probs, const torch::Tensor& v_cache, const torch::Tensor& block_tables,
                                     const torch::Tensor& lengths) {
  TORCH_CHECK(probs.dim() == 3 && probs.scalar_type() == torch::kFloat && probs.is_contiguous(), "probs: contiguous float32 [B, heads, L]");
  const PagedView values = view_of(v_cache);
  const int64_t batch = probs.size(0), heads = probs.size(1), width = probs.size(2), dim = values.dim;
  TORCH_CHECK(heads % values.kv_heads == 0, "probs do not fit the cache");
  check_tables(block_tables, lengths, batch, values);
  TORCH_CHECK(width >= block_tables.size(1) * values.block_size, "probs narrower than the block tables");
  const int64_t group = heads / values.kv_heads;
  const int64_t* lens = lengths.data_ptr<int64_t>();
  auto out = torch::zeros({batch, heads, dim}, probs.options());
  const float* pp = probs.data_ptr<float>();
  const int64_t* tables = block_tables.data_ptr<int64_t>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, batch * values.kv_heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / values.kv_heads, h = task % values.kv_heads;
      const int64_t* table = tables + b * block_tables.size(1);
      const float* p = pp + (b * heads + h * group) * width;
      float* acc = op + (b * heads + h * group) * dim;
      for (int64_t t = 0; t < lens[b]; ++t) {
        const float* value = values.row(h, table, t);
        for (int64_t g = 0; g < group; ++g) axpy(p[g * width + t], value, acc + g * dim, dim);
      }
    }
  });
  return out;
}

}  // namespace minivllm
