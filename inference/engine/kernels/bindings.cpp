// Python bindings for the engine's CPU kernels (see kernels/__init__.py for how they load).
#include <torch/extension.h>

namespace minivllm {
torch::Tensor int8_linear(const torch::Tensor& x, const std::vector<torch::Tensor>& weights, const std::vector<torch::Tensor>& scales,
                          const std::string& isa);
std::string int8_linear_isa();
torch::Tensor paged_attention_scores(const torch::Tensor& q, const torch::Tensor& k_cache, const torch::Tensor& block_tables,
                                     const torch::Tensor& lengths, double scale);
torch::Tensor paged_attention_values(const torch::Tensor& probs, const torch::Tensor& v_cache, const torch::Tensor& block_tables,
                                     const torch::Tensor& lengths);
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);
void rotary_inplace(torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
}  // namespace minivllm

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("int8_linear", &minivllm::int8_linear, "x @ (sum of int8 weight levels * their scales).T, float32, exact per row",
        py::arg("x"), py::arg("weights"), py::arg("scales"), py::arg("isa") = "auto");
  m.def("int8_linear_isa", &minivllm::int8_linear_isa, "the instruction set int8_linear uses on this CPU");
  m.def("paged_attention_scores", &minivllm::paged_attention_scores, "decode q.k scores read from the paged cache");
  m.def("rms_norm", &minivllm::rms_norm, "RMSNorm over float32 rows, HF's order of operations");
  m.def("rotary_inplace", &minivllm::rotary_inplace, "rotate-half RoPE in place over [T, heads, D]");
  m.def("paged_attention_values", &minivllm::paged_attention_values, "decode probs @ V read from the paged cache");
}
