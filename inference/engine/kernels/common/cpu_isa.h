// Which version of the int8, grouped and block kernels this CPU runs. Each comes in three vector
// instruction sets, the best first: avx512_vnni, avx512bw, avx2 (with FMA and F16C, which every
// AVX2 CPU has). Above them is "amx", the integer sums on AMX's int8 tile unit: the int8 kernel's
// with the weights in a layout of its own (int8_amx.h), the grouped and block kernels' over their
// usual layout for steps of 16 rows and more (group_amx.h, block_amx.h). Every version of a kernel
// gives the same bits, so the choice changes speed only.
#pragma once
#include <string>

namespace minivllm {

bool cpu_has_avx512_vnni();
bool cpu_has_avx512bw();
bool cpu_has_amx();  // AMX-INT8 tiles, AVX-512 (VNNI, VBMI) for around them, and Linux's leave to use the tile state

// Caps every later choice below (EngineConfig.cpu_isa; "auto": none). Set before weights are packed:
// int8 weights packed for AMX stay in AMX's layout.
void set_isa_cap(const std::string& isa);
std::string linear_isa();  // the best this CPU runs, at most the cap
std::string vector_isa();  // the best vector version: the 4-bit kernel's, and int8's for weights in the vector layout

// "auto": the best; a name (tests run each version): itself, once this CPU is known to run it.
std::string checked_isa(const std::string& requested);

// A vector version: "auto" gives vector_isa(); a name must be one this CPU runs, and not "amx".
std::string checked_vector_isa(const std::string& requested);

template <class Fn>
Fn by_isa(const std::string& requested, Fn avx2, Fn avx512bw, Fn avx512_vnni) {
  const std::string isa = checked_vector_isa(requested);
  return isa == "avx512_vnni" ? avx512_vnni : isa == "avx512bw" ? avx512bw : avx2;
}

}  // namespace minivllm
