// Philox4x32::generate (plugflow/philox.h) for kPhiloxLanes consecutive counters at once: the
// lanes are independent, so each round is one vector loop (32x32 -> 64-bit products), several
// times faster than one counter at a time on AVX-512; the words are the scalar generator's, bit
// for bit. words[4 * l + j] is word j of counter ctr0 + l. Compiled per ISA (random.cpp).
#pragma once
#include <cstdint>

namespace plugflow::cpu {

inline constexpr int kPhiloxLanes = 16;
void philox_block(uint64_t seed, uint64_t ctr0, uint32_t* words);

}  // namespace plugflow::cpu
