// Philox4x32-10 counter-based RNG (Salmon et al., SC'11). Random kernels on every device
// draw element i of a call from counter (offset + i/4), key = seed, so CPU and CUDA produce
// the same stream for the same generator state and work splits freely across threads.
#pragma once
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define PF_HOST_DEVICE __host__ __device__
#else
#define PF_HOST_DEVICE
#endif

namespace plugflow {

struct Philox4x32 {
  PF_HOST_DEVICE static inline void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
    const uint64_t p = static_cast<uint64_t>(a) * b;
    hi = static_cast<uint32_t>(p >> 32);
    lo = static_cast<uint32_t>(p);
  }
  static constexpr int kRounds = 10;
  // One round on the counter words c0..c3 under the round's key k0, k1.
  PF_HOST_DEVICE static inline void round(uint32_t& c0, uint32_t& c1, uint32_t& c2, uint32_t& c3, uint32_t k0,
                                          uint32_t k1) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(0xD2511F53u, c0, hi0, lo0);
    mulhilo(0xCD9E8D57u, c2, hi1, lo1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
  }
  // The key schedule: the key of the next round.
  PF_HOST_DEVICE static inline void bump_key(uint32_t& k0, uint32_t& k1) {
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  // Four 32-bit random words for counter `ctr` under key `seed`.
  PF_HOST_DEVICE static inline void generate(uint64_t seed, uint64_t ctr, uint32_t out[4]) {
    uint32_t c0 = static_cast<uint32_t>(ctr), c1 = static_cast<uint32_t>(ctr >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
    for (int r = 0; r < kRounds; ++r) {
      round(c0, c1, c2, c3, k0, k1);
      bump_key(k0, k1);
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
  }
  // Uniform in [0, 1) with 24 bits (float) or 53 bits (double) from word(s) of element i.
  PF_HOST_DEVICE static inline uint32_t word(uint64_t seed, uint64_t offset, uint64_t i, int which = 0) {
    uint32_t w[4];
    generate(seed, offset + i, w);
    return w[which & 3];
  }
  PF_HOST_DEVICE static inline double uniform_double(uint64_t seed, uint64_t offset, uint64_t i) {
    uint32_t w[4];
    generate(seed, offset + i, w);
    return uniform_double_of(w);
  }
  PF_HOST_DEVICE static inline float uniform_float(uint64_t seed, uint64_t offset, uint64_t i) {
    return uniform_float_of(word(seed, offset, i));
  }
  // Standard normal by Box-Muller on two words of element i.
  PF_HOST_DEVICE static inline double normal(uint64_t seed, uint64_t offset, uint64_t i) {
    uint32_t w[4];
    generate(seed, offset + i, w);
    return normal_of(w);
  }

  // The same transforms on the words of an element's counter (a CPU kernel that generates many
  // counters at once applies them to each).
  PF_HOST_DEVICE static inline double uniform_double_of(const uint32_t w[4]) {
    const uint64_t bits = (static_cast<uint64_t>(w[0]) << 21) ^ (w[1] >> 11);
    return static_cast<double>(bits & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
  }
  PF_HOST_DEVICE static inline float uniform_float_of(uint32_t w0) {
    return static_cast<float>(w0 >> 8) * (1.0f / 16777216.0f);
  }
  PF_HOST_DEVICE static inline double normal_of(const uint32_t w[4]) {
    const double u1 = (static_cast<double>(w[0]) + 1.0) * (1.0 / 4294967296.0);  // (0, 1]
    const double u2 = static_cast<double>(w[1]) * (1.0 / 4294967296.0);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

}  // namespace plugflow
