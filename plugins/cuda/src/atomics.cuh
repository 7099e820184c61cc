// Atomic accumulation for every dtype, for the kernels whose writes may collide (index_put
// with accumulate on integers and bool, scatter-add along a dim).
#pragma once
#include <cstdint>
#include <type_traits>

#include "types.cuh"

namespace plugflow::cuda {

// dst += v in the dtype's arithmetic: bool or, integers wrap, f16/bf16 through float (the
// hardware half/bfloat16 atomics round the float sum). 8- and 16-bit integers take a CAS loop
// on their aligned 32-bit word (allocations are padded to whole words, allocator.h).
template <typename T>
PF_DEVICE void atomic_add_small_int(T* addr, T v) {
  using U = std::make_unsigned_t<T>;
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  unsigned* word = reinterpret_cast<unsigned*>(a & ~uintptr_t{3});
  const unsigned shift = static_cast<unsigned>(a & 3u) * 8u;
  const unsigned mask = ((1u << (8 * sizeof(T))) - 1u) << shift;
  unsigned old = *word, assumed;
  do {
    assumed = old;
    const T cur = static_cast<T>(static_cast<U>((assumed & mask) >> shift));
    const unsigned sum = static_cast<unsigned>(static_cast<U>(wrap_add(cur, v)));
    old = atomicCAS(word, assumed, (assumed & ~mask) | ((sum << shift) & mask));
  } while (old != assumed);
}

template <typename D>
PF_DEVICE void atomic_accumulate(D* addr, D v) {
  if constexpr (std::is_same_v<D, bool>) {
    if (v) *addr = true;  // or: only ever sets, so plain byte stores are enough
  } else if constexpr (std::is_same_v<D, float> || std::is_same_v<D, double> || std::is_same_v<D, __half> ||
                       std::is_same_v<D, __nv_bfloat16>) {
    atomicAdd(addr, v);
  } else if constexpr (sizeof(D) == 4) {
    atomicAdd(reinterpret_cast<unsigned*>(addr), static_cast<unsigned>(v));  // wraps
  } else if constexpr (sizeof(D) == 8) {
    atomicAdd(reinterpret_cast<unsigned long long*>(addr), static_cast<unsigned long long>(v));  // wraps
  } else {
    atomic_add_small_int(addr, v);
  }
}

}  // namespace plugflow::cuda
