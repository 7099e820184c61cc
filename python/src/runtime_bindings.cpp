// Runtime bindings: init and config, plugins, registered kernels, devices, threads.
// Everything plugflow.info shows comes from here.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "casters.h"
#include "plugflow/algo_choice.h"
#include "plugflow/conv_settings.h"
#include "plugflow/device.h"
#include "plugflow/dispatch.h"
#include "plugflow/error.h"
#include "plugflow/kernel.h"
#include "plugflow/op.h"
#include "plugflow/ops.h"
#include "plugflow/profiler.h"
#include "plugflow/runtime.h"

namespace py = pybind11;

namespace plugflow::python {
namespace {

DeviceType parse_device_type(const std::string& name) {
  if (auto t = find_device_type(name)) return *t;
  std::string known;
  for (int i = 0; i < num_device_types(); ++i)
    known += (i ? "', '" : "'") + std::string(device_type_name(static_cast<DeviceType>(i))) + "'";
  PF_THROW(ValueError, "unknown device type '", name, "' (known: ", known, ")");
}

// The config as a dict shaped like the YAML file it came from.
py::dict config_dict(const Config& c) {
  py::list plugins;
  for (const auto& p : c.plugins) {
    py::dict d;
    d["name"] = p.name;
    d["optional"] = p.optional;
    plugins.append(d);
  }
  py::dict kernels;
  kernels["prefer"] = c.kernel_prefer;
  kernels["cpu_fallback"] = c.kernel_cpu_fallback;

  const Optimizations& o = c.optimizations;
  py::dict opt;
  opt["conv_algo_search"] = o.conv_algo_search;
  opt["algo_cache"] = o.algo_cache;
  opt["fuse_pad_conv"] = o.fuse_pad_conv;
  opt["fuse_add_to_output"] = o.fuse_add_to_output;
  opt["fuse_conv_bn"] = o.fuse_conv_bn;
  opt["fuse_bias_act"] = o.fuse_bias_act;
  opt["fuse_model_update"] = o.fuse_model_update;
  opt["blocked_layout"] = o.blocked_layout;
  opt["graph"] = o.graph;
  opt["amp"] = o.amp;
  opt["graph_memory_format"] = o.graph_memory_format;

  py::dict coll;
  coll["cpu"] = c.collective_cpu;
  coll["cuda"] = c.collective_cuda;
  coll["timeout_s"] = c.collective_timeout_s;

  py::dict d;
  d["source"] = c.source;
  d["plugins"] = plugins;
  d["plugin_path"] = c.plugin_path;
  d["kernels"] = kernels;
  d["threads"] = c.threads;
  d["optimizations"] = opt;
  d["collectives"] = coll;
  return d;
}

// What plugflow knows about one device type: is a backend registered, how many devices it
// found, and, when there are none, why (the core's or the plugin's own explanation).
py::dict device_type_info(DeviceType t) {
  py::dict d;
  d["type"] = std::string(device_type_name(t));
  DeviceBackend* backend = find_device_backend(t);
  d["plugin_loaded"] = backend != nullptr;
  const int count = backend ? backend->device_count() : 0;
  d["device_count"] = count;
  std::string reason;
  if (count == 0) {
    try {
      device_backend(Device{t, 0});  // throws the DeviceError a tensor on this device would get
    } catch (const Error& e) {
      reason = e.what();
    }
    if (reason.empty() && backend) reason = backend->unavailable_reason();
  }
  d["unavailable_reason"] = reason;
  return d;
}

DeviceBackend& backend_for(const std::string& type, int index) {
  return device_backend(Device{parse_device_type(type), index});
}

}  // namespace

void bind_runtime(py::module_& m) {
  // The profiler's recording (python/plugflow/profiler builds the tables and traces).
  m.def("_profiler_start", &profiler::start, py::arg("record_shapes"));
  m.def("_profiler_stop", [] {
    py::list out;
    for (const auto& e : profiler::stop()) {
      const char* kind = e.kind == profiler::EventKind::Kernel        ? "kernel"
                         : e.kind == profiler::EventKind::GraphKernel ? "graph_kernel"
                                                                      : "range";
      py::list shapes;
      for (const auto& s : e.input_shapes) shapes.append(py::cast(s));
      out.append(py::make_tuple(kind, e.name, e.provider, e.device, e.start_ns, e.end_ns, e.thread, shapes,
                                e.allocated_bytes));
    }
    return out;
  });
  m.def("_profiler_enabled", &profiler::enabled);

  m.def(
      "cpu_fallback_stats",
      [] {
        py::dict out;
        for (const auto& [op, s] : cpu_fallback_stats())
          out[py::str(op)] = py::dict(py::arg("calls") = s.calls, py::arg("bytes_to_cpu") = s.bytes_to_cpu,
                                      py::arg("bytes_from_cpu") = s.bytes_from_cpu);
        return out;
      },
      "Per op that ran on the CPU for a device listed in kernels.cpu_fallback: calls and bytes copied.");
  m.def("reset_cpu_fallback_stats", &reset_cpu_fallback_stats);
  m.def("_profiler_range_begin", &profiler::range_begin);
  m.def("_profiler_range_end", &profiler::range_end, py::arg("name"), py::arg("handle"));
  py::class_<LoadedPlugin>(m, "LoadedPlugin", "A plugin library the runtime loaded.")
      .def_readonly("name", &LoadedPlugin::name)
      .def_readonly("version", &LoadedPlugin::version)
      .def_readonly("abi_major", &LoadedPlugin::abi_major)
      .def_readonly("abi_minor", &LoadedPlugin::abi_minor)
      .def_readonly("path", &LoadedPlugin::path)
      .def_readonly("active", &LoadedPlugin::active,
                    "False once plugflow.init applied a config that does not list it (the library stays loaded).")
      .def_property_readonly(
          "abi", [](const LoadedPlugin& p) { return std::to_string(p.abi_major) + "." + std::to_string(p.abi_minor); })
      .def("__repr__", [](const LoadedPlugin& p) {
        return "LoadedPlugin(name='" + p.name + "', version='" + p.version + "', abi=" + std::to_string(p.abi_major) +
               "." + std::to_string(p.abi_minor) + ", path='" + p.path + "'" + (p.active ? "" : ", active=False") + ")";
      });

  py::class_<PluginFailure>(m, "PluginFailure", "A configured plugin that did not load, and why.")
      .def_readonly("name", &PluginFailure::name)
      .def_readonly("reason", &PluginFailure::reason)
      .def("__repr__",
           [](const PluginFailure& f) { return "PluginFailure(name='" + f.name + "', reason='" + f.reason + "')"; });

  py::class_<KernelRecord>(m, "KernelRecord", "One registered kernel: (op, device, dtype) by a provider.")
      .def_readonly("op", &KernelRecord::op)
      .def_property_readonly("device", [](const KernelRecord& k) { return std::string(device_type_name(k.device)); })
      .def_readonly("dtype", &KernelRecord::dtype)
      .def_readonly("provider", &KernelRecord::provider)
      .def_property_readonly("priority", [](const KernelRecord& k) { return std::string(priority_name(k.priority)); })
      .def("__repr__", [](const KernelRecord& k) {
        return "KernelRecord(op='" + k.op + "', device='" + std::string(device_type_name(k.device)) +
               "', dtype=" + std::string(dtype_name(k.dtype)) + ", provider='" + k.provider + "', priority='" +
               std::string(priority_name(k.priority)) + "')";
      });

  // ---- init and config -----------------------------------------------------------------------
  m.def("init", &init, py::arg("path") = "",
        "Apply a config, replacing the active one: load its plugins (reusing those already loaded), check\n"
        "kernels.prefer and collectives against them, and make the plugins it does not list unselectable\n"
        "(their kernels, devices and communicators; tensors on a dropped device can no longer be used).\n"
        "Keys the file leaves out take the built-in default's values (configs/cpu.yaml).\n"
        "An empty path means PLUGFLOW_CONFIG if set, else the built-in default.\n"
        "Raises plugflow.ConfigError or plugflow.PluginError, leaving the previous config active.");
  m.def("ensure_initialized", &ensure_initialized, "init() with the defaults, once.");
  m.def("is_initialized", &is_initialized);
  m.def(
      "current_config", [] { return config_dict(current_config()); },
      "The active config as a dict shaped like the YAML file.");
  m.def(
      "parse_config",
      [](const std::string& text, const std::string& source) { return config_dict(parse_config(text, source)); },
      py::arg("text"), py::arg("source") = "<string>",
      "Parse and validate YAML config text over the built-in default (raises plugflow.ConfigError); returns\n"
      "it as a dict. Names of providers and communicators are checked when init applies it.");
  m.def(
      "default_config_text", [] { return default_config_text(); },
      "The compiled-in default config (configs/cpu.yaml).");

  // ---- plugins -----------------------------------------------------------------------------------
  m.def("load_plugin", &load_plugin, py::arg("name_or_path"), py::arg("extra_dirs") = std::vector<std::string>{},
        "Load one plugin by name (searched on the plugin path) or by file path; one loaded before is reused\n"
        "and made selectable again until the next init. Raises plugflow.PluginError.");
  m.def("loaded_plugins", &loaded_plugins);
  m.def("plugin_failures", &plugin_failures,
        "Optional plugins of the config that did not load, with the loader's reasons.");
  m.def("plugin_search_path", &plugin_search_path, py::arg("extra_dirs") = std::vector<std::string>{},
        "Directories searched for a plugin name, in order.");

  // ---- ops and kernels -------------------------------------------------------------------------------
  m.def("op_names", &op_names, "Names of every op in the catalog.");
  m.def(
      "op_signature", [](const std::string& name) { return find_op(name).signature; }, py::arg("name"));
  m.def("registered_kernels", &registered_kernels,
        "Every kernel the dispatcher can select: those of the active config's plugins.");
  m.def(
      "chosen_provider",
      [](const std::string& op, const std::string& device, DType dtype) {
        return chosen_provider(find_op(op), parse_device_type(device), dtype);
      },
      py::arg("op"), py::arg("device"), py::arg("dtype"),
      "The provider whose kernel the dispatcher runs for (op, device type, dtype); '' when none.");

  m.def(
      "algo_choices",
      [] {
        py::list out;
        for (const AlgoChoice& c : algo_choices()) {
          py::dict d;
          d["provider"] = c.provider;
          d["op"] = c.op;
          d["key"] = c.key;
          d["algorithm"] = c.algorithm;
          d["implementation"] = c.implementation;
          d["source"] = c.source;
          out.append(d);
        }
        return out;
      },
      "The algorithms the plugins chose per problem key (provider, op, key, algorithm, implementation,\n"
      "source: 'search', 'heuristic' or 'cache'), in the order they were chosen.");

  m.def(
      "conv_settings",
      [] {
        const ConvSettings s = conv_settings();
        py::dict d;
        d["allow_tf32"] = s.allow_tf32;
        d["workspace_limit_bytes"] = s.workspace_limit_bytes;
        return d;
      },
      "The library-backed convolutions' switches: allow_tf32, workspace_limit_bytes.");
  m.def(
      "set_conv_settings",
      [](bool allow_tf32, size_t workspace_limit_bytes) {
        set_conv_settings(ConvSettings{allow_tf32, workspace_limit_bytes});
      },
      py::arg("allow_tf32"), py::arg("workspace_limit_bytes"),
      "Sets the library-backed convolutions' switches (plugflow.backends.cudnn's flags).");

  // ---- devices ---------------------------------------------------------------------------------------
  m.def(
      "device_info",
      [] {
        py::list out;
        for (int i = 0; i < num_device_types(); ++i) out.append(device_type_info(static_cast<DeviceType>(i)));
        return out;
      },
      "Per device type: plugin_loaded, device_count and, without devices, unavailable_reason.");
  m.def(
      "device_count",
      [](const std::string& type) {
        DeviceBackend* b = find_device_backend(parse_device_type(type));
        return b ? b->device_count() : 0;
      },
      py::arg("type"));
  m.def(
      "check_device", [](const std::string& type, int index) { backend_for(type, index); },
      py::arg("type"), py::arg("index") = 0, "Raises the error a tensor on that device would get, if any.");
  m.def(
      "synchronize",
      [](const std::string& type, int index) {
        DeviceBackend& b = backend_for(type, index);
        py::gil_scoped_release nogil;  // may wait for a long device queue
        b.synchronize(index);
      },
      py::arg("type"), py::arg("index") = 0);
  m.def(
      "memory_allocated",
      [](const std::string& type, int index) { return backend_for(type, index).allocated_bytes(index); },
      py::arg("type"), py::arg("index") = 0);
  m.def(
      "max_memory_allocated",
      [](const std::string& type, int index) { return backend_for(type, index).peak_allocated_bytes(index); },
      py::arg("type"), py::arg("index") = 0);
  m.def(
      "reset_peak_memory_stats", [](const std::string& type, int index) { backend_for(type, index).reset_peak(index); },
      py::arg("type"), py::arg("index") = 0);
  m.def(
      "empty_cache", [](const std::string& type, int index) { backend_for(type, index).empty_cache(index); },
      py::arg("type"), py::arg("index") = 0);
  m.def(
      "memory_stats",
      [](const std::string& type, int index) { return backend_for(type, index).memory_stats(index); },
      py::arg("type"), py::arg("index") = 0, "The allocator's counters (torch.cuda.memory_stats' names).");

  // ---- streams and events: opaque handles as integers (torch.cuda.Stream.cuda_stream) --------------
  auto handle = [](void* p) { return reinterpret_cast<uintptr_t>(p); };
  auto ptr = [](uintptr_t h) { return reinterpret_cast<void*>(h); };
  m.def(
      "_stream_create", [=](const std::string& type, int index) { return handle(backend_for(type, index).create_stream(index)); },
      py::arg("type"), py::arg("index"));
  m.def(
      "_stream_destroy",
      [=](const std::string& type, int index, uintptr_t s) { backend_for(type, index).destroy_stream(index, ptr(s)); },
      py::arg("type"), py::arg("index"), py::arg("stream"));
  m.def(
      "_stream_default", [=](const std::string& type, int index) { return handle(backend_for(type, index).default_stream(index)); },
      py::arg("type"), py::arg("index"));
  m.def(
      "_stream_current", [=](const std::string& type, int index) { return handle(backend_for(type, index).current_stream(index)); },
      py::arg("type"), py::arg("index"));
  m.def(
      "_stream_set_current",
      [=](const std::string& type, int index, uintptr_t s) { backend_for(type, index).set_current_stream(index, ptr(s)); },
      py::arg("type"), py::arg("index"), py::arg("stream"));
  m.def(
      "_stream_synchronize",
      [=](const std::string& type, int index, uintptr_t s) {
        DeviceBackend& b = backend_for(type, index);
        py::gil_scoped_release nogil;
        b.synchronize_stream(index, ptr(s));
      },
      py::arg("type"), py::arg("index"), py::arg("stream"));
  m.def(
      "_stream_query",
      [=](const std::string& type, int index, uintptr_t s) { return backend_for(type, index).query_stream(index, ptr(s)); },
      py::arg("type"), py::arg("index"), py::arg("stream"));
  m.def(
      "_stream_wait_event",
      [=](const std::string& type, int index, uintptr_t s, uintptr_t e) {
        backend_for(type, index).stream_wait_event(index, ptr(s), ptr(e));
      },
      py::arg("type"), py::arg("index"), py::arg("stream"), py::arg("event"));
  m.def(
      "_event_create",
      [=](const std::string& type, int index, bool timing) { return handle(backend_for(type, index).create_event(index, timing)); },
      py::arg("type"), py::arg("index"), py::arg("enable_timing"));
  m.def(
      "_event_destroy",
      [=](const std::string& type, int index, uintptr_t e) { backend_for(type, index).destroy_event(index, ptr(e)); },
      py::arg("type"), py::arg("index"), py::arg("event"));
  m.def(
      "_event_record",
      [=](const std::string& type, int index, uintptr_t e, uintptr_t s) {
        backend_for(type, index).record_event(index, ptr(e), ptr(s));
      },
      py::arg("type"), py::arg("index"), py::arg("event"), py::arg("stream"));
  m.def(
      "_event_synchronize",
      [=](const std::string& type, int index, uintptr_t e) {
        DeviceBackend& b = backend_for(type, index);
        py::gil_scoped_release nogil;
        b.synchronize_event(index, ptr(e));
      },
      py::arg("type"), py::arg("index"), py::arg("event"));
  m.def(
      "_event_query",
      [=](const std::string& type, int index, uintptr_t e) { return backend_for(type, index).query_event(index, ptr(e)); },
      py::arg("type"), py::arg("index"), py::arg("event"));
  m.def(
      "_event_elapsed_ms",
      [=](const std::string& type, int index, uintptr_t a, uintptr_t b) {
        return backend_for(type, index).event_elapsed_ms(index, ptr(a), ptr(b));
      },
      py::arg("type"), py::arg("index"), py::arg("start"), py::arg("end"));
  m.def(
      "_record_stream", [=](const Tensor& t, uintptr_t s) { ops::record_stream(t, ptr(s)); }, py::arg("tensor"),
      py::arg("stream"), "Tensor.record_stream on the stream handle of the tensor's device.");

  // ---- threads and version -----------------------------------------------------------------------------
  m.def(
      "set_num_threads",
      [](int n) {
        PF_CHECK(n > 0, "set_num_threads expects a positive integer, got ", n);  // RuntimeError, as in PyTorch
        set_num_threads(n);
      },
      py::arg("n"));
  m.def("get_num_threads", &get_num_threads);
  m.def("version", &version);
  m.def("_set_default_dtype", &set_default_float_dtype, py::arg("d"));
  m.def("_get_default_dtype", &default_float_dtype);

  // ---- torch._C names that libraries written for PyTorch call ------------------------------------
  // PyTorch reports API usage to its telemetry hook; plugflow has none, so there is nothing to log.
  m.def("_log_api_usage_once", [](const std::string&) {}, py::arg("event"));
  // PyTorch's TorchScript tracer state; plugflow never traces (torch.jit.is_tracing() is False).
  m.def("_get_tracing_state", []() { return py::none(); });
}

}  // namespace plugflow::python
