// The elementwise driver of loops.h, compiled once for every functor.
#include "loops.h"

#include <algorithm>

namespace plugflow::cpu::detail {
namespace {

// Elements per staged chunk: small enough that every operand's buffer stays in L1, large
// enough that the functor's loop runs long vector stretches.
constexpr int64_t kStageElems = 256;
constexpr int64_t kMaxItemSize = 8;

// Calls f(type_tag<U>) with U the unsigned integer of item_size bytes (values move as bits).
template <typename F>
void visit_item_size(int64_t item_size, F&& f) {
  switch (item_size) {
    case 1: return f(type_tag<uint8_t>{});
    case 2: return f(type_tag<uint16_t>{});
    case 4: return f(type_tag<uint32_t>{});
    case 8: return f(type_tag<uint64_t>{});
  }
  PF_THROW(Error, "elementwise: unsupported item size ", item_size);
}

void replicate(const char* src, int64_t item_size, int64_t n, char* dst) {
  visit_item_size(item_size, [&](auto tag) {
    using U = typename decltype(tag)::type;
    const U v = *reinterpret_cast<const U*>(src);
    std::fill_n(reinterpret_cast<U*>(dst), n, v);
  });
}

void gather(const char* src, int64_t stride, int64_t item_size, int64_t n, char* dst) {
  visit_item_size(item_size, [&](auto tag) {
    using U = typename decltype(tag)::type;
    U* d = reinterpret_cast<U*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = *reinterpret_cast<const U*>(src + i * stride);
  });
}

void scatter(const char* src, int64_t item_size, int64_t n, char* dst, int64_t stride) {
  visit_item_size(item_size, [&](auto tag) {
    using U = typename decltype(tag)::type;
    const U* s = reinterpret_cast<const U*>(src);
    for (int64_t i = 0; i < n; ++i) *reinterpret_cast<U*>(dst + i * stride) = s[i];
  });
}

// One innermost run of n elements: p[k] and s[k] are operand k's first element and byte stride.
void run_piece(char* const* p, const int64_t* s, std::span<const int64_t> item, int64_t n, ContiguousLoop loop,
               const void* f) {
  const size_t nops = item.size();
  bool contiguous = true;
  for (size_t k = 0; k < nops; ++k) contiguous = contiguous && s[k] == item[k];
  if (contiguous) return loop(p, n, f);

  alignas(64) char stage[kMaxLayoutOperands][kStageElems * kMaxItemSize];
  std::array<char*, kMaxLayoutOperands> q{};
  const bool stage_out = s[0] != item[0];
  for (int64_t c = 0; c < n; c += kStageElems) {
    const int64_t m = std::min(kStageElems, n - c);
    for (size_t k = 1; k < nops; ++k) {
      if (s[k] == item[k]) {
        q[k] = p[k] + c * item[k];
      } else {
        q[k] = stage[k];
        if (s[k] != 0) gather(p[k] + c * s[k], s[k], item[k], m, stage[k]);
        else if (c == 0) replicate(p[k], item[k], std::min(kStageElems, n), stage[k]);  // once per run
      }
    }
    q[0] = stage_out ? stage[0] : p[0] + c * item[0];
    loop(q.data(), m, f);
    if (stage_out) scatter(stage[0], item[0], m, p[0] + c * s[0], s[0]);
  }
}

}  // namespace

void run_elementwise(std::span<const Tensor* const> operands, std::span<const int64_t> item_sizes, ContiguousLoop loop,
                     const void* f) {
  const int64_t numel = operands[0]->numel();
  if (numel == 0) return;
  const StridedLayout L = make_layout(operands);
  const size_t nops = operands.size();
  std::array<int64_t, kMaxLayoutOperands> s{};
  for (size_t k = 0; k < nops; ++k) s[k] = L.ndim == 0 ? item_sizes[k] : L.byte_strides[k][L.ndim - 1];
  parallel_for(numel, kGrainSize, [&](int64_t b, int64_t e) {
    for_each_piece(L, b, e, [&](char* const* p, int64_t n) { run_piece(p, s.data(), item_sizes, n, loop, f); });
  });
}

}  // namespace plugflow::cpu::detail
