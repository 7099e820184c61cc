// The optim family (plugflow/ops_optim.h) as private functions _C._sgd_step_ and
// _C._adam_step_, which plugflow.optim's SGD, Adam and AdamW call for dense parameters.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>

#include "bindings.h"
#include "casters.h"
#include "plugflow/ops.h"

namespace py = pybind11;

namespace plugflow::python {

void bind_optim(py::module_& m) {
  using py::arg;
  m.def(
      "_sgd_step_",
      [](Tensor param, const Tensor& grad, std::optional<Tensor> momentum_buffer, double lr, double momentum,
         double dampening, double weight_decay, bool nesterov, bool maximize, bool first_step,
         std::optional<Tensor> found_inf) {
        Tensor buf = momentum_buffer.value_or(Tensor());
        ops::sgd_step_(param, grad, buf, lr, momentum, dampening, weight_decay, nesterov, maximize, first_step,
                       found_inf.value_or(Tensor()));
      },
      arg("param"), arg("grad"), arg("momentum_buffer").none(true), py::kw_only(), arg("lr"), arg("momentum"),
      arg("dampening"), arg("weight_decay"), arg("nesterov"), arg("maximize"), arg("first_step"),
      arg("found_inf") = py::none(),
      "One SGD step for one dense parameter in one pass (updates param and momentum_buffer in place); with\n"
      "found_inf (GradScaler's flag) non-zero, nothing is written.");
  m.def(
      "_adam_step_",
      [](Tensor param, const Tensor& grad, Tensor exp_avg, Tensor exp_avg_sq, std::optional<Tensor> max_exp_avg_sq,
         double step, double lr, double beta1, double beta2, double eps, double weight_decay, bool amsgrad,
         bool maximize, bool decoupled_weight_decay, std::optional<Tensor> found_inf) {
        Tensor vmax = max_exp_avg_sq.value_or(Tensor());
        ops::adam_step_(param, grad, exp_avg, exp_avg_sq, vmax, step, lr, beta1, beta2, eps, weight_decay, amsgrad,
                        maximize, decoupled_weight_decay, found_inf.value_or(Tensor()));
      },
      arg("param"), arg("grad"), arg("exp_avg"), arg("exp_avg_sq"), arg("max_exp_avg_sq").none(true), py::kw_only(),
      arg("step"), arg("lr"), arg("beta1"), arg("beta2"), arg("eps"), arg("weight_decay"), arg("amsgrad"),
      arg("maximize"), arg("decoupled_weight_decay"), arg("found_inf") = py::none(),
      "One Adam/AdamW step (step already incremented) for one dense parameter in one pass, in place; with\n"
      "found_inf (GradScaler's flag) non-zero, nothing is written.");
  m.def(
      "_adam_step_attrs",
      [](double step, double lr, double beta1, double beta2, double eps, double weight_decay, bool amsgrad,
         bool maximize, bool decoupled_weight_decay) {
        py::dict d;
        const Attrs attrs =
            ops::adam_step_attrs(step, lr, beta1, beta2, eps, weight_decay, amsgrad, maximize, decoupled_weight_decay);
        for (const auto& [name, value] : attrs.items())
          std::visit([&](const auto& v) {
            using V = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<V, bool> || std::is_same_v<V, double> || std::is_same_v<V, int64_t>)
              d[name] = v;
          }, value);
        return d;
      },
      py::kw_only(), arg("step"), arg("lr"), arg("beta1"), arg("beta2"), arg("eps"), arg("weight_decay"),
      arg("amsgrad"), arg("maximize"), arg("decoupled_weight_decay"),
      "The adam_step_ kernel's attributes for these hyperparameters (for nn.Graph's per-call update).");
}

}  // namespace plugflow::python
