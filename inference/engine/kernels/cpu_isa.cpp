#include "cpu_isa.h"

#include <torch/extension.h>

namespace minivllm {

bool cpu_has_avx512bw() { return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"); }
bool cpu_has_avx512_vnni() { return cpu_has_avx512bw() && __builtin_cpu_supports("avx512vnni"); }

std::string linear_isa() {
  static const std::string best = cpu_has_avx512_vnni() ? "avx512_vnni" : cpu_has_avx512bw() ? "avx512bw" : "avx2";
  return best;
}

std::string checked_isa(const std::string& requested) {
  if (requested == "auto") return linear_isa();
  TORCH_CHECK(requested == "avx2" || requested == "avx512bw" || requested == "avx512_vnni",
              "isa must be auto, avx2, avx512bw or avx512_vnni");
  TORCH_CHECK(requested != "avx2" || __builtin_cpu_supports("f16c"), "this CPU has no F16C");
  TORCH_CHECK(requested != "avx512bw" || cpu_has_avx512bw(), "this CPU has no AVX-512BW");
  TORCH_CHECK(requested != "avx512_vnni" || cpu_has_avx512_vnni(), "this CPU has no AVX-512 VNNI");
  return requested;
}

}  // namespace minivllm
