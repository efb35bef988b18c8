// The kernels' C++ entry points, for the bindings and for kernels that call each other.
#pragma once
#include <torch/extension.h>

#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace minivllm {

torch::Tensor int8_linear(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                          const std::vector<torch::Tensor>& scales, const std::string& isa);
// The int8 weight in the order int8_linear reads it with `isa` ("auto": this CPU's best): for the
// vector versions the same shape (int8_dot.h), for "amx" blocks of 16 channels (int8_amx.h).
torch::Tensor int8_pack_weight(const torch::Tensor& weight, const std::string& isa);
// How far ahead int8_linear prefetches weights, process-wide (bytes, whole cache lines; 0: none).
void set_weight_prefetch_bytes(int64_t bytes);
int64_t weight_prefetch_bytes();
// Weights in groups of 32 (group_dot.h), 4-bit or 8-bit: `levels` uint8 [N, K] (0..15 or 0..255),
// float16 scales and minimums [N, K / 32], W = scale * level + minimum; packed into group_linear's
// blocks of 16 channels, uint8 [ceil(N / 16), K / 32 * group bytes].
torch::Tensor group_pack_weight(const torch::Tensor& levels, const torch::Tensor& scales, const torch::Tensor& minimums, int64_t bits);
torch::Tensor group_linear(const torch::Tensor& x, const torch::Tensor& packed, int64_t out_features, int64_t bits,
                           const std::string& isa);
// A GGUF matrix's Q4_0 / Q4_1 / Q8_0 blocks (`raw`, uint8, rows * columns / 32 blocks) as
// group_pack_weight's levels, scales and minimums: the same values, W = scale * level + minimum.
std::vector<torch::Tensor> gguf_groups(const torch::Tensor& raw, int64_t rows, int64_t columns, const std::string& kind);
// Rows `ids` of the packed weight, de-quantized: an embedding table kept in its packed form.
torch::Tensor group_dequantize_rows(const torch::Tensor& packed, const torch::Tensor& ids, int64_t in_features, int64_t bits);
// GGUF's k-quant, 5-bit and IQ4 block types (blocks/block_dot.h): one or more matrices' raw blocks
// (uint8, whole rows of the file, e.g. a fused gate and up) packed as one weight into block_linear's
// layout, rows taken in `order` (indices into the parts' rows one after the other) where given;
// and x @ W.T over it.
torch::Tensor block_pack(const std::vector<torch::Tensor>& raws, int64_t columns, const std::string& kind,
                         const std::optional<torch::Tensor>& order);
torch::Tensor block_linear(const torch::Tensor& x, const torch::Tensor& packed, int64_t out_features, const std::string& kind,
                           const std::string& isa);
// A GGUF's float16 / bfloat16 / float32 matrices (floats/float_dot.h): their rows packed as one
// weight for float_linear, and x @ W.T over it, widening the weights as they load.
torch::Tensor float_pack(const std::vector<torch::Tensor>& raws, int64_t columns, const std::string& kind,
                         const std::optional<torch::Tensor>& order);
// One weight's packing, split by blocks of 16 output channels so many weights share one parallel
// loop (run_pack_jobs, dynamically scheduled): block_pack and float_pack each run one.
struct PackJob {
  torch::Tensor packed;                         // [blocks, bytes a block], filled by pack_block
  int64_t blocks = 0;
  std::function<void(int64_t)> pack_block;      // fills one block of 16 channels (padding channels zero)
};
PackJob block_pack_job(const std::vector<torch::Tensor>& raws, int64_t columns, const std::string& kind,
                       const std::optional<torch::Tensor>& order);
PackJob float_pack_job(const std::vector<torch::Tensor>& raws, int64_t columns, const std::string& kind,
                       const std::optional<torch::Tensor>& order);
void run_pack_jobs(const std::vector<PackJob>& jobs);
// Many weights packed in one call (raws, columns, kind, order each): block_pack's or float_pack's by kind.
using PackSpec = std::tuple<std::vector<torch::Tensor>, int64_t, std::string, std::optional<torch::Tensor>>;
std::vector<torch::Tensor> pack_file_weights(const std::vector<PackSpec>& specs);
// `rows` in `order` (indices into them): the row order block_pack and float_pack take.
std::vector<const uint8_t*> ordered_rows(const std::vector<const uint8_t*>& rows, const torch::Tensor& order);
torch::Tensor float_linear(const torch::Tensor& x, const torch::Tensor& packed, int64_t out_features, const std::string& kind,
                           const std::string& isa);
