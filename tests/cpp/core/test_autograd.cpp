// Autograd engine on the CPU plugin: accumulation, broadcasting, views, in-place rules,
// saved-tensor versions, retain_graph, autograd::grad with create_graph.
#include <gtest/gtest.h>

#include <cmath>

#include "plugflow/autograd.h"
#include "plugflow/ops.h"
#include "plugflow/runtime.h"

using namespace plugflow;
namespace ag = plugflow::autograd;

namespace {
const Device kCpu{};

Tensor from(const std::vector<float>& v, const Shape& shape) {
  Tensor t = ops::empty(shape, DType::Float32, kCpu);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}
std::vector<float> values(const Tensor& t) {
  Tensor c = ops::contiguous(ops::to(t, std::nullopt, DType::Float32));
  return std::vector<float>(c.data<float>(), c.data<float>() + c.numel());
}
Tensor leaf(const std::vector<float>& v, const Shape& shape) {
  Tensor t = from(v, shape);
  ag::set_requires_grad(t, true);
  return t;
}
Tensor sum(const Tensor& t) { return ops::reduce("sum", t, {}, false); }

class Autograd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { plugflow::init(""); }  // the default config: the cpu plugin
};
}  // namespace

TEST_F(Autograd, ProductRuleAndAccumulation) {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor y = leaf({4, 5, 6}, {3});
  Tensor z = sum(ops::binary("mul", ops::binary("mul", x, y), x));  // sum(x^2 y)
  ag::backward({z}, {}, false, false);
  EXPECT_EQ(values(ag::grad(x)), (std::vector<float>{8, 20, 36}));  // 2xy
  EXPECT_EQ(values(ag::grad(y)), (std::vector<float>{1, 4, 9}));    // x^2
  Tensor z2 = sum(x);
  ag::backward({z2}, {}, false, false);
  EXPECT_EQ(values(ag::grad(x)), (std::vector<float>{9, 21, 37})) << "grads accumulate";
}

TEST_F(Autograd, BroadcastGradientsAreSummed) {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor m = leaf({1, 1, 1, 2, 2, 2}, {2, 3});
  Tensor z = sum(ops::binary("mul", m, x));  // x broadcast over rows
  ag::backward({z}, {}, false, false);
  EXPECT_EQ(values(ag::grad(x)), (std::vector<float>{3, 3, 3}));
  EXPECT_EQ(ag::grad(x).sizes(), (Shape{3}));
}

TEST_F(Autograd, ViewsAndInplaceThroughViews) {
  Tensor x = leaf({1, 2, 3, 4}, {2, 2});
  Tensor y = ops::binary("mul", x, Scalar(2.0));  // non-leaf
  Tensor row = ops::select(y, 0, 1);
  ops::binary_("mul", row, Scalar(10.0));  // in place through a view: y's history is rewritten
  Tensor z = sum(y);
  ag::backward({z}, {}, false, false);
  EXPECT_EQ(values(ag::grad(x)), (std::vector<float>{2, 2, 20, 20}));
}

TEST_F(Autograd, LeafInplaceIsRefused) {
  Tensor x = leaf({1, 2}, {2});
  EXPECT_THROW(ops::binary_("add", x, Scalar(1.0)), Error);
  Tensor v = ops::slice(x, 0, 0, 1, 1);
  EXPECT_THROW(ops::binary_("add", v, Scalar(1.0)), Error);
  ag::GradModeGuard no_grad(false);
  ops::binary_("add", x, Scalar(1.0));  // fine without grad mode
  EXPECT_EQ(values(x), (std::vector<float>{2, 3}));
}

TEST_F(Autograd, ModifiedSavedTensorIsDetected) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = ops::binary("add", x, Scalar(1.0));
  Tensor z = ops::binary("mul", y, y);  // saves y
  ops::binary_("add", y, Scalar(1.0));
  try {
    ag::backward({sum(z)}, {}, false, false);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("modified by an inplace operation"), std::string::npos) << e.what();
  }
}

TEST_F(Autograd, SecondBackwardNeedsRetainGraph) {
  Tensor x = leaf({1, 2}, {2});
  Tensor z = sum(ops::binary("mul", x, x));
  ag::backward({z}, {}, false, false);
  EXPECT_THROW(ag::backward({z}, {}, false, false), Error);
  Tensor z2 = sum(ops::binary("mul", x, x));
  ag::backward({z2}, {}, true, false);
  ag::backward({z2}, {}, false, false);  // retained once: works
}

TEST_F(Autograd, GradWithCreateGraphGivesSecondDerivative) {
  Tensor x = leaf({2, 3}, {2});
  Tensor y = sum(ops::binary("mul", ops::binary("mul", x, x), x));  // sum(x^3)
  auto g = ag::grad({y}, {x}, {}, false, true, false);             // 3x^2
  EXPECT_EQ(values(g[0]), (std::vector<float>{12, 27}));
  EXPECT_TRUE(ag::requires_grad(g[0]));
  auto g2 = ag::grad({sum(g[0])}, {x}, {}, false, false, false);  // 6x
  EXPECT_EQ(values(g2[0]), (std::vector<float>{12, 18}));
  EXPECT_FALSE(ag::grad(x).defined()) << "autograd::grad does not touch .grad";
}

TEST_F(Autograd, NonScalarNeedsGradient) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = ops::binary("mul", x, Scalar(3.0));
  EXPECT_THROW(ag::backward({y}, {}, false, false), Error);
  ag::backward({y}, {from({1, 10}, {2})}, false, false);
  EXPECT_EQ(values(ag::grad(x)), (std::vector<float>{3, 30}));
  Tensor c = from({1}, {1});
  EXPECT_THROW(ag::backward({c}, {}, false, false), Error);  // does not require grad
}

TEST_F(Autograd, UnaryReductionMatmulChain) {
  Tensor a = leaf({0.5f, -1.0f, 2.0f, 0.25f, 1.5f, -0.5f}, {2, 3});
  Tensor b = leaf({1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor z = ops::reduce("mean", ops::unary("tanh", ops::matmul(a, b)), {}, false);
  ag::backward({z}, {}, false, false);
  // Numerical check of d z / d a[0,0].
  auto f = [&](float delta) {
    ag::GradModeGuard ng(false);
    Tensor a2 = ops::clone(a);
    a2.data<float>()[0] += delta;
    return values(ops::reduce("mean", ops::unary("tanh", ops::matmul(a2, b)), {}, false))[0];
  };
  const float numeric = (f(1e-3f) - f(-1e-3f)) / 2e-3f;
  EXPECT_NEAR(values(ag::grad(a))[0], numeric, 1e-3);
}
