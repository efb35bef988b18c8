// AVX-512 VNNI version of the int8 dot products (int8_dot.h): vpdpwssd over 32 elements at a time.
//
// Everything after the target pragma is compiled for AVX-512 and runs only where
// cpu_has_avx512_vnni() (cpu_isa.h) says so. No torch header is included: an inline function from a shared
// header compiled here could be the copy the linker keeps, and crash on an AVX2-only CPU.
#include <immintrin.h>

#include <cstdint>

#include "int8/int8_dot.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vnni")
#include "int8/int8_dot_avx512_lanes.h"
#include "int8/int8_dot_loop.h"

namespace minivllm {
namespace {

struct Avx512Vnni : Avx512Lanes {
  static Acc multiply_add(Acc acc, Acc x, Acc w) { return _mm512_dpwssd_epi32(acc, x, w); }
};

}  // namespace

void int8_dot_avx512_vnni(const int16_t* x0, const int16_t* x1, const int8_t* w, int64_t K, int64_t count, int64_t prefetch,
                          int64_t* out0, int64_t* out1) {
  dot_any<Avx512Vnni>(x0, x1, w, K, count, prefetch, out0, out1);
}

}  // namespace minivllm
#pragma GCC pop_options
