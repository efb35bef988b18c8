// A Gated DeltaNet layer's decode step (layers/gated_deltanet.py) over every decoding row in one
// call, float32: the decay and write strength from the row's a and b, the causal convolution's
// state shifted and its output (SiLU), q and k L2-normalised (q scaled), the gated delta rule over
// the recurrent state, and the RMSNorm gated by silu(z).
//
// Why: the torch form gathers each row's state by slot, runs ~20 small ops and scatters the state
// back; at one stream that costs more than the layer's arithmetic. Here each row reads and writes
// its slot's rows of the state pools in place, and the rule makes two passes over a state where
// the batched products made three (plus the gather's and the scatter's copies).
//
// A prefill chunk's convolution (gated_deltanet_conv) runs here too: torch's unfold-and-einsum (or its
// depthwise conv1d) took ~140 ms for 1,000 tokens of 6,144 channels, ~20x its arithmetic.
//
// Rows are independent and each (row, value head) is summed in one fixed order, so a row's bits
// never depend on the batch it decodes in.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <vector>

#include "common/kernels.h"

namespace minivllm {
namespace {

inline float silu(float x) { return x / (1.0f + std::exp(-x)); }

inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }  // torch's threshold of 20

// x / sqrt(sum(x^2) + eps), scaled: the reference's L2 norm (not F.normalize's max(norm, eps)).
inline void l2_normalize(float* x, int64_t n, float scale) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += x[i] * x[i];
  const float inv = scale / std::sqrt(sum + 1e-6f);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

// The rule for one (row, value head): S [dk, dv] decays by exp(g), takes the write
// k (beta (v - decayed S^T k))^T, and is read by q. Two passes over S: the read of what it
// remembers, then the update fused with the output's read.
void delta_rule(float* S, const float* q, const float* k, const float* v, float g, float beta, int64_t dk, int64_t dv,
                float* out, float* delta) {
  const float decay = std::exp(g);
  for (int64_t j = 0; j < dv; ++j) delta[j] = 0.0f;
  for (int64_t i = 0; i < dk; ++i) {
    const float ki = k[i];
    const float* row = S + i * dv;
    for (int64_t j = 0; j < dv; ++j) delta[j] += ki * row[j];
  }
  for (int64_t j = 0; j < dv; ++j) {
    delta[j] = (v[j] - delta[j] * decay) * beta;
    out[j] = 0.0f;
  }
  for (int64_t i = 0; i < dk; ++i) {
    const float ki = k[i], qi = q[i];
    float* row = S + i * dv;
    for (int64_t j = 0; j < dv; ++j) {
      row[j] = row[j] * decay + ki * delta[j];
      out[j] += qi * row[j];
    }
  }
}

// RMSNorm of one value head's output times silu(z), in place.
void gated_norm(float* x, const float* z, const float* weight, int64_t dv, float eps) {
  float sum = 0.0f;
  for (int64_t j = 0; j < dv; ++j) sum += x[j] * x[j];
  const float inv = 1.0f / std::sqrt(sum / static_cast<float>(dv) + eps);
  for (int64_t j = 0; j < dv; ++j) x[j] = (x[j] * inv) * weight[j] * silu(z[j]);
}

void check_rows(const torch::Tensor& t, int64_t rows, int64_t width, const char* name) {
  TORCH_CHECK(t.scalar_type() == torch::kFloat && t.dim() == 2 && t.size(0) == rows && t.size(1) == width && t.stride(1) == 1,
              name, ": float32 [rows, ", width, "] with unit column stride");
}

void check_vector(const torch::Tensor& t, int64_t n, const char* name) {
  TORCH_CHECK(t.scalar_type() == torch::kFloat && t.is_contiguous() && t.numel() == n, name, ": contiguous float32 [", n, "]");
}

}  // namespace

