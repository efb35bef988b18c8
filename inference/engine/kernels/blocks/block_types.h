// GGUF's quantized block types, each decoded one way: into unsigned levels, small integer
// sub-block scales (and minimums) and float16 block scales. The de-quantizer (a weight's value,
// bit for bit gguf-py's) and the packer of block_dot.h both start from this decoding, so there is
// one reading of each type's bytes.
//
// Every type's weight is one of two forms over a decoded block (S weights, sub-blocks of `sub`):
//   minimum types (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K): w = (d * sc[j]) * level - (dmin * mn[j])
//   offset types  (Q4_0, Q5_0, Q8_0, IQ4_NL, Q3_K, Q6_K, IQ4_XS): w = (d * sc[j]) * (level - offset)
// with d, dmin float16, sc, mn small integers (1 for the 32-weight types, whose one sub-block is
// the block), level unsigned; IQ4's levels are its table's values plus 128. Q4_1 / Q5_1's
// "+ m" is "- dmin" with dmin = -m, the same bits.
#pragma once
#include <cstdint>
#include <string>

namespace minivllm {

enum class BlockType { Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS };

// How block_dot.h stores a type's levels: 4-bit nibbles, nibbles through IQ4's table, or nibbles
// with one (Q5) or two (Q6_K) high bits in planes beside them.
enum class LevelBits { Nibble, NibbleTable, Nibble1, Nibble2, Byte };

struct BlockTraits {
  const char* name;  // GGUF's name, lower case: "q4_k"
  int weights;       // S: weights a block covers (32 or 256)
  int bytes;         // a block's bytes in the file
  int sub;           // weights a sub-block scale covers (16 or 32)
  int offset;        // offset types: the level's zero; 0 for minimum types
  LevelBits levels;
};

const BlockTraits& traits(BlockType type);
BlockType block_type(const std::string& name);  // throws for a name that is no block type here
extern const uint8_t kIq4Levels[16];             // IQ4_NL's table (kvalues_iq4nl) plus 128

// One block of the file, decoded. Arrays sized for the largest type.
struct DecodedBlock {
  uint8_t level[256];
  int8_t sc[16];
  int8_t mn[16];        // minimum types only
  uint16_t d, dmin;     // float16 bits; dmin for minimum types only
};

void decode_block(BlockType type, const uint8_t* block, DecodedBlock& out);
// Q4_K / Q5_K's 12 bytes of 6-bit scales and minimums for their 8 sub-blocks.
void k_scales_of(const uint8_t* bytes, int8_t* sc, int8_t* mn);

// The S float32 weights of a decoded block, rounded as gguf-py's de-quantization rounds them.
void dequantize_block(BlockType type, const DecodedBlock& b, float* out);

}  // namespace minivllm
