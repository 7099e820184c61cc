// Exception translation: each plugflow error type (plugflow/error.h) surfaces in Python as
// the exception a PyTorch user expects.
//
//   plugflow::ValueError          -> ValueError
//   plugflow::IndexError          -> IndexError
//   plugflow::TypeError           -> TypeError
//   plugflow::NotImplementedError -> NotImplementedError
//   plugflow::TimeoutError        -> TimeoutError
//   plugflow::LinAlgError         -> plugflow.linalg.LinAlgError (a RuntimeError; singular or
//                                    non-converging input of a linalg op, PyTorch's class)
//   plugflow::ConfigError         -> plugflow.ConfigError (a RuntimeError)
//   plugflow::PluginError         -> plugflow.PluginError (a RuntimeError)
//   plugflow::graph::CaptureError -> plugflow.GraphCaptureError (a RuntimeError; also plugflow.nn's)
//   plugflow::DeviceError, Error  -> RuntimeError
//
// ConfigError subclasses RuntimeError rather than ValueError: a config problem is found while
// the runtime starts (import plugflow / plugflow.init), together with plugin and device
// failures, and PyTorch reports that class of failure as RuntimeError. So `except
// RuntimeError` catches every way the runtime can fail to come up, and `except
// plugflow.ConfigError` narrows it to a bad config file.
#include <pybind11/pybind11.h>

#include "bindings.h"
#include "plugflow/error.h"
#include "plugflow/linalg_error.h"
#include "plugflow/graph.h"

namespace py = pybind11;

namespace plugflow::python {
namespace {

// The Python exception classes created below; alive for the process's life (the module
// holds a reference, and translation may run while the module is being torn down).
PyObject* g_config_error = nullptr;
PyObject* g_plugin_error = nullptr;
PyObject* g_capture_error = nullptr;
PyObject* g_linalg_error = nullptr;

// A RuntimeError subclass named qualified_name, bound on m as attribute.
PyObject* new_exception(py::module_& m, const char* attribute, const std::string& qualified_name, const char* doc) {
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified_name.c_str(), doc, PyExc_RuntimeError, nullptr);
  if (cls == nullptr) throw py::error_already_set();
  m.add_object(attribute, py::handle(cls));  // the module takes its own reference
  return cls;
}

PyObject* new_exception(py::module_& m, const char* name, const char* doc) {
  return new_exception(m, name, std::string("plugflow.") + name, doc);
}

}  // namespace

void bind_errors(py::module_& m) {
  g_config_error =
      new_exception(m, "ConfigError",
                    "A plugflow config file (or PLUGFLOW_CONFIG) is invalid: unknown key, wrong type or bad value.\n"
                    "The message names the file, line and key. Subclass of RuntimeError.");
  g_plugin_error =
      new_exception(m, "PluginError",
                    "A plugflow plugin could not be found, loaded or registered (wrong ABI, missing entry symbol,\n"
                    "a failing register function). The message names the file and the loader's reason.\n"
                    "Subclass of RuntimeError.");

  g_capture_error =
      new_exception(m, "GraphCaptureError",
                    "nn.Graph could not capture build(): it reads tensor values on the host (.item(), printing,\n"
                    "Python control flow on a tensor), has a data-dependent shape, or writes into an input.\n"
                    "The message names the line of build(). Subclass of RuntimeError.");

  g_linalg_error = new_exception(m, "_LinAlgError", "plugflow.linalg.LinAlgError",
                                 "A linalg op's input is singular, not positive-definite, or made the algorithm fail\n"
                                 "to converge (PyTorch's torch.linalg.LinAlgError). Subclass of RuntimeError.");

  // Most derived first: every plugflow error derives from plugflow::Error. Exceptions that are
  // not plugflow's propagate to pybind11's own translators (std::bad_alloc -> MemoryError, ...).
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ConfigError& e) {
      PyErr_SetString(g_config_error, e.what());
    } catch (const PluginError& e) {
      PyErr_SetString(g_plugin_error, e.what());
    } catch (const graph::CaptureError& e) {
      PyErr_SetString(g_capture_error, e.what());
    } catch (const ValueError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const IndexError& e) {
      PyErr_SetString(PyExc_IndexError, e.what());
    } catch (const TypeError& e) {
      PyErr_SetString(PyExc_TypeError, e.what());
    } catch (const NotImplementedError& e) {
      PyErr_SetString(PyExc_NotImplementedError, e.what());
    } catch (const TimeoutError& e) {
      PyErr_SetString(PyExc_TimeoutError, e.what());
    } catch (const LinAlgError& e) {
      PyErr_SetString(g_linalg_error, e.what());
    } catch (const Error& e) {  // DeviceError and plain Error
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });
}

}  // namespace plugflow::python
