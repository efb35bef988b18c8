// The decoding of each GGUF block type (block_types.h): where its bytes keep each weight's level,
// its scales and its minimums, read as llama.cpp's ggml-quants.c (and gguf-py) lay them out.
#include "blocks/block_types.h"

#include <c10/util/Half.h>
#include <c10/util/Exception.h>

#include <cstring>

namespace minivllm {
namespace {

constexpr BlockTraits kTraits[] = {
    {"q4_0", 32, 18, 32, 8, LevelBits::Nibble},        {"q4_1", 32, 20, 32, 0, LevelBits::Nibble},
    {"q5_0", 32, 22, 32, 16, LevelBits::Nibble1},      {"q5_1", 32, 24, 32, 0, LevelBits::Nibble1},
    {"q8_0", 32, 34, 32, 128, LevelBits::Byte},        {"iq4_nl", 32, 18, 32, 128, LevelBits::NibbleTable},
    {"q2_k", 256, 84, 16, 0, LevelBits::Nibble},       {"q3_k", 256, 110, 16, 4, LevelBits::Nibble},
    {"q4_k", 256, 144, 32, 0, LevelBits::Nibble},      {"q5_k", 256, 176, 32, 0, LevelBits::Nibble1},
    {"q6_k", 256, 210, 16, 32, LevelBits::Nibble2},    {"iq4_xs", 256, 136, 32, 128, LevelBits::NibbleTable},
};

uint16_t u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

float half(uint16_t bits) { return static_cast<float>(c10::Half(bits, c10::Half::from_bits())); }

// 32 weights whose low 4 bits are nibbles: weight i < 16 in byte i's low nibble, 16 + i in its high one.
void nibbles32(const uint8_t* qs, uint8_t* level) {
  for (int i = 0; i < 16; ++i) {
    level[i] = qs[i] & 15;
    level[16 + i] = qs[i] >> 4;
  }
}

}  // namespace

// Q4_K / Q5_K's 12 bytes of 6-bit scales and minimums for 8 sub-blocks.
void k_scales_of(const uint8_t* s, int8_t* sc, int8_t* mn) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = static_cast<int8_t>(s[j] & 63);
    mn[j] = static_cast<int8_t>(s[j + 4] & 63);
    sc[j + 4] = static_cast<int8_t>((s[j + 8] & 15) | ((s[j] >> 6) << 4));
    mn[j + 4] = static_cast<int8_t>((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
  }
}

namespace {

// Q4_K / Q5_K's 128 bytes of nibbles: weight 64c + 32h + l in byte 32c + l, low nibble for h = 0.
void k_nibbles(const uint8_t* qs, uint8_t* level) {
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      level[64 * c + l] = qs[32 * c + l] & 15;
      level[64 * c + 32 + l] = qs[32 * c + l] >> 4;
    }
}

}  // namespace

const uint8_t kIq4Levels[16] = {1, 24, 45, 63, 79, 93, 106, 118, 129, 141, 153, 166, 181, 197, 217, 241};

const BlockTraits& traits(BlockType type) { return kTraits[static_cast<int>(type)]; }

BlockType block_type(const std::string& name) {
  for (int i = 0; i < static_cast<int>(sizeof(kTraits) / sizeof(kTraits[0])); ++i)
    if (name == kTraits[i].name) return static_cast<BlockType>(i);
  TORCH_CHECK(false, "no kernel reads GGUF blocks of type ", name);
}

