// Decode attention that reads K and V from the paged cache in place (float32 maths, AVX2; the
// cache float32 or float16, as kv_pool.py allocates it).
//
// The torch path gathers each sequence's blocks into a padded copy per layer before its two
// matmuls; at 32 sequences of a few hundred tokens that copy costs as much as the maths. Here
// each (sequence, kv head) task walks its block table directly: one query token per sequence,
// the query heads of a GQA group sharing every K/V row read. Softmax stays in torch between
// the two calls (its vectorized exp), which is why there are two kernels, not one. A float16
// cache (the CPU default: half the bytes each step reads) is widened to float32 as it is loaded,
// so the sums are the same operations in the same order whichever the cache holds.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "common/simd.h"
#include "common/kernels.h"

namespace minivllm {
namespace {

// 8 cache values as float32: float16 widens exactly (F16C).
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const at::Half* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

template <class T>
struct PagedView {
  int64_t kv_heads, num_blocks, block_size, dim;
  const T* data;
  // Row of token `t` of kv head `h`, given the sequence's block table.
  const T* row(int64_t h, const int64_t* table, int64_t t) const {
    return data + ((h * num_blocks + table[t / block_size]) * block_size + t % block_size) * dim;
  }
};

template <class T>
PagedView<T> view_of(const torch::Tensor& cache) {
  TORCH_CHECK(cache.dim() == 4 && cache.is_contiguous(), "cache: contiguous [kv_heads, num_blocks, block_size, head_dim]");
  TORCH_CHECK(cache.size(3) % 8 == 0, "head_dim must be a multiple of 8");
  return {cache.size(0), cache.size(1), cache.size(2), cache.size(3), cache.data_ptr<T>()};
}

void check_cache_dtype(const torch::Tensor& cache) {
  TORCH_CHECK(cache.scalar_type() == torch::kFloat || cache.scalar_type() == torch::kHalf, "cache: float32 or float16");
}

// dot(query, row) over n values, n a multiple of 8: the same order as simd.h's float32 dot.
template <class T>
inline float dot_row(const float* query, const T* row, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(query + i), load8(row + i), acc);
  return horizontal_sum(acc);
}

// Every length within its table and every block within the cache: the kernels index with them unchecked.
template <class T>
void check_tables(const torch::Tensor& tables, const torch::Tensor& lengths, int64_t batch, const PagedView<T>& cache) {
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

// Scores of 8 consecutive tokens for one query head: 8 accumulators, then one hadd tree.
template <class T>
inline void score_eight(const float* query, const PagedView<T>& keys, int64_t h, const int64_t* table, int64_t t, int64_t dim,
                        float scale, float* out) {
  const T* rows[8];
  for (int64_t j = 0; j < 8; ++j) rows[j] = keys.row(h, table, t + j);
  __m256 acc[8];
  for (auto& a : acc) a = _mm256_setzero_ps();
  for (int64_t d = 0; d < dim; d += 8) {
    const __m256 qv = _mm256_loadu_ps(query + d);
    for (int64_t j = 0; j < 8; ++j) acc[j] = _mm256_fmadd_ps(qv, load8(rows[j] + d), acc[j]);
  }
  _mm256_storeu_ps(out, _mm256_mul_ps(horizontal_sums(acc), _mm256_set1_ps(scale)));
}

// Below this many multiply-adds a call's tasks run on the calling thread: at one sequence of a
// short context the whole call is a few microseconds, less than waking the other threads costs.
constexpr int64_t kInlineWork = 1 << 17;

// at::parallel_for's grain for `tasks` tasks of `work` multiply-adds in all: every task inline
// where the work is small, else one task a thread at the least.
inline int64_t task_grain(int64_t tasks, int64_t work) { return work < kInlineWork ? tasks + 1 : 1; }

inline int64_t total_keys(const int64_t* lens, int64_t batch) {
  int64_t keys = 0;
  for (int64_t b = 0; b < batch; ++b) keys += lens[b];
  return keys;
}

// Up to 32 output floats of up to 3 heads of a group, accumulated in registers over every token
// in order: each output is p[0] * v[0] + p[1] * v[1] + ..., one fused multiply-add per token.
// Several heads per pass share each V load and keep 4-12 independent accumulator chains busy.
constexpr int64_t kValueSlice = 32;
constexpr int64_t kValueHeads = 3;

template <int64_t Heads, int64_t Vectors, class T>
void weighted_sums(const float* p, int64_t width, const PagedView<T>& values, int64_t h, const int64_t* table, int64_t length,
                   int64_t d, float* out, int64_t dim) {
  __m256 acc[Heads][Vectors];
  for (auto& head : acc)
    for (auto& a : head) a = _mm256_setzero_ps();
  for (int64_t t = 0; t < length; ++t) {
    const T* value = values.row(h, table, t) + d;
    __m256 v[Vectors];
    for (int64_t i = 0; i < Vectors; ++i) v[i] = load8(value + 8 * i);
    for (int64_t g = 0; g < Heads; ++g) {
      const __m256 weight = _mm256_set1_ps(p[g * width + t]);
      for (int64_t i = 0; i < Vectors; ++i) acc[g][i] = _mm256_fmadd_ps(weight, v[i], acc[g][i]);
    }
  }
  for (int64_t g = 0; g < Heads; ++g)
    for (int64_t i = 0; i < Vectors; ++i) _mm256_storeu_ps(out + g * dim + 8 * i, acc[g][i]);
}

template <int64_t Heads, class T>
void weighted_sums(const float* p, int64_t width, const PagedView<T>& values, int64_t h, const int64_t* table, int64_t length,
                   int64_t d, int64_t floats, float* out, int64_t dim) {
  switch (floats / 8) {
    case 4: return weighted_sums<Heads, 4, T>(p, width, values, h, table, length, d, out, dim);
    case 3: return weighted_sums<Heads, 3, T>(p, width, values, h, table, length, d, out, dim);
    case 2: return weighted_sums<Heads, 2, T>(p, width, values, h, table, length, d, out, dim);
    default: return weighted_sums<Heads, 1, T>(p, width, values, h, table, length, d, out, dim);
  }
}

template <class T>
inline void weighted_sums(const float* p, int64_t width, const PagedView<T>& values, int64_t h, const int64_t* table,
                          int64_t length, int64_t d, int64_t floats, int64_t heads, float* out, int64_t dim) {
  switch (heads) {
    case 3: return weighted_sums<3, T>(p, width, values, h, table, length, d, floats, out, dim);
    case 2: return weighted_sums<2, T>(p, width, values, h, table, length, d, floats, out, dim);
    default: return weighted_sums<1, T>(p, width, values, h, table, length, d, floats, out, dim);
  }
}

template <class T>
torch::Tensor scores_over(const torch::Tensor& q, const torch::Tensor& k_cache, const torch::Tensor& block_tables,
                          const torch::Tensor& lengths, double scale) {
  const PagedView<T> keys = view_of<T>(k_cache);
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
  const int64_t tasks = batch * keys.kv_heads;
  at::parallel_for(0, tasks, task_grain(tasks, total_keys(lens, batch) * heads * dim), [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / keys.kv_heads, h = task % keys.kv_heads;
      const int64_t* table = tables + b * block_tables.size(1);
      for (int64_t g = 0; g < group; ++g) {
        const float* query = qp + (b * heads + h * group + g) * dim;
        float* out = sp + (b * heads + h * group + g) * width;
        int64_t t = 0;
        for (; t + 8 <= lens[b]; t += 8) score_eight(query, keys, h, table, t, dim, s, out + t);
        for (; t < lens[b]; ++t) out[t] = dot_row(query, keys.row(h, table, t), dim) * s;
        std::fill(out + lens[b], out + width, -std::numeric_limits<float>::infinity());
      }
    }
  });
  return scores;
}

template <class T>
torch::Tensor values_over(const torch::Tensor& probs, const torch::Tensor& v_cache, const torch::Tensor& block_tables,
                          const torch::Tensor& lengths) {
  const PagedView<T> values = view_of<T>(v_cache);
  const int64_t batch = probs.size(0), heads = probs.size(1), width = probs.size(2), dim = values.dim;
  TORCH_CHECK(heads % values.kv_heads == 0, "probs do not fit the cache");
  check_tables(block_tables, lengths, batch, values);
  TORCH_CHECK(width >= block_tables.size(1) * values.block_size, "probs narrower than the block tables");
  const int64_t group = heads / values.kv_heads;
  const int64_t* lens = lengths.data_ptr<int64_t>();
  auto out = torch::empty({batch, heads, dim}, probs.options());
  const float* pp = probs.data_ptr<float>();
  const int64_t* tables = block_tables.data_ptr<int64_t>();
  float* op = out.data_ptr<float>();
  const int64_t tasks = batch * values.kv_heads;
  at::parallel_for(0, tasks, task_grain(tasks, total_keys(lens, batch) * heads * dim), [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / values.kv_heads, h = task % values.kv_heads;
      const int64_t* table = tables + b * block_tables.size(1);
      for (int64_t g = 0; g < group; g += kValueHeads) {
        const float* p = pp + (b * heads + h * group + g) * width;
        float* acc = op + (b * heads + h * group + g) * dim;
        const int64_t heads_now = std::min(kValueHeads, group - g);
        for (int64_t d = 0; d < dim; d += kValueSlice)
          weighted_sums(p, width, values, h, table, lens[b], d, std::min(kValueSlice, dim - d), heads_now, acc + d, dim);
      }
    }
  });
  return out;
}

}  // namespace

