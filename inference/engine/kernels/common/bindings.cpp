// Python bindings for the engine's CPU kernels (see kernels/__init__.py for how they load).
#include "common/cpu_isa.h"
#include "common/kernels.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace minivllm;
  // The kernels drop the GIL while they run: a whole decode step can be one call, and the
  // server's event loop must keep streaming meanwhile.
  using nogil = py::call_guard<py::gil_scoped_release>;
  m.def("int8_linear", &int8_linear, nogil(), "x @ (sum of int8 weight levels * their scales).T, float32, exact per row",
        py::arg("x"), py::arg("weights"), py::arg("scales"), py::arg("isa") = "auto");
  m.def("int8_pack_weight", &int8_pack_weight, "an int8 [N, K] weight laid out for int8_linear with that isa",
        py::arg("weight"), py::arg("isa") = "auto");
  m.def("set_isa_cap", &set_isa_cap, "cap the kernels' instruction set: auto, avx2, avx512bw, avx512_vnni or amx", py::arg("isa"));
  m.def("linear_isa", &linear_isa, "the instruction set int8_linear uses on this CPU (group_linear: vector_isa)");
  m.def("vector_isa", &vector_isa, "the best vector (not AMX) version on this CPU");
  m.def("set_weight_prefetch_bytes", &set_weight_prefetch_bytes, "how far ahead int8_linear prefetches weights (0: not at all)");
  m.def("weight_prefetch_bytes", &weight_prefetch_bytes, "how far ahead int8_linear prefetches weights now");
  m.def("group_linear", &group_linear, nogil(), "x @ W.T for 4- or 8-bit weights in groups of 32, int8 activation groups",
        py::arg("x"), py::arg("packed"), py::arg("out_features"), py::arg("bits"), py::arg("isa") = "auto");
  m.def("group_pack_weight", &group_pack_weight, "4- or 8-bit levels, scales and minimums packed for group_linear");
  m.def("gguf_groups", &gguf_groups, nogil(), "a GGUF matrix's q4_0 / q4_1 / q8_0 blocks as levels, scales and minimums");
  m.def("block_pack", &block_pack, nogil(), "GGUF matrices' raw k-quant / 5-bit / IQ4 blocks packed as one weight for block_linear",
        py::arg("raws"), py::arg("columns"), py::arg("kind"), py::arg("order") = py::none());
  m.def("block_linear", &block_linear, nogil(), "x @ W.T for packed GGUF blocks, int8 activation blocks",
        py::arg("x"), py::arg("packed"), py::arg("out_features"), py::arg("kind"), py::arg("isa") = "auto");
  m.def("float_pack", &float_pack, nogil(), "GGUF matrices' f16 / bf16 / f32 rows packed as one weight for float_linear",
        py::arg("raws"), py::arg("columns"), py::arg("kind"), py::arg("order") = py::none());
  m.def("float_linear", &float_linear, nogil(), "x @ W.T for packed f16 / bf16 / f32 weights, float32 sums",
        py::arg("x"), py::arg("packed"), py::arg("out_features"), py::arg("kind"), py::arg("isa") = "auto");
  m.def("expert_linear", &expert_linear, nogil(), "out[r] = x[row_x[r]] @ W[row_expert[r]].T over E stacked packed experts",
        py::arg("x"), py::arg("row_x"), py::arg("row_expert"), py::arg("packed"), py::arg("out_features"), py::arg("kind"),
        py::arg("isa") = "auto");
  m.def("expert_mlp", &expert_mlp, nogil(), "down(act(gate) * up) of each (token, choice)'s expert, block kinds, one call",
        py::arg("x"), py::arg("expert_ids"), py::arg("gate_up"), py::arg("gate_up_kind"), py::arg("down"), py::arg("down_kind"),
        py::arg("intermediate"), py::arg("gelu_tanh") = false, py::arg("isa") = "auto");
  m.def("pack_file_weights", &pack_file_weights, nogil(), "(raws, columns, kind, order) weights packed for their kernels in one call");
  m.def("gguf_dequantize_rows", &gguf_dequantize_rows, nogil(), "rows of a GGUF matrix of any type as float32, from its raw bytes");
  m.def("group_dequantize_rows", &group_dequantize_rows, nogil(), "rows of a packed group weight as float32 (an embedding lookup)");
  m.def("paged_attention_scores", &paged_attention_scores, nogil(), "decode q.k scores read from the paged cache");
  m.def("paged_attention_values", &paged_attention_values, nogil(), "decode probs @ V read from the paged cache");
  m.def("rms_norm", &rms_norm, nogil(), "RMSNorm over float32 rows, HF's order of operations");
  m.def("gated_deltanet_decode", &gated_deltanet_decode, nogil(),
        "a Gated DeltaNet layer's decode rows: conv, rule and gated norm, the state pools advanced in place", py::arg("mixed"),
        py::arg("z"), py::arg("b"), py::arg("a"), py::arg("conv_weight"), py::arg("dt_bias"), py::arg("decay_rate"),
        py::arg("norm_weight"), py::arg("eps"), py::arg("conv_states"), py::arg("rec_states"), py::arg("slots"),
        py::arg("key_heads"), py::arg("tiled_heads"));
  m.def("gated_deltanet_conv", &gated_deltanet_conv, nogil(), "a prefill chunk's causal convolution and SiLU, its state carried in place",
        py::arg("x"), py::arg("conv_weight"), py::arg("state"));
  m.def("rotary_inplace", &rotary_inplace, nogil(), "rotate-half RoPE in place over [T, heads, D]");

  // One constructor per kind, so a projection always says which weights it holds.
  py::class_<Projection>(m, "Projection")
      .def_static("int8",
                  [](std::vector<torch::Tensor> weights, std::vector<torch::Tensor> scales, std::optional<torch::Tensor> bias) {
                    Projection p{Projection::Kind::Int8};
                    p.int8_weights = std::move(weights);
                    p.int8_scales = std::move(scales);
                    p.bias = std::move(bias);
                    return p;
                  })
      .def_static("group",
                  [](torch::Tensor packed, int64_t out_features, int64_t bits, std::optional<torch::Tensor> bias) {
                    Projection p{Projection::Kind::Group};
                    p.group = std::move(packed);
                    p.group_out_features = out_features;
                    p.group_bits = bits;
                    p.bias = std::move(bias);
                    return p;
                  })
      .def_static("block",
                  [](torch::Tensor packed, int64_t out_features, std::string kind, std::optional<torch::Tensor> bias) {
                    Projection p{Projection::Kind::Block};
                    p.group = std::move(packed);
                    p.group_out_features = out_features;
                    p.block_kind = std::move(kind);
                    p.bias = std::move(bias);
                    return p;
                  })
      .def_static("float_weights",
                  [](torch::Tensor packed, int64_t out_features, std::string kind, std::optional<torch::Tensor> bias) {
                    Projection p{Projection::Kind::Float};
                    p.group = std::move(packed);
                    p.group_out_features = out_features;
                    p.block_kind = std::move(kind);
                    p.bias = std::move(bias);
                    return p;
                  })
      .def_static("parts",
                  [](std::vector<Projection> parts, std::optional<torch::Tensor> bias) {
                    Projection p{Projection::Kind::Parts};
                    p.parts = std::move(parts);
                    p.bias = std::move(bias);
                    return p;
                  })
      .def_static("onednn",
                  [](torch::Tensor packed, std::optional<torch::Tensor> bias, bool pair_single_rows) {
                    Projection p{Projection::Kind::OneDnn};
                    p.packed = std::move(packed);
                    p.bias = std::move(bias);
                    p.pair_single_rows = pair_single_rows;
                    return p;
                  })
      .def_static("onednn_bf16",
                  [](torch::Tensor packed, std::optional<torch::Tensor> bias, bool pair_single_rows) {
                    Projection p{Projection::Kind::OneDnnBf16};
                    p.packed = std::move(packed);
                    p.bias = std::move(bias);
                    p.pair_single_rows = pair_single_rows;
                    return p;
                  })
      .def_static("mkl",
                  [](torch::Tensor packed, torch::Tensor dense, std::optional<torch::Tensor> bias) {
                    Projection p{Projection::Kind::Mkl};
                    p.packed = std::move(packed);
                    p.dense = std::move(dense);
                    p.bias = std::move(bias);
                    return p;
                  })
      .def("__call__", [](const Projection& p, const torch::Tensor& x) { return p(x); }, nogil(), "x @ W.T (+ bias), float32")
      .def_property_readonly("kind", [](const Projection& p) {
        switch (p.kind) {
          case Projection::Kind::Int8: return "int8";
          case Projection::Kind::Group: return "group";
          case Projection::Kind::Block: return "block";
          case Projection::Kind::Float: return "float";
          case Projection::Kind::Parts: return "parts";
          case Projection::Kind::OneDnn: return "onednn";
          case Projection::Kind::OneDnnBf16: return "onednn_bf16";
          case Projection::Kind::Mkl: return "mkl";
        }
        return "unknown";
      });
  py::class_<DeltaNetMixer>(m, "DeltaNetMixer")
      .def(py::init([](torch::Tensor conv_weight, torch::Tensor dt_bias, torch::Tensor decay_rate, torch::Tensor norm_weight,
                       double norm_eps, int64_t key_heads, int64_t conv_channels, bool tiled_heads) {
             return DeltaNetMixer{std::move(conv_weight), std::move(dt_bias), std::move(decay_rate), std::move(norm_weight),
                                  norm_eps, key_heads, conv_channels, tiled_heads};
           }),
           py::arg("conv_weight"), py::arg("dt_bias"), py::arg("decay_rate"), py::arg("norm_weight"), py::arg("norm_eps"),
           py::arg("key_heads"), py::arg("conv_channels"), py::arg("tiled_heads"));
  py::class_<LlamaLayerWeights>(m, "LlamaLayerWeights")
      .def(py::init([](torch::Tensor input_norm, torch::Tensor post_attention_norm, double eps, Projection qkv, Projection o,
                       Projection gate_up, Projection down, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t intermediate,
                       std::optional<torch::Tensor> q_norm, std::optional<torch::Tensor> k_norm,
                       std::optional<torch::Tensor> attention_output_norm, std::optional<torch::Tensor> mlp_output_norm,
                       bool gelu_tanh, int64_t window, bool local_rope, int64_t rotary_dim, bool output_gate,
                       std::optional<DeltaNetMixer> deltanet) {
             TORCH_CHECK(q_norm.has_value() == k_norm.has_value(), "Q and K norms: both or neither");
             TORCH_CHECK(rotary_dim >= 0 && rotary_dim <= head_dim && rotary_dim % 2 == 0, "rotary_dim: even, at most head_dim");
             return LlamaLayerWeights{std::move(input_norm), std::move(post_attention_norm), eps, std::move(qkv), std::move(o),
                                      std::move(gate_up), std::move(down), heads, kv_heads, head_dim, intermediate,
                                      std::move(q_norm), std::move(k_norm), std::move(attention_output_norm),
                                      std::move(mlp_output_norm), gelu_tanh, window, local_rope, rotary_dim, output_gate,
                                      std::move(deltanet)};
           }),
           py::arg("input_norm"), py::arg("post_attention_norm"), py::arg("eps"), py::arg("qkv"), py::arg("o"),
           py::arg("gate_up"), py::arg("down"), py::arg("heads"), py::arg("kv_heads"), py::arg("head_dim"), py::arg("intermediate"),
           py::arg("q_norm") = py::none(), py::arg("k_norm") = py::none(), py::arg("attention_output_norm") = py::none(),
           py::arg("mlp_output_norm") = py::none(), py::arg("gelu_tanh") = false, py::arg("window") = 0,
           py::arg("local_rope") = false, py::arg("rotary_dim") = 0, py::arg("output_gate") = false,
           py::arg("deltanet") = py::none())
      .def_readonly("window", &LlamaLayerWeights::window)
      .def_readonly("local_rope", &LlamaLayerWeights::local_rope)
      .def_readonly("rotary_dim", &LlamaLayerWeights::rotary_dim)
      .def_property_readonly("is_deltanet", [](const LlamaLayerWeights& w) { return w.deltanet.has_value(); });
  m.def("llama_attention_inputs", &llama_attention_inputs, nogil(), "norm, QKV, RoPE and the cache write of a Llama layer");
  m.def("llama_attention_output_and_mlp", &llama_attention_output_and_mlp, nogil(), "o_proj, residual, norm and MLP of a Llama layer",
        py::arg("weights"), py::arg("x"), py::arg("attended"), py::arg("gate") = py::none());
  m.def("llama_decode_layers", &llama_decode_layers, nogil(), "every Llama-family layer of a decode-only step, paged attention included",
        py::arg("layers"), py::arg("x"), py::arg("cos"), py::arg("sin"), py::arg("k_caches"), py::arg("v_caches"), py::arg("write_rows"),
        py::arg("block_tables"), py::arg("lengths"), py::arg("scale"), py::arg("local_cos") = py::none(),
        py::arg("local_sin") = py::none(), py::arg("window_write_rows") = py::none(), py::arg("window_block_tables") = py::none(),
        py::arg("window_lengths") = py::none(), py::arg("state_slots") = py::none());
}
