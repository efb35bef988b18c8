// A Llama-family decoder layer's two halves around attention, one C++ call each (CPU, float32):
// Llama, Mistral, Qwen2/3, Phi-3 and Gemma 3 (its Q/K norms, sandwich norms, GELU-tanh and windows),
// and Qwen3.5 (partial RoPE, a sigmoid output gate, and its Gated DeltaNet layers in decode steps).
//
// Why: at one stream a decode step is ~200 small ops, and Python plus nn.Module dispatch cost
// more per op than most ops themselves. Each half calls the same kernels and aten ops as the
// module path (models/llama.py), in the same order, so its results are the module path's bits.
// Attention stays in Python between the halves (layers/attention/) where prefill chunks need SDPA;
// a step of decodes only runs every layer, attention included, in one call.
#include <ATen/core/dispatch/Dispatcher.h>

#include <cstring>
#include <limits>

#include "common/kernels.h"

namespace minivllm {
namespace {

// What PackedLinear calls (layers/linear/packed.py): oneDNN's linear (float32 or bf16), or MKL's packed SGEMM told the
// call's own row count (the packed layout serves any).
torch::Tensor onednn_linear(const torch::Tensor& x, const torch::Tensor& weight, const std::optional<torch::Tensor>& bias) {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("mkldnn::_linear_pointwise", "");
  std::vector<c10::IValue> stack{x, weight, bias ? c10::IValue(*bias) : c10::IValue(), c10::IValue(std::string("none")),
                                 c10::IValue(c10::List<std::optional<at::Scalar>>()), c10::IValue(std::string(""))};
  op.callBoxed(&stack);
  return stack[0].toTensor();
}

torch::Tensor mkl_linear(const torch::Tensor& x, const torch::Tensor& packed, const torch::Tensor& dense,
                         const std::optional<torch::Tensor>& bias) {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("mkl::_mkl_linear", "");
  std::vector<c10::IValue> stack{x, packed, dense, bias ? c10::IValue(*bias) : c10::IValue(), c10::IValue(x.size(0))};
  op.callBoxed(&stack);
  return stack[0].toTensor();
}

// One row of D values into the cache: float32 as it is, or rounded to float16 to nearest even
// (as torch's .to(torch.float16), so both attention paths store the same bits).
inline void store_row(float* to, const float* from, int64_t D) { std::memcpy(to, from, D * sizeof(float)); }
inline void store_row(at::Half* to, const float* from, int64_t D) {
  for (int64_t d = 0; d < D; ++d) to[d] = c10::Half(from[d]);
}

template <class T>
void write_rows_into(const torch::Tensor& k, const torch::Tensor& v, torch::Tensor& k_cache, torch::Tensor& v_cache,
                     const int64_t* row) {
  const int64_t T_ = k.size(0), kv_heads = k.size(1), D = k.size(2), rows = k_cache.numel() / D;
  T* kc = k_cache.data_ptr<T>();
  T* vc = v_cache.data_ptr<T>();
  const float* kp = k.data_ptr<float>();
  const float* vp = v.data_ptr<float>();
  for (int64_t h = 0; h < kv_heads; ++h) {
    for (int64_t t = 0; t < T_; ++t) {
      const int64_t r = row[h * T_ + t];
      TORCH_CHECK(r >= 0 && r < rows, "write row outside the cache");
      store_row(kc + r * D, kp + t * k.stride(0) + h * k.stride(1), D);
      store_row(vc + r * D, vp + t * v.stride(0) + h * v.stride(1), D);
    }
  }
}

// Copies each new token's K and V into its cache slot: rows of the [kv_heads * slots, D] view, head-major.
void write_kv(const torch::Tensor& k, const torch::Tensor& v, torch::Tensor& k_cache, torch::Tensor& v_cache,
              const torch::Tensor& write_rows) {
  const int64_t T = k.size(0), kv_heads = k.size(1), D = k.size(2);
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous() && k_cache.size(0) == kv_heads && k_cache.size(3) == D,
              "caches: contiguous [kv_heads, blocks, block_size, D]");
  TORCH_CHECK(v_cache.sizes() == k_cache.sizes() && v_cache.scalar_type() == k_cache.scalar_type(), "K and V caches differ");
  TORCH_CHECK(write_rows.scalar_type() == torch::kLong && write_rows.is_contiguous() && write_rows.numel() == kv_heads * T,
              "write_rows: contiguous int64 [kv_heads * T]");
  const int64_t* row = write_rows.data_ptr<int64_t>();
  if (k_cache.scalar_type() == torch::kHalf) return write_rows_into<at::Half>(k, v, k_cache, v_cache, row);
  TORCH_CHECK(k_cache.scalar_type() == torch::kFloat, "caches: float32 or float16");
  write_rows_into<float>(k, v, k_cache, v_cache, row);
}

// oneDNN's GEMM (bf16: rows rounded in, float32 out). Where its one-row kernel sums in another order
// than its many-row one (layers/linear/packed.py), a lone row goes in twice, so a row's result never
// depends on its batch.
torch::Tensor onednn_rows(const torch::Tensor& x, const torch::Tensor& packed, const std::optional<torch::Tensor>& bias,
                          bool bf16, bool pair_single_rows) {
  const bool pair = pair_single_rows && x.size(0) == 1;
  auto rows = pair ? x.expand({2, x.size(1)}) : x;
  if (bf16) rows = rows.to(torch::kBFloat16);
  auto out = onednn_linear(pair ? rows.contiguous() : rows, packed, bias);
  if (pair) out = out.narrow(0, 0, 1);
  return bf16 ? out.to(torch::kFloat) : out;
}

// A DeltaNet layer's token mixing for decode rows: norm, in_proj, the decode step over the state
// pools (gated_deltanet.cpp), as the module computes it; o (its out_proj) and the MLP follow as any layer's.
torch::Tensor deltanet_mix(const LlamaLayerWeights& w, const torch::Tensor& x, torch::Tensor& conv_states, torch::Tensor& rec_states,
                           const torch::Tensor& slots) {
  const DeltaNetMixer& d = *w.deltanet;
  const int64_t value = w.heads * w.head_dim;
  const auto projected = w.qkv(rms_norm(x.contiguous(), w.input_norm, w.eps));
  return gated_deltanet_decode(projected.narrow(1, 0, d.conv_channels), projected.narrow(1, d.conv_channels, value),
                               projected.narrow(1, d.conv_channels + value, w.heads),
                               projected.narrow(1, d.conv_channels + value + w.heads, w.heads), d.conv_weight, d.dt_bias,
                               d.decay_rate, d.norm_weight, d.norm_eps, conv_states, rec_states, slots, d.key_heads, d.tiled_heads);
}

}  // namespace

