// CUDA conformance of the optimizer family (docs/kernels.md, "Optimizer family"): SGD and
// Adam/AdamW steps, single and multi-tensor, and GradScaler's unscale and scale update, on the
// device against the CPU plugin on the same random state. The kernels follow one arithmetic
// order with every multiply and add rounded on its own, so float32 and float64 must agree bit
// for bit, step after step.
//
// Without a GPU the comparisons skip. PF_CUDA_CONFORMANCE_SELFCHECK=1 runs them with the CPU as
// the device under test (a check of this file on a machine without GPU).
#include "conformance_harness.h"

namespace {

using namespace plugflow;
using namespace cuda_conformance;

const Tol kExact{0, 0};
constexpr DType kFloats[] = {DType::Float32, DType::Float64};

// Copies of one optimizer state on both devices.
struct State {
  std::vector<Pair> tensors;
  Pair& operator[](size_t i) { return tensors[i]; }
};

Pair random_pair(const Shape& sizes, DType dt, std::mt19937& rng, Values kind = Values::Any) {
  return make_pair(sizes, dt, View::Contiguous, kind, rng);
}

Pair zero_pair(const Shape& sizes, DType dt) {
  return {ops::zeros(sizes, dt, kCpu), ops::zeros(sizes, dt, target())};
}

// Parameters of several sizes, the empty one included, so one multi-tensor launch crosses
// parameter boundaries inside a block.
const std::vector<Shape> kShapes = {{7, 13}, {1}, {0}, {1031}, {3, 5, 2}};

TEST_F(CudaVsCpu, SgdStepsMatchEveryFlagCombination) {
  for (DType dt : kFloats) {
    for (int flags = 0; flags < 16; ++flags) {
      const bool momentum = flags & 1, nesterov = momentum && (flags & 2), decay = flags & 4, maximize = flags & 8;
      Pair param = random_pair({37, 53}, dt, rng);
      Pair buf = zero_pair({37, 53}, dt);
      for (int step = 0; step < 3; ++step) {
        Pair grad = random_pair({37, 53}, dt, rng);
        for (Tensor Pair::*side : {&Pair::cpu, &Pair::dev}) {
          Tensor p = param.*side, g = grad.*side, b = momentum ? buf.*side : Tensor();
          ops::sgd_step_(p, g, b, 0.05, momentum ? 0.9 : 0.0, nesterov ? 0.0 : 0.1,
                         decay ? 1e-2 : 0.0, nesterov, maximize, step == 0);
        }
        const std::string what = ctx("sgd_step_", dt, "flags " + std::to_string(flags) + " step " + std::to_string(step));
        EXPECT_TRUE(matches(param.cpu, param.dev, kExact)) << what;
        if (momentum) EXPECT_TRUE(matches(buf.cpu, buf.dev, kExact)) << what;
      }
    }
  }
}

TEST_F(CudaVsCpu, AdamAndAdamWStepsMatch) {
  for (DType dt : kFloats) {
    for (int flags = 0; flags < 16; ++flags) {
      const bool amsgrad = flags & 1, decoupled = flags & 2, decay = flags & 4, maximize = flags & 8;
      Pair param = random_pair({29, 31}, dt, rng);
      Pair m = zero_pair({29, 31}, dt), v = zero_pair({29, 31}, dt), vmax = zero_pair({29, 31}, dt);
      for (int step = 1; step <= 3; ++step) {
        Pair grad = random_pair({29, 31}, dt, rng);
        for (Tensor Pair::*side : {&Pair::cpu, &Pair::dev}) {
          Tensor p = param.*side, g = grad.*side, a = m.*side, b = v.*side, c = amsgrad ? vmax.*side : Tensor();
          ops::adam_step_(p, g, a, b, c, step, 1e-2, 0.9, 0.999, 1e-8, decay ? 0.1 : 0.0, amsgrad,
                          maximize, decoupled);
        }
        const std::string what = ctx("adam_step_", dt, "flags " + std::to_string(flags) + " step " + std::to_string(step));
        EXPECT_TRUE(matches(param.cpu, param.dev, kExact)) << what;
        EXPECT_TRUE(matches(m.cpu, m.dev, kExact)) << what;
        EXPECT_TRUE(matches(v.cpu, v.dev, kExact)) << what;
        if (amsgrad) EXPECT_TRUE(matches(vmax.cpu, vmax.dev, kExact)) << what;
      }
    }
  }
}

TEST_F(CudaVsCpu, ASetFoundInfSkipsTheStepOnTheDevice) {
  for (DType dt : kFloats) {
    Pair param = random_pair({100}, dt, rng), grad = random_pair({100}, dt, rng);
    const Tensor before = ops::clone(param.dev);
    Tensor found_inf = ops::full({1}, Scalar(1.0), DType::Float32, target());
    Tensor none, m = ops::zeros({100}, dt, target()), v = ops::zeros({100}, dt, target());
    ops::sgd_step_(param.dev, grad.dev, none, 0.1, 0, 0, 0, false, false, true, found_inf);
    ops::adam_step_(param.dev, grad.dev, m, v, none, 1, 0.1, 0.9, 0.999, 1e-8, 0, false, false, false, found_inf);
    EXPECT_TRUE(matches(before, param.dev, kExact)) << ctx("skipped step", dt);
    EXPECT_TRUE(matches(ops::zeros({100}, dt, kCpu), m, kExact)) << ctx("skipped step", dt);
    ops::fill_(found_inf, Scalar(0.0));
    ops::sgd_step_(param.dev, grad.dev, none, 0.1, 0, 0, 0, false, false, true, found_inf);
    ops::sgd_step_(param.cpu, grad.cpu, none, 0.1, 0, 0, 0, false, false, true);
    EXPECT_TRUE(matches(param.cpu, param.dev, kExact)) << ctx("unskipped step", dt);
  }
}

// Runs a multi-tensor op on both devices, the updated tensors as outputs aliasing the inputs
// (what the graph binds).
void run_multi(const char* op, const std::vector<std::vector<Pair>*>& inputs, const std::vector<Tensor>& cpu_steps,
               const std::vector<std::vector<Pair>*>& updated, const Attrs& attrs) {
  for (Tensor Pair::*side : {&Pair::cpu, &Pair::dev}) {
    std::vector<Tensor> in, out;
    for (auto* list : inputs)
      for (Pair& p : *list) in.push_back(p.*side);
    in.insert(in.end(), cpu_steps.begin(), cpu_steps.end());
    for (auto* list : updated)
      for (Pair& p : *list) out.push_back(p.*side);
    call_op_out(find_op(op), in, attrs, out);
  }
}

TEST_F(CudaVsCpu, MultiTensorSgdMatchesTheCpu) {
  for (DType dt : kFloats) {
    std::vector<Pair> params, grads, bufs;
    for (const Shape& s : kShapes) {
      params.push_back(random_pair(s, dt, rng));
      bufs.push_back(zero_pair(s, dt));
    }
    const auto n = static_cast<int64_t>(params.size());
    for (int step = 0; step < 2; ++step) {
      grads.clear();
      for (const Shape& s : kShapes) grads.push_back(random_pair(s, dt, rng));
      // Parameter 1 joins the momentum history a step late: its first_step flag differs.
      Shape first_step(static_cast<size_t>(n), step == 0 ? 1 : 0);
      first_step[1] = step == 1;
      const Attrs attrs{{"count", n},          {"has_momentum", true},  {"lr", 0.1},
                        {"momentum", 0.9},     {"dampening", 0.0},      {"weight_decay", 1e-3},
                        {"nesterov", true},    {"maximize", false},     {"first_step", first_step}};
      run_multi("multi_sgd_step_", {&params, &grads, &bufs}, {}, {&params, &bufs}, attrs);
      for (int64_t i = 0; i < n; ++i) {
        const std::string what = ctx("multi_sgd_step_", dt, "param " + std::to_string(i) + " step " + std::to_string(step));
        EXPECT_TRUE(matches(params[i].cpu, params[i].dev, kExact)) << what;
        EXPECT_TRUE(matches(bufs[i].cpu, bufs[i].dev, kExact)) << what;
      }
    }
  }
}

TEST_F(CudaVsCpu, MultiTensorAdamMatchesTheCpuWithPerParameterSteps) {
  for (DType dt : kFloats) {
    for (bool amsgrad : {false, true}) {
      std::vector<Pair> params, grads, m, v, vmax;
      // More parameters than one launch takes (32), so the split is exercised too.
      std::vector<Shape> shapes;
      for (int i = 0; i < 40; ++i) shapes.push_back(kShapes[static_cast<size_t>(i) % kShapes.size()]);
      for (const Shape& s : shapes) {
        params.push_back(random_pair(s, dt, rng));
        grads.push_back(random_pair(s, dt, rng));
        m.push_back(zero_pair(s, dt));
        v.push_back(zero_pair(s, dt));
        vmax.push_back(zero_pair(s, dt));
      }
      const auto n = static_cast<int64_t>(params.size());
      std::vector<Tensor> steps;  // step counts differ per parameter (one was added to the group late)
      for (int64_t i = 0; i < n; ++i) steps.push_back(ops::full({}, Scalar(1.0 + static_cast<double>(i % 3)), DType::Float32, kCpu));
      const Attrs attrs{{"count", n},     {"amsgrad", amsgrad},     {"lr", 1e-3},
                        {"beta1", 0.9},   {"beta2", 0.999},         {"eps", 1e-8},
                        {"weight_decay", 1e-2}, {"maximize", false}, {"decoupled_weight_decay", true}};
      std::vector<std::vector<Pair>*> inputs = {&params, &grads, &m, &v}, updated = {&params, &m, &v};
      if (amsgrad) {
        inputs.push_back(&vmax);
        updated.push_back(&vmax);
      }
      run_multi("multi_adam_step_", inputs, steps, updated, attrs);
      for (int64_t i = 0; i < n; ++i) {
        const std::string what = ctx("multi_adam_step_", dt, "param " + std::to_string(i) + (amsgrad ? " amsgrad" : ""));
        EXPECT_TRUE(matches(params[i].cpu, params[i].dev, kExact)) << what;
        EXPECT_TRUE(matches(v[i].cpu, v[i].dev, kExact)) << what;
      }
    }
  }
}

TEST_F(CudaVsCpu, UnscaleChecksEveryLayoutAndDtypeForNonFiniteValues) {
  for (DType dt : {DType::Float16, DType::BFloat16, DType::Float32, DType::Float64}) {
    for (View view : {View::Contiguous, View::Transposed, View::Gapped}) {
      for (double poison : {0.0, std::numeric_limits<double>::infinity(), std::nan("")}) {
        Pair grad = make_pair({23, 19}, dt, view, Values::Any, rng);
        if (poison != 0.0) {  // one element of the view, reached through select() on both devices
          const int64_t r = rng() % 23, c = rng() % 19;
          Tensor a = ops::select(ops::select(grad.cpu, 0, r), 0, c), b = ops::select(ops::select(grad.dev, 0, r), 0, c);
          ops::fill_(a, Scalar(poison));
          ops::fill_(b, Scalar(poison));
        }
        std::vector<Tensor> cpu{grad.cpu}, dev{grad.dev};
        Tensor cpu_found = ops::zeros({1}, DType::Float32, kCpu), dev_found = ops::zeros({1}, DType::Float32, target());
        const Tensor cpu_inv = ops::full({1}, Scalar(1.0 / 1024), DType::Float32, kCpu);
        const Tensor dev_inv = ops::full({1}, Scalar(1.0 / 1024), DType::Float32, target());
        ops::non_finite_check_and_unscale_(cpu, cpu_found, cpu_inv);
        ops::non_finite_check_and_unscale_(dev, dev_found, dev_inv);
        const std::string what = ctx("non_finite_check_and_unscale_", dt, std::string(view_name(view)) + " poison " + std::to_string(poison));
        EXPECT_TRUE(matches(grad.cpu, grad.dev, kExact)) << what;
        EXPECT_TRUE(matches(cpu_found, dev_found, kExact)) << what;
        EXPECT_EQ(ops::to(dev_found, kCpu, std::nullopt).data<float>()[0], poison != 0.0 ? 1.0f : 0.0f) << what;
      }
    }
  }
}

TEST_F(CudaVsCpu, ScaleUpdatesBackOffGrowAndNeverOverflow) {
  struct Case {
    double scale;
    int32_t tracker;
    float found_inf;
  };
  // Backoff; growth at the interval; a growth past float32's range is refused; counting up.
  for (const Case& c : {Case{65536.0, 5, 1.0f}, Case{65536.0, 2, 0.0f}, Case{3e38, 2, 0.0f}, Case{2.0, 0, 0.0f}}) {
    std::vector<Tensor> results;
    for (Device d : {kCpu, target()}) {
      Tensor scale = ops::full({1}, Scalar(c.scale), DType::Float32, d);
      Tensor tracker = ops::full({1}, Scalar(static_cast<int64_t>(c.tracker)), DType::Int32, d);
      const Tensor found = ops::full({1}, Scalar(static_cast<double>(c.found_inf)), DType::Float32, d);
      ops::amp_update_scale_(scale, tracker, found, 2.0, 0.5, 3);
      results.push_back(scale);
      results.push_back(tracker);
    }
    const std::string what = "amp_update_scale_ from scale " + std::to_string(c.scale);
    EXPECT_TRUE(matches(results[0], results[2], kExact)) << what;
    EXPECT_TRUE(matches(results[1], results[3], kExact)) << what;
  }
}

}  // namespace