void decode_block(BlockType type, const uint8_t* b, DecodedBlock& out) {
  for (int j = 0; j < 16; ++j) out.sc[j] = 1;
  switch (type) {
    case BlockType::Q4_0:
      out.d = u16(b);
      nibbles32(b + 2, out.level);
      return;
    case BlockType::Q4_1:
      out.d = u16(b);
      out.dmin = u16(b + 2) ^ 0x8000;  // w = d * q + m = d * q - (-m)
      out.mn[0] = 1;
      nibbles32(b + 4, out.level);
      return;
    case BlockType::Q5_0:
    case BlockType::Q5_1: {
      const bool minimum = type == BlockType::Q5_1;
      out.d = u16(b);
      if (minimum) {
        out.dmin = u16(b + 2) ^ 0x8000;
        out.mn[0] = 1;
      }
      const uint8_t* q = b + (minimum ? 4 : 2);
      uint32_t high;
      std::memcpy(&high, q, 4);
      nibbles32(q + 4, out.level);
      for (int i = 0; i < 32; ++i) out.level[i] |= ((high >> i) & 1) << 4;
      return;
    }
    case BlockType::Q8_0:
      out.d = u16(b);
      for (int i = 0; i < 32; ++i) out.level[i] = static_cast<uint8_t>(static_cast<int8_t>(b[2 + i]) + 128);
      return;
    case BlockType::IQ4_NL:
      out.d = u16(b);
      nibbles32(b + 2, out.level);
      for (int i = 0; i < 32; ++i) out.level[i] = kIq4Levels[out.level[i]];
      return;
    case BlockType::Q2_K: {  // scales[16], qs[64], d, dmin
      const uint8_t* qs = b + 16;
      for (int j = 0; j < 16; ++j) {
        out.sc[j] = static_cast<int8_t>(b[j] & 15);
        out.mn[j] = static_cast<int8_t>(b[j] >> 4);
      }
      for (int h = 0; h < 2; ++h)  // weight 128h + 32t + l: bits 2t of byte 32h + l
        for (int t = 0; t < 4; ++t)
          for (int l = 0; l < 32; ++l) out.level[128 * h + 32 * t + l] = (qs[32 * h + l] >> (2 * t)) & 3;
      out.d = u16(b + 80);
      out.dmin = u16(b + 82);
      return;
    }
    case BlockType::Q3_K: {  // hmask[32], qs[64], scales[12], d
      const uint8_t *hmask = b, *qs = b + 32, *s = b + 96;
      for (int j = 0; j < 16; ++j) {
        const int low = j < 8 ? s[j] & 15 : s[j - 8] >> 4;
        const int high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        out.sc[j] = static_cast<int8_t>((low | high << 4) - 32);
      }
      for (int h = 0; h < 2; ++h)
        for (int t = 0; t < 4; ++t)
          for (int l = 0; l < 32; ++l) {
            const int i = 128 * h + 32 * t + l;
            // level = q + 4: the low two bits, plus 4 where the mask bit is set (its value q has no -4 then)
            out.level[i] = static_cast<uint8_t>(((qs[32 * h + l] >> (2 * t)) & 3) | (((hmask[l] >> (i / 32)) & 1) << 2));
          }
      out.d = u16(b + 108);
      return;
    }
    case BlockType::Q4_K:
    case BlockType::Q5_K: {  // d, dmin, scales[12], (Q5_K: qh[32]), qs[128]
      out.d = u16(b);
      out.dmin = u16(b + 2);
      k_scales_of(b + 4, out.sc, out.mn);
      if (type == BlockType::Q4_K) return k_nibbles(b + 16, out.level);
      const uint8_t* qh = b + 16;
      k_nibbles(b + 48, out.level);
      for (int i = 0; i < 256; ++i) out.level[i] |= ((qh[i % 32] >> (i / 32)) & 1) << 4;
      return;
    }
    case BlockType::Q6_K: {  // ql[128], qh[64], scales[16] int8, d
      const uint8_t *ql = b, *qh = b + 128;
      for (int j = 0; j < 16; ++j) out.sc[j] = static_cast<int8_t>(b[192 + j]);
      for (int h = 0; h < 2; ++h) {
        for (int s = 0; s < 2; ++s)  // weight 128h + 64s + l: nibble s of byte 64h + l
          for (int l = 0; l < 64; ++l) out.level[128 * h + 64 * s + l] = (ql[64 * h + l] >> (4 * s)) & 15;
        for (int t = 0; t < 4; ++t)  // weight 128h + 32t + l: bits 2t of byte 32h + l, as bits 4-5
          for (int l = 0; l < 32; ++l) out.level[128 * h + 32 * t + l] |= ((qh[32 * h + l] >> (2 * t)) & 3) << 4;
      }
      out.d = u16(b + 208);
      return;
    }
    case BlockType::IQ4_XS: {  // d, scales_h (u16), scales_l[4], qs[128]
      out.d = u16(b);
      const uint16_t high = u16(b + 2);
      for (int j = 0; j < 8; ++j) {
        const int low = (b[4 + j / 2] >> (4 * (j % 2))) & 15;
        out.sc[j] = static_cast<int8_t>((low | ((high >> (2 * j)) & 3) << 4) - 32);
      }
      const uint8_t* qs = b + 8;
      for (int j = 0; j < 8; ++j) nibbles32(qs + 16 * j, out.level + 32 * j);
      for (int i = 0; i < 256; ++i) out.level[i] = kIq4Levels[out.level[i]];
      return;
    }
  }
}

void dequantize_block(BlockType type, const DecodedBlock& b, float* out) {
  const BlockTraits& t = traits(type);
  const float d = half(b.d);
  for (int i = 0; i < t.weights; ++i) {
    const int j = i / t.sub;
    const float scale = d * static_cast<float>(b.sc[j]);
    if (t.offset) {
      out[i] = scale * static_cast<float>(static_cast<int>(b.level[i]) - t.offset);
    } else {
      const float minimum = half(b.dmin) * static_cast<float>(b.mn[j]);
      out[i] = scale * static_cast<float>(b.level[i]) - minimum;
    }
  }
}

}  // namespace minivllm