torch::Tensor Projection::operator()(const torch::Tensor& x) const {
  torch::Tensor out;
  switch (kind) {
    case Kind::Mkl:
      return mkl_linear(x, packed, dense, bias);
    case Kind::OneDnn:
      return onednn_rows(x, packed, bias, false, pair_single_rows);
    case Kind::OneDnnBf16:
      out = onednn_rows(x, packed, std::nullopt, true, pair_single_rows);
      break;
    case Kind::Group:
      out = group_linear(x.contiguous(), group, group_out_features, group_bits, "auto");
      break;
    case Kind::Block:
      out = block_linear(x.contiguous(), group, group_out_features, block_kind, "auto");
      break;
    case Kind::Float:
      out = float_linear(x.contiguous(), group, group_out_features, block_kind, "auto");
      break;
    case Kind::Parts: {
      std::vector<torch::Tensor> outs;
      for (const auto& part : parts) outs.push_back(part(x));
      out = at::cat(outs, -1);
      break;
    }
    case Kind::Int8:
      out = int8_linear(x.contiguous(), int8_weights, int8_scales, "auto");
      break;
  }
  return bias ? out + *bias : out;
}

// Norm, Q/K/V projection, the per-head Q/K norms where the family has them, RoPE on Q and K, and
// K/V written into the cache. Returns q, k, v: [T, heads or kv_heads, D] views, and the output
// gate's [T, heads, D] view where the layer has one (Qwen3.5).
std::vector<torch::Tensor> llama_attention_inputs(const LlamaLayerWeights& w, const torch::Tensor& x, const torch::Tensor& cos,
                                                  const torch::Tensor& sin, torch::Tensor& k_cache, torch::Tensor& v_cache,
                                                  const torch::Tensor& write_rows) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat, "x: float32 [T, hidden]");
  TORCH_CHECK(!w.deltanet, "a DeltaNet layer has no attention inputs");
  const int64_t T = x.size(0);
  const int64_t query_rows = w.output_gate ? 2 * w.heads : w.heads;  // Qwen3.5: [q head 0, gate head 0, q head 1, ...]
  auto qkv = w.qkv(rms_norm(x.contiguous(), w.input_norm, w.eps)).view({T, query_rows + 2 * w.kv_heads, w.head_dim});
  std::optional<torch::Tensor> gate;
  auto q_rows = qkv.narrow(1, 0, w.heads);
  const auto k_rows = qkv.narrow(1, query_rows, w.kv_heads);
  if (w.output_gate) {
    const auto query_gate = qkv.narrow(1, 0, query_rows).view({T, w.heads, 2 * w.head_dim});
    q_rows = query_gate.narrow(2, 0, w.head_dim);
    gate = query_gate.narrow(2, w.head_dim, w.head_dim);
  }
  torch::Tensor qk;
  if (w.q_norm)  // as the modules: each half made contiguous, normed, the halves side by side again
    qk = at::cat({rms_norm(q_rows.contiguous(), *w.q_norm, w.eps), rms_norm(k_rows.contiguous(), *w.k_norm, w.eps)}, 1);
  else  // Q and K side by side already, except where gates sit between the query heads
    qk = w.output_gate ? at::cat({q_rows, k_rows}, 1) : qkv.narrow(1, 0, w.heads + w.kv_heads);
  auto turned = w.rotary_dim > 0 && w.rotary_dim < w.head_dim ? qk.narrow(2, 0, w.rotary_dim) : qk;
  rotary_inplace(turned, cos, sin);
  auto q = qk.narrow(1, 0, w.heads);
  auto k = qk.narrow(1, w.heads, w.kv_heads);
  auto v = qkv.narrow(1, query_rows + w.kv_heads, w.kv_heads);
  write_kv(k, v, k_cache, v_cache, write_rows);
  if (gate) return {q, k, v, *gate};
  return {q, k, v};
}

