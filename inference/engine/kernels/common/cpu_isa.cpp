#include "common/cpu_isa.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

#include <torch/extension.h>

namespace minivllm {
namespace {

const char* const kByReach[] = {"avx2", "avx512bw", "avx512_vnni", "amx"};  // a CPU that runs one runs those before it
constexpr int kIsas = 4, kAvx512bw = 1, kAvx512Vnni = 2, kAmx = 3;

int reach(const std::string& isa) {
  for (int i = 0; i < kIsas; ++i)
    if (isa == kByReach[i]) return i;
  return -1;
}

bool cpu_has_amx_int8_tiles() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return (d >> 24 & 1) && (d >> 25 & 1);  // CPUID.7.0:EDX AMX-TILE, AMX-INT8
}

// Linux (5.16 and later) hands a process the 8 KB of tile state only when asked, once for all its threads.
bool os_grants_tile_state() {
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

// The cap EngineConfig.cpu_isa sets (set_isa_cap; MINIVLLM_CPU_ISA reaches it only through the
// config): the best version at most, to compare versions on one machine. kAmx: no cap.
std::atomic<int> g_cap{kAmx};

// The best this CPU runs, capped: AMX is asked of Linux only when the cap allows it.
int best_under(int capped) {
  const int top = capped >= kAmx && cpu_has_amx() ? kAmx : cpu_has_avx512_vnni() ? kAvx512Vnni : cpu_has_avx512bw() ? kAvx512bw : 0;
  return std::min(top, capped);
}

}  // namespace

bool cpu_has_avx512bw() { return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"); }
bool cpu_has_avx512_vnni() { return cpu_has_avx512bw() && __builtin_cpu_supports("avx512vnni"); }

bool cpu_has_amx() {
  // (VBMI: the block kernel's tiles are rebuilt with byte permutes; every AMX CPU so far has it)
  static const bool usable = cpu_has_avx512_vnni() && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                             __builtin_cpu_supports("avx512vbmi") && cpu_has_amx_int8_tiles() && os_grants_tile_state();
  return usable;
}

void set_isa_cap(const std::string& isa) {
  const int capped = isa == "auto" ? kAmx : reach(isa);
  TORCH_CHECK(capped >= 0, "the ISA cap must be auto, avx2, avx512bw, avx512_vnni or amx, not ", isa);
  g_cap = capped;
}

std::string linear_isa() { return kByReach[best_under(g_cap)]; }

std::string vector_isa() {
  const std::string best = linear_isa();
  return best == "amx" ? "avx512_vnni" : best;
}

std::string checked_isa(const std::string& requested) {
  if (requested == "auto") return linear_isa();
  TORCH_CHECK(reach(requested) >= 0, "isa must be auto, avx2, avx512bw, avx512_vnni or amx");
  TORCH_CHECK(requested != "avx2" || __builtin_cpu_supports("f16c"), "this CPU has no F16C");
  TORCH_CHECK(requested != "avx512bw" || cpu_has_avx512bw(), "this CPU has no AVX-512BW");
  TORCH_CHECK(requested != "avx512_vnni" || cpu_has_avx512_vnni(), "this CPU has no AVX-512 VNNI");
  TORCH_CHECK(requested != "amx" || cpu_has_amx(), "this CPU (or its OS) offers no AMX-INT8 tiles");
  return requested;
}

std::string checked_vector_isa(const std::string& requested) {
  if (requested == "auto") return vector_isa();
  const std::string isa = checked_isa(requested);
  TORCH_CHECK(isa != "amx", "isa amx takes weights packed for it (int8_pack_weight with isa \"amx\"); this kernel has no AMX version (the grouped and block kernels take \"amx\" themselves)");
  return isa;
}

}  // namespace minivllm