// A mixture-of-experts linear: out[r] = x[row_x[r]] @ W[row_expert[r]].T, float32 [R, N], with
// `packed` uint8 [E, ceil(N / 16), bytes a block] each expert's [N, K] weight in block_pack's (block
// kinds) or float_pack's (f16 / bf16 / f32) layout, stacked. Rows grouped by expert: each chosen
// expert's weights read once, an unchosen one never; a row's bits are block_linear's (float_linear's) alone.
torch::Tensor expert_linear(const torch::Tensor& x, const torch::Tensor& row_x, const torch::Tensor& row_expert,
                            const torch::Tensor& packed, int64_t out_features, const std::string& kind, const std::string& isa);
// A whole expert feed-forward for block kinds: each (token, choice) row r = t * k + j of x [T, H]
// and expert_ids [T, k] gives down(act(gate) * up) of its expert, [T * k, H]; gate_up [E, ...] packs
// each expert's gate then up rows (2 * intermediate), down its [H, intermediate]; act SiLU, or
// GELU-tanh. A row's bits are expert_linear's, the activation's and expert_linear's again, the
// activation run on each slab of rows in one thread (torch alone may split a call mid-row between
// threads, where a vector loop's scalar tail can round an element otherwise).
torch::Tensor expert_mlp(const torch::Tensor& x, const torch::Tensor& expert_ids, const torch::Tensor& gate_up,
                         const std::string& gate_up_kind, const torch::Tensor& down, const std::string& down_kind, int64_t intermediate,
                         bool gelu_tanh, const std::string& isa);
// Rows `ids` of a GGUF matrix of any block type (or f32 / f16 / bf16) as float32, from its raw
// bytes: the file's values as gguf-py de-quantizes them (embedding lookups read the file this way).
torch::Tensor gguf_dequantize_rows(const torch::Tensor& raw, int64_t columns, const std::string& kind, const torch::Tensor& ids);
torch::Tensor paged_attention_scores(const torch::Tensor& q, const torch::Tensor& k_cache, const torch::Tensor& block_tables,
                                     const torch::Tensor& lengths, double scale);