// [B, heads, score_width] scaled q.k scores; -inf past each sequence's length.
torch::Tensor paged_attention_scores(const torch::Tensor& q, const torch::Tensor& k_cache, const torch::Tensor& block_tables,
                                     const torch::Tensor& lengths, double scale) {
  TORCH_CHECK(q.dim() == 3 && q.scalar_type() == torch::kFloat && q.is_contiguous(), "q: contiguous float32 [B, heads, head_dim]");
  check_cache_dtype(k_cache);
  if (k_cache.scalar_type() == torch::kHalf) return scores_over<at::Half>(q, k_cache, block_tables, lengths, scale);
  return scores_over<float>(q, k_cache, block_tables, lengths, scale);
}

// [B, heads, head_dim]: each head's probabilities over its sequence's values.
torch::Tensor paged_attention_values(const torch::Tensor& probs, const torch::Tensor& v_cache, const torch::Tensor& block_tables,
                                     const torch::Tensor& lengths) {
  TORCH_CHECK(probs.dim() == 3 && probs.scalar_type() == torch::kFloat && probs.is_contiguous(), "probs: contiguous float32 [B, heads, L]");
  check_cache_dtype(v_cache);
  if (v_cache.scalar_type() == torch::kHalf) return values_over<at::Half>(probs, v_cache, block_tables, lengths);
  return values_over<float>(probs, v_cache, block_tables, lengths);
}

}  // namespace minivllm