torch::Tensor gated_deltanet_decode(const torch::Tensor& mixed, const torch::Tensor& z, const torch::Tensor& b, const torch::Tensor& a,
                                    const torch::Tensor& conv_weight, const torch::Tensor& dt_bias, const torch::Tensor& decay_rate,
                                    const torch::Tensor& norm_weight, double eps, torch::Tensor& conv_states, torch::Tensor& rec_states,
                                    const torch::Tensor& slots, int64_t key_heads, bool tiled_heads) {
  TORCH_CHECK(rec_states.scalar_type() == torch::kFloat && rec_states.is_contiguous() && rec_states.dim() == 4,
              "rec_states: contiguous float32 [slots, value heads, key dim, value dim]");
  const int64_t pool = rec_states.size(0), H = rec_states.size(1), dk = rec_states.size(2), dv = rec_states.size(3);
  const int64_t B = mixed.size(0), C = mixed.size(1), K = conv_weight.size(1);
  TORCH_CHECK(key_heads > 0 && H % key_heads == 0, "value heads must be a multiple of key heads");
  TORCH_CHECK(C == 2 * key_heads * dk + H * dv, "mixed: [rows, 2 * key heads * key dim + value heads * value dim]");
  check_rows(mixed, B, C, "mixed");
  check_rows(z, B, H * dv, "z");
  check_rows(b, B, H, "b");
  check_rows(a, B, H, "a");
  TORCH_CHECK(conv_weight.scalar_type() == torch::kFloat && conv_weight.is_contiguous() && conv_weight.size(0) == C && K >= 2,
              "conv_weight: contiguous float32 [channels, kernel]");
  TORCH_CHECK(conv_states.scalar_type() == torch::kFloat && conv_states.is_contiguous() && conv_states.dim() == 3 &&
                  conv_states.size(0) == pool && conv_states.size(1) == K - 1 && conv_states.size(2) == C,
              "conv_states: contiguous float32 [slots, kernel - 1, channels]");
  check_vector(dt_bias, H, "dt_bias");
  check_vector(decay_rate, H, "decay_rate");
  check_vector(norm_weight, dv, "norm_weight");
  TORCH_CHECK(slots.scalar_type() == torch::kLong && slots.is_contiguous() && slots.numel() == B, "slots: contiguous int64 [rows]");
  const int64_t* slot = slots.data_ptr<int64_t>();
  for (int64_t r = 0; r < B; ++r) {
    TORCH_CHECK(slot[r] >= 0 && slot[r] < pool, "state slot outside the pool");
    for (int64_t s = 0; s < r; ++s) TORCH_CHECK(slot[s] != slot[r], "two rows share a state slot");
  }

  auto conv_out = torch::empty({B, C}, mixed.options().memory_format(at::MemoryFormat::Contiguous));
  auto out = torch::empty({B, H * dv}, conv_out.options());
  const float* w = conv_weight.data_ptr<float>();
  float* cs = conv_states.data_ptr<float>();
  float* co = conv_out.data_ptr<float>();
  const int64_t key_width = key_heads * dk;
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));

  // The convolution over each row's window (its K-1 kept inputs and itself), the window shifted
  // into the state; then each key head's q and k normalised.
  at::parallel_for(0, B, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* x = mixed.data_ptr<float>() + r * mixed.stride(0);
      float* state = cs + slot[r] * (K - 1) * C;
      float* y = co + r * C;
      for (int64_t c = 0; c < C; ++c) {
        float sum = 0.0f;
        for (int64_t t = 0; t < K - 1; ++t) sum += state[t * C + c] * w[c * K + t];
        sum += x[c] * w[c * K + K - 1];
        y[c] = silu(sum);
      }
      for (int64_t t = 0; t + 1 < K - 1; ++t)
        for (int64_t c = 0; c < C; ++c) state[t * C + c] = state[(t + 1) * C + c];
      for (int64_t c = 0; c < C; ++c) state[(K - 2) * C + c] = x[c];
      for (int64_t h = 0; h < key_heads; ++h) {
        l2_normalize(y + h * dk, dk, q_scale);
        l2_normalize(y + key_width + h * dk, dk, 1.0f);
      }
    }
  });

  // The rule and the gated norm for each (row, value head).
  const int64_t repeat = H / key_heads;
  float* rs = rec_states.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> delta(dv);
    for (int64_t job = begin; job < end; ++job) {
      const int64_t r = job / H, h = job % H;
      const int64_t key_head = tiled_heads ? h % key_heads : h / repeat;
      const float* y = co + r * C;
      const float b_ = b.data_ptr<float>()[r * b.stride(0) + h];
      const float a_ = a.data_ptr<float>()[r * a.stride(0) + h];
      const float g = decay_rate.data_ptr<float>()[h] * softplus(a_ + dt_bias.data_ptr<float>()[h]);
      const float beta = 1.0f / (1.0f + std::exp(-b_));
      float* o = op + r * H * dv + h * dv;
      delta_rule(rs + (slot[r] * H + h) * dk * dv, y + key_head * dk, y + key_width + key_head * dk, y + 2 * key_width + h * dv,
                 g, beta, dk, dv, o, delta.data());
      gated_norm(o, z.data_ptr<float>() + r * z.stride(0) + h * dv, norm_weight.data_ptr<float>(), dv, static_cast<float>(eps));
    }
  });
  return out;
}

torch::Tensor gated_deltanet_conv(const torch::Tensor& x, const torch::Tensor& conv_weight, torch::Tensor& state) {
  const int64_t T = x.size(0), C = x.size(1), K = conv_weight.size(1);
  check_rows(x, T, C, "x");
  TORCH_CHECK(conv_weight.scalar_type() == torch::kFloat && conv_weight.is_contiguous() && conv_weight.size(0) == C && K >= 2,
              "conv_weight: contiguous float32 [channels, kernel]");
  TORCH_CHECK(state.scalar_type() == torch::kFloat && state.is_contiguous() && state.dim() == 2 && state.size(0) == K - 1 &&
                  state.size(1) == C,
              "state: contiguous float32 [kernel - 1, channels]");
  // The taps by position in the window ([K, C]), so the channel loop reads them as it reads the inputs.
  const auto taps = conv_weight.t().contiguous();
  auto out = torch::empty({T, C}, x.options().memory_format(at::MemoryFormat::Contiguous));
  const float* tp = taps.data_ptr<float>();
  const float* xp = x.data_ptr<float>();
  const float* sp = state.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t stride = x.stride(0);
  at::parallel_for(0, T, 16, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* y = op + t * C;
      for (int64_t c = 0; c < C; ++c) y[c] = 0.0f;
      for (int64_t k = 0; k < K; ++k) {
        const int64_t at = t - (K - 1) + k;  // the input this tap reads: a kept one before the chunk where negative
        const float* in = at < 0 ? sp + (K - 1 + at) * C : xp + at * stride;
        const float* tap = tp + k * C;
        for (int64_t c = 0; c < C; ++c) y[c] += tap[c] * in[c];
      }
    }
  });
  // The last K-1 inputs, the chunk's and (where it is shorter) the state's before them, kept for the next.
  const auto kept = T >= K - 1 ? x.narrow(0, T - (K - 1), K - 1).clone() : at::cat({state.narrow(0, T, K - 1 - T), x}, 0);
  state.copy_(kept);
  return at::silu_(out);
}

}  // namespace minivllm
