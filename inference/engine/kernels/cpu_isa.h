// Which version of the int8 and 4-bit kernels this CPU runs. Both come in the same three
// instruction sets; the best first: avx512_vnni, avx512bw, avx2 (with FMA and F16C, which every
// AVX2 CPU has). Every version of a kernel gives the same bits, so the choice changes speed only.
#pragma once
#include <string>

namespace minivllm {

bool cpu_has_avx512_vnni();
bool cpu_has_avx512bw();
std::string linear_isa();  // the best this CPU runs

// "auto": the best; a name (tests run each version): itself, once this CPU is known to run it.
std::string checked_isa(const std::string& requested);

template <class Fn>
Fn by_isa(const std::string& requested, Fn avx2, Fn avx512bw, Fn avx512_vnni) {
  const std::string isa = checked_isa(requested);
  return isa == "avx512_vnni" ? avx512_vnni : isa == "avx512bw" ? avx512bw : avx2;
}

}  // namespace minivllm