// The output gate where the layer has one (attention's output times its sigmoid), o_proj (Gemma:
// normed) and the residual; then norm, gate/up, act(gate) * up, down (Gemma: normed) and the residual.
torch::Tensor llama_attention_output_and_mlp(const LlamaLayerWeights& w, const torch::Tensor& x, const torch::Tensor& attended,
                                             const std::optional<torch::Tensor>& output_gate) {
  const int64_t T = x.size(0);
  TORCH_CHECK(output_gate.has_value() == w.output_gate, "the output gate: given exactly where the layer has one");
  auto mixed = attended.reshape({T, w.heads * w.head_dim});
  if (output_gate) mixed = mixed * at::sigmoid(output_gate->reshape({T, w.heads * w.head_dim}));
  auto attention = w.o(mixed);
  if (w.attention_output_norm) attention = rms_norm(attention.contiguous(), *w.attention_output_norm, w.eps);
  auto h = x + attention;
  auto gate_up = w.gate_up(rms_norm(h.contiguous(), w.post_attention_norm, w.eps));
  auto gate = gate_up.narrow(-1, 0, w.intermediate);
  auto gated = (w.gelu_tanh ? at::gelu(gate, "tanh") : at::silu(gate)) * gate_up.narrow(-1, w.intermediate, w.intermediate);
  auto mlp = w.down(gated);
  if (w.mlp_output_norm) mlp = rms_norm(mlp.contiguous(), *w.mlp_output_norm, w.eps);
  return h + mlp;
}