torch::Tensor paged_attention_values(const torch::Tensor& probs, const torch::Tensor& v_cache, const torch::Tensor& block_tables,
                                     const torch::Tensor& lengths);
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);
void rotary_inplace(torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

// A Gated DeltaNet layer's decode rows (layers/gated_deltanet.py): from each row's convolution
// input `mixed`, gate z and the b and a of its write strength and decay, its slot's conv and
// recurrent states advanced in place (rows of the pools [slots, kernel - 1, channels] and
// [slots, value heads, key dim, value dim]), and the rule's output under the gated RMSNorm
// returned, float32 [rows, value heads * value dim].
torch::Tensor gated_deltanet_decode(const torch::Tensor& mixed, const torch::Tensor& z, const torch::Tensor& b, const torch::Tensor& a,
                                    const torch::Tensor& conv_weight, const torch::Tensor& dt_bias, const torch::Tensor& decay_rate,
                                    const torch::Tensor& norm_weight, double eps, torch::Tensor& conv_states, torch::Tensor& rec_states,
                                    const torch::Tensor& slots, int64_t key_heads, bool tiled_heads);

// A prefill chunk's causal convolution then SiLU: x [T, channels] after the K-1 inputs in `state`
// ([K-1, channels], replaced in place by the last K-1 inputs), float32 [T, channels].
torch::Tensor gated_deltanet_conv(const torch::Tensor& x, const torch::Tensor& conv_weight, torch::Tensor& state);

// One projection as the loader left it (layers/linear/: each format builds its own kind): int8
// levels with their scales, packed 4- or 8-bit groups, packed GGUF blocks, or a packed float32
// weight for oneDNN, for oneDNN in bf16 (rows go in as bf16, outputs come back float32), or for
// MKL (with the plain weight); or parts side by side (a fused Q/K/V whose tensors differ in type).
struct Projection {
  enum class Kind { Int8, Group, Block, Float, Parts, OneDnn, OneDnnBf16, Mkl };
  Kind kind;
  std::vector<torch::Tensor> int8_weights, int8_scales;  // Int8
  torch::Tensor group;                                   // Group: group_pack_weight's blocks; Block / Float: block_pack's / float_pack's
  int64_t group_out_features = 0, group_bits = 0;        // Group, Block and Float (out features)
  std::string block_kind;                                // Block / Float: the GGUF type
  std::vector<Projection> parts;                         // Parts: each part's outputs, concatenated
  torch::Tensor packed, dense;  // OneDnn / OneDnnBf16 / Mkl: the packed weight; Mkl: the plain one too
  bool pair_single_rows = false;  // OneDnn(Bf16): a lone row goes in twice (oneDNN's one-row kernel sums in another order)
  std::optional<torch::Tensor> bias;
  torch::Tensor operator()(const torch::Tensor& x) const;
};

// A Gated DeltaNet token mixer's own weights (a hybrid's linear layer, layers/gated_deltanet.py):
// its in_proj gives [conv channels | z (value heads * value dim) | b (value heads) | a (value heads)].
struct DeltaNetMixer {
  torch::Tensor conv_weight, dt_bias, decay_rate, norm_weight;
  double norm_eps;
  int64_t key_heads, conv_channels;
  bool tiled_heads;
};

// A Llama-family decoder layer's weights and shape, built once at load (models/cpu_step.py). The
// families' extras are optional: Qwen3's and Gemma 3's per-head Q/K norms, Gemma's norms after
// attention and after the MLP (its "sandwich"), its GELU-tanh gate and its sliding window;
// Qwen3.5's partial RoPE and sigmoid output gate, and its Gated DeltaNet layers: where `deltanet`
// is set the layer mixes tokens through it instead of attention, qkv and o are its input and
// output projections and heads x head_dim its value heads x value dim.
struct LlamaLayerWeights {
  torch::Tensor input_norm, post_attention_norm;  // post_attention_norm: the norm before the MLP
  double eps;
  Projection qkv, o, gate_up, down;
  int64_t heads, kv_heads, head_dim, intermediate;
  std::optional<torch::Tensor> q_norm, k_norm;                          // over each head, before RoPE
  std::optional<torch::Tensor> attention_output_norm, mlp_output_norm;  // before each residual add
  bool gelu_tanh = false;                                               // the gate's activation: GELU-tanh, else SiLU
  int64_t window = 0;                                                   // keys a query sees (itself included); 0: all
  bool local_rope = false;                                              // rotates with the model's local RoPE tables
  int64_t rotary_dim = 0;                                               // the leading dims RoPE turns; 0: the whole head
  bool output_gate = false;  // q_proj carries a gate beside each query head; attention's output times its sigmoid
  std::optional<DeltaNetMixer> deltanet;
};

// q, k, v ([T, heads or kv_heads, D] views), and the output gate's [T, heads, D] where the layer has one.
std::vector<torch::Tensor> llama_attention_inputs(const LlamaLayerWeights& w, const torch::Tensor& x, const torch::Tensor& cos,
                                                  const torch::Tensor& sin, torch::Tensor& k_cache, torch::Tensor& v_cache,
                                                  const torch::Tensor& write_rows);
torch::Tensor llama_attention_output_and_mlp(const LlamaLayerWeights& w, const torch::Tensor& x, const torch::Tensor& attended,
                                             const std::optional<torch::Tensor>& output_gate);
// A decode-only step's every layer in one call. A layer with a window reads the window pool's
// rows and tables where the runner keeps one (window_*), else the whole pool's, and masks the keys
// before its window; a layer with local_rope rotates with the local tables (Gemma 3's local layers).
// A DeltaNet layer's "caches" are its conv and recurrent state pools, each row's slot in `state_slots`.
torch::Tensor llama_decode_layers(const std::vector<const LlamaLayerWeights*>& layers, torch::Tensor x, const torch::Tensor& cos,
                                  const torch::Tensor& sin, const std::vector<torch::Tensor>& k_caches,
                                  const std::vector<torch::Tensor>& v_caches, const torch::Tensor& write_rows,
                                  const torch::Tensor& block_tables, const torch::Tensor& lengths, double scale,
                                  const std::optional<torch::Tensor>& local_cos, const std::optional<torch::Tensor>& local_sin,
                                  const std::optional<torch::Tensor>& window_write_rows,
                                  const std::optional<torch::Tensor>& window_block_tables,
                                  const std::optional<torch::Tensor>& window_lengths,
                                  const std::optional<torch::Tensor>& state_slots);

}  // namespace minivllm
