// Kernel families of the CPU plugin; each file registers its own kernels.
#pragma once
#include "plugflow/plugin.h"

namespace plugflow::cpu {

void register_copy_fill_kernels(Registrar& reg);  // copy, fill, arange, linspace
void register_binary_kernels(Registrar& reg);     // arithmetic, bitwise, logical, compare
void register_unary_kernels(Registrar& reg);      // math, activations, predicates
void register_reduce_kernels(Registrar& reg);     // sum ... amin, max_dim ... argmin
void register_matmul_kernels(Registrar& reg);     // mm, bmm
void register_random_kernels(Registrar& reg);     // uniform, normal, randint

}  // namespace plugflow::cpu