// Every layer of a decode-only step: each layer's halves with the paged decode attention
// between them, the same calls layers/attention/'s kernel path makes (the window's mask and softmax included).
torch::Tensor llama_decode_layers(const std::vector<const LlamaLayerWeights*>& layers, torch::Tensor x, const torch::Tensor& cos,
                                  const torch::Tensor& sin, const std::vector<torch::Tensor>& k_caches,
                                  const std::vector<torch::Tensor>& v_caches, const torch::Tensor& write_rows,
                                  const torch::Tensor& block_tables, const torch::Tensor& lengths, double scale,
                                  const std::optional<torch::Tensor>& local_cos, const std::optional<torch::Tensor>& local_sin,
                                  const std::optional<torch::Tensor>& window_write_rows,
                                  const std::optional<torch::Tensor>& window_block_tables,
                                  const std::optional<torch::Tensor>& window_lengths,
                                  const std::optional<torch::Tensor>& state_slots) {
  TORCH_CHECK(k_caches.size() == layers.size() && v_caches.size() == layers.size(), "one K and one V cache per layer");
  TORCH_CHECK(local_cos.has_value() == local_sin.has_value(), "local RoPE: both tables or neither");
  TORCH_CHECK(window_write_rows.has_value() == window_block_tables.has_value() && window_block_tables.has_value() == window_lengths.has_value(),
              "the window pool's view: rows, tables and lengths, or none");
  for (size_t i = 0; i < layers.size(); ++i) {
    const LlamaLayerWeights& w = *layers[i];
    if (w.deltanet) {
      TORCH_CHECK(state_slots, "layer ", i, " is a DeltaNet: the call must give each row's state slot");
      torch::Tensor conv_states = k_caches[i], rec_states = v_caches[i];  // handles: the pools are written in place
      x = llama_attention_output_and_mlp(w, x, deltanet_mix(w, x, conv_states, rec_states, *state_slots), std::nullopt);
      continue;
    }
    TORCH_CHECK(!w.local_rope || local_cos, "layer ", i, " rotates with local RoPE tables the call did not give");
    const bool pooled = w.window > 0 && window_write_rows;  // the window pool where the runner keeps one
    const torch::Tensor& rows = pooled ? *window_write_rows : write_rows;
    const torch::Tensor& tables = pooled ? *window_block_tables : block_tables;
    const torch::Tensor& lens = pooled ? *window_lengths : lengths;
    torch::Tensor k_cache = k_caches[i], v_cache = v_caches[i];
    const auto qkv = llama_attention_inputs(w, x, w.local_rope ? *local_cos : cos, w.local_rope ? *local_sin : sin, k_cache, v_cache, rows);
    auto scores = paged_attention_scores(qkv[0].contiguous(), k_cache, tables, lens, scale);
    if (w.window > 0) {  // the kernel scores the whole context; keys before the window drop out (decode_kernels.py)
      const auto keys = at::arange(scores.size(-1), lens.options()).unsqueeze(0);
      scores.masked_fill_((keys < (lens.unsqueeze(1) - w.window)).unsqueeze(1), -std::numeric_limits<float>::infinity());
    }
    const auto attended = paged_attention_values(at::softmax(scores, -1), v_cache, tables, lens);
    x = llama_attention_output_and_mlp(w, x, attended, qkv.size() == 4 ? std::optional<torch::Tensor>(qkv[3]) : std::nullopt);
  }
  return x;
}

}  // namespace minivllm
