// Algorithm choices of the plugins' library-backed kernels (oneDNN on CPU, cuDNN on CUDA), for
// `python -m plugflow.info --algos`. A plugin reports each choice once per problem key; the core
// only keeps the latest report per (provider, op, key) and never interprets the strings.
#pragma once
#include <string>
#include <vector>

#include "plugflow/export.h"

namespace plugflow {

struct AlgoChoice {
  std::string provider;        // the reporting plugin ("cpu", "cuda")
  std::string op;              // "conv2d", "conv2d_grad_input", ...
  std::string key;             // the problem key (shapes, strides, dtype, attrs), plugin-formatted
  std::string algorithm;       // "direct", "winograd", "auto", an algorithm id ...
  std::string implementation;  // what the library runs ("brgconv:avx512_core"); may be empty
  std::string source;          // "search" (timed now), "heuristic" (the library's pick) or "cache" (from the file)
};

// Records a choice, replacing an earlier one for the same (provider, op, key). Thread-safe.
PF_API void report_algo_choice(AlgoChoice choice);
// Every recorded choice, in report order.
PF_API std::vector<AlgoChoice> algo_choices();

}  // namespace plugflow
