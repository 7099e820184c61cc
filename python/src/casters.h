// pybind11 type casters shared by the binding files.
//
// plugflow::Scalar loads from a Python bool, int or float (or a numpy scalar), keeping the kind
// so that PyTorch's promotion for "wrapped numbers" applies; it converts back to the same kind.
//
// plugflow::DType converts to and from the singleton `plugflow.float32`-style objects that
// tensor_bindings.cpp creates, so `t.dtype is plugflow.float32` holds, as with torch.dtype, and
// a dtype argument costs an array lookup rather than a new Python object per call.
//
// Every translation unit that passes a DType through pybind11 must include this header
// (a caster specialization is part of the type's ODR-visible definition).
#pragma once
#include <pybind11/pybind11.h>

#include "plugflow/dtype.h"
#include "plugflow/scalar.h"

namespace plugflow::python {

// The `plugflow.dtype` object for a DType (borrowed reference; the singletons live forever).
pybind11::handle dtype_object(DType t);
// The DType behind `obj`. Accepts the dtype objects; with `convert` also a dtype name
// ("float32", "long", ...; TypeError for an unknown one) and the Python types bool, int and
// float (as PyTorch does: float -> float64, int -> int64). False when obj is none of these.
bool dtype_from_object(pybind11::handle obj, DType& out, bool convert);
// A Python bool/int/float or numpy scalar as a Scalar; false for anything else. An int outside
// int64 raises RuntimeError ("Overflow when unpacking long"), as in PyTorch.
bool to_scalar(pybind11::handle obj, Scalar& out);

}  // namespace plugflow::python

namespace pybind11::detail {

template <>
struct type_caster<plugflow::DType> {
  PYBIND11_TYPE_CASTER(plugflow::DType, const_name("plugflow.dtype"));

  bool load(handle src, bool convert) { return plugflow::python::dtype_from_object(src, value, convert); }
  static handle cast(plugflow::DType t, return_value_policy, handle) {
    return plugflow::python::dtype_object(t).inc_ref();
  }
};

template <>
struct type_caster<plugflow::Scalar> {
  PYBIND11_TYPE_CASTER(plugflow::Scalar, const_name("Number"));

  bool load(handle src, bool /*convert*/) { return plugflow::python::to_scalar(src, value); }
  static handle cast(const plugflow::Scalar& s, return_value_policy, handle) {
    if (s.is_bool()) return PyBool_FromLong(s.to_bool());
    if (s.is_integral()) return PyLong_FromLongLong(s.to_int());
    return PyFloat_FromDouble(s.to_double());
  }
};

}  // namespace pybind11::detail
