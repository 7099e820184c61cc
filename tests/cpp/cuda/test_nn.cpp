// CUDA conformance of the nn kernels (plugins/cuda/src/norm.cu, pool.cu) against the CPU
// plugin on the same random inputs, op by op through the dispatcher (call_op), forward and
// backward: batch norm (training / eval, with and without affine parameters and running
// statistics, bfloat16 with float32 parameters, the graph's fused bn + add + relu, channels-last
// activations), layer and group norm, embedding (strided weights, every dtype, duplicates,
// padding_idx, scaling by frequency, a bad index), dropout (the same Philox numbers), max /
// average / adaptive pooling in 2-d and 3-d (strided inputs, -inf and NaN windows, ceil mode,
// dilation) and nearest / bilinear / bicubic upsampling, each backward against the CPU's.
//
// Without a GPU every comparison skips; PF_CUDA_CONFORMANCE_SELFCHECK=1 runs them with the CPU
// as the device under test (a check of the tests themselves).
#include "conformance_harness.h"

namespace {

using namespace plugflow;
using namespace cuda_conformance;

using Tensors = std::vector<Tensor>;

Tensors run(const std::string& op, const Tensors& in, const Attrs& attrs) { return call_op(find_op(op), in, attrs); }

// Runs `op` on the CPU operands and on the device ones; expects every output to match.
void compare(const std::string& op, const Tensors& cpu_in, const Tensors& dev_in, const Attrs& attrs,
             const std::string& where, std::optional<Tol> tol = std::nullopt) {
  const Tensors c = run(op, cpu_in, attrs), d = run(op, dev_in, attrs);
  ASSERT_EQ(c.size(), d.size()) << where;
  for (size_t i = 0; i < c.size(); ++i) {
    if (!c[i].defined()) continue;
    EXPECT_TRUE(tol ? matches(c[i], d[i], *tol) : matches(c[i], d[i])) << where << ": output " << i;
  }
}

Tensor to_dev(const Tensor& t) { return ops::to(t, target(), std::nullopt, /*copy=*/true); }

// A contiguous operand from explicit values, on both devices.
Pair pair_of(const Shape& s, DType dt, const std::vector<double>& v) {
  const Tensor c = cpu_tensor(s, dt, v);
  return {c, to_dev(c)};
}

std::vector<double> positive_values(int64_t n, std::mt19937& rng) {
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) x = std::uniform_real_distribution<double>(0.5, 2.0)(rng);
  return v;
}

// Every op these tests compare has dtypes on both devices (else its loops would compare nothing).
TEST_F(CudaPlugin, NnOpsHaveKernelsOnBothDevices) {
  for (const char* op : {"batch_norm", "batch_norm_backward", "batch_norm_fused", "batch_norm_relu_backward",
                         "layer_norm", "layer_norm_backward", "group_norm", "group_norm_backward", "embedding",
                         "embedding_backward", "dropout", "max_pool2d", "max_pool3d", "adaptive_max_pool2d",
                         "adaptive_max_pool3d", "avg_pool2d", "avg_pool3d", "avg_pool2d_backward",
                         "avg_pool3d_backward", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
                         "adaptive_avg_pool2d_backward", "adaptive_avg_pool3d_backward", "upsample_nearest2d",
                         "upsample_nearest2d_backward", "upsample_bilinear2d", "upsample_bilinear2d_backward",
                         "upsample_bicubic2d", "upsample_bicubic2d_backward"})
    EXPECT_FALSE(common_dtypes(op).empty()) << "no dtype of '" << op << "' on both devices";
}

// ---- norms ----------------------------------------------------------------------------------

TEST_F(CudaVsCpu, BatchNormForwardAndBackward) {
  const Shape shapes[] = {{4, 5, 7}, {16, 3, 1}, {2, 7, 33}, {3, 2, 257}};
  for (DType dt : common_dtypes("batch_norm")) {
    // bfloat16 also with float32 parameters (autocast's mixed type).
    std::vector<DType> param_types = {dt};
    if (dt == DType::BFloat16) param_types.push_back(DType::Float32);
    for (DType pt : param_types) {
      for (const Shape& s : shapes) {
        const int64_t c = s[1];
        for (int variant = 0; variant < 4; ++variant) {
          const bool training = variant != 3, affine = variant % 2 == 0, running = variant != 1;
          const std::string where = ctx("batch_norm", dt, shape_str(s) + " params " + std::string(dtype_name(pt)) +
                                                              (training ? " training" : " eval") +
                                                              (affine ? " affine" : "") + (running ? " running" : ""));
          Pair x = make_pair(s, dt, View::Contiguous, Values::Any, rng);
          Pair w = make_pair({c}, pt, View::Contiguous, Values::Any, rng);
          Pair b = make_pair({c}, pt, View::Contiguous, Values::Any, rng);
          Pair rm = make_pair({c}, pt, View::Contiguous, Values::Any, rng);
          Pair rv = pair_of({c}, pt, positive_values(c, rng));
          const Attrs attrs{{"training", training}, {"momentum", 0.1}, {"eps", 1e-5}, {"has_weight", affine},
                            {"has_bias", affine},   {"has_running", running}};
          const Tensors cin = {x.cpu, w.cpu, b.cpu, rm.cpu, rv.cpu}, din = {x.dev, w.dev, b.dev, rm.dev, rv.dev};
          const Tensors fc = run("batch_norm", cin, attrs), fd = run("batch_norm", din, attrs);
          for (int o = 0; o < 3; ++o) EXPECT_TRUE(matches(fc[o], fd[o])) << where << ": output " << o;
          EXPECT_TRUE(matches(rm.cpu, rm.dev)) << where << ": running_mean";
          EXPECT_TRUE(matches(rv.cpu, rv.dev)) << where << ": running_var";
          // Backward from the CPU's saved statistics, so both devices get the same operands.
          Pair g = make_pair(s, dt, View::Contiguous, Values::Any, rng);
          const Attrs battrs{{"training", training}, {"has_weight", affine}};
          compare("batch_norm_backward", {g.cpu, x.cpu, w.cpu, fc[1], fc[2]}, {g.dev, x.dev, w.dev, to_dev(fc[1]), to_dev(fc[2])},
                  battrs, where + " backward");
        }
      }
    }
  }
}

TEST_F(CudaVsCpu, FusedBatchNormReluAndItsBackward) {
  const Shape s{3, 4, 19};
  for (DType dt : common_dtypes("batch_norm_fused")) {
    for (bool addend : {false, true}) {
      const std::string where = ctx("batch_norm_fused", dt, addend ? "with addend" : "");
      Pair x = make_pair(s, dt, View::Contiguous, Values::Any, rng), z = make_pair(s, dt, View::Contiguous, Values::Any, rng);
      Pair w = make_pair({4}, dt, View::Contiguous, Values::Any, rng), b = make_pair({4}, dt, View::Contiguous, Values::Any, rng);
      Pair rm = make_pair({4}, dt, View::Contiguous, Values::Any, rng), rv = pair_of({4}, dt, positive_values(4, rng));
      const Attrs attrs{{"training", true},      {"momentum", 0.1},         {"eps", 1e-5},
                        {"has_weight", true},    {"has_bias", true},        {"has_running", true},
                        {"has_addend", addend},  {"activation", std::string("relu")}};
      Tensors cin = {x.cpu, w.cpu, b.cpu, rm.cpu, rv.cpu}, din = {x.dev, w.dev, b.dev, rm.dev, rv.dev};
      if (addend) {  // the addend is a 6th operand only when present
        cin.push_back(z.cpu);
        din.push_back(z.dev);
      }
      const Tensors fc = run("batch_norm_fused", cin, attrs), fd = run("batch_norm_fused", din, attrs);
      for (int o = 0; o < 3; ++o) EXPECT_TRUE(matches(fc[o], fd[o])) << where << ": output " << o;
      EXPECT_TRUE(matches(rv.cpu, rv.dev)) << where << ": running_var";
      Pair g = make_pair(s, dt, View::Contiguous, Values::Any, rng);
      for (bool grad_pre : {false, true}) {
        const Attrs battrs{{"training", true}, {"has_weight", true}, {"has_grad_pre", grad_pre}};
        compare("batch_norm_relu_backward", {g.cpu, fc[0], x.cpu, w.cpu, fc[1], fc[2]},
                {g.dev, to_dev(fc[0]), x.dev, w.dev, to_dev(fc[1]), to_dev(fc[2])}, battrs,
                where + (grad_pre ? " relu backward, grad_pre" : " relu backward"));
      }
    }
  }
}

// Channels-last activations (4-d and 5-d) through batch norm, its backward and the fused ones:
// the device's results are channels last too and match the CPU's (its kernels over rows of
// channels; CUDA runs its row-major kernels on row-major copies).
TEST_F(CudaVsCpu, BatchNormChannelsLast) {
  const MemoryFormat cl = MemoryFormat::ChannelsLast;
  const auto channels_last = [&](const Pair& p) { return Pair{ops::contiguous(p.cpu, cl), ops::contiguous(p.dev, cl)}; };
  const Shape shapes[] = {{2, 5, 3, 4}, {3, 4, 2, 2, 3}};
  for (DType dt : common_dtypes("batch_norm_fused")) {
    for (const Shape& s : shapes) {
      const int64_t c = s[1];
      const Pair x = channels_last(make_pair(s, dt, View::Contiguous, Values::Any, rng));
      const Pair z = channels_last(make_pair(s, dt, View::Contiguous, Values::Any, rng));
      const Pair g = channels_last(make_pair(s, dt, View::Contiguous, Values::Any, rng));
      const Pair w = make_pair({c}, dt, View::Contiguous, Values::Any, rng);
      const Pair b = make_pair({c}, dt, View::Contiguous, Values::Any, rng);
      const Pair rm = make_pair({c}, dt, View::Contiguous, Values::Any, rng), rv = pair_of({c}, dt, positive_values(c, rng));
      for (bool fused : {false, true}) {
        const std::string op = fused ? "batch_norm_fused" : "batch_norm";
        const std::string where = ctx(op, dt, shape_str(s) + " channels last");
        Attrs attrs{{"training", true}, {"momentum", 0.1},   {"eps", 1e-5},
                    {"has_weight", true}, {"has_bias", true}, {"has_running", true}};
        Tensors cin = {x.cpu, w.cpu, b.cpu, rm.cpu, rv.cpu}, din = {x.dev, w.dev, b.dev, rm.dev, rv.dev};
        if (fused) {  // batch norm + add + relu
          attrs.set("has_addend", true);
          attrs.set("activation", std::string("relu"));
          cin.push_back(z.cpu);
          din.push_back(z.dev);
        }
        const Tensors fc = run(op, cin, attrs), fd = run(op, din, attrs);
        for (int o = 0; o < 3; ++o) EXPECT_TRUE(matches(fc[o], fd[o])) << where << ": output " << o;
        EXPECT_TRUE(fd[0].is_contiguous(cl) && !fd[0].is_contiguous()) << where << ": y not channels last";
        EXPECT_TRUE(matches(rm.cpu, rm.dev)) << where << ": running_mean";
        EXPECT_TRUE(matches(rv.cpu, rv.dev)) << where << ": running_var";
        // Backward from the CPU's forward results, so both devices get the same operands.
        const std::string bop = fused ? "batch_norm_relu_backward" : "batch_norm_backward";
        const Attrs battrs = fused ? Attrs{{"training", true}, {"has_weight", true}, {"has_grad_pre", true}}
                                   : Attrs{{"training", true}, {"has_weight", true}};
        Tensors bcin = {g.cpu, x.cpu, w.cpu, fc[1], fc[2]}, bdin = {g.dev, x.dev, w.dev, to_dev(fc[1]), to_dev(fc[2])};
        if (fused) {  // the relu output after grad
          bcin.insert(bcin.begin() + 1, fc[0]);
          bdin.insert(bdin.begin() + 1, ops::contiguous(to_dev(fc[0]), cl));
        }
        const Tensors bc = run(bop, bcin, battrs), bd = run(bop, bdin, battrs);
        for (size_t o = 0; o < bc.size(); ++o) EXPECT_TRUE(matches(bc[o], bd[o])) << where << " backward: output " << o;
        EXPECT_TRUE(bd[0].is_contiguous(cl) && !bd[0].is_contiguous()) << where << ": grad_x not channels last";
      }
    }
  }
}

TEST_F(CudaVsCpu, LayerNormForwardAndBackward) {
  const Shape shapes[] = {{7, 33}, {3, 1000}, {1, 5}, {65, 2}};
  for (DType dt : common_dtypes("layer_norm")) {
    for (const Shape& s : shapes) {
      for (int variant = 0; variant < 3; ++variant) {
        const bool has_w = variant != 2, has_b = variant == 0;
        const std::string where = ctx("layer_norm", dt, shape_str(s) + (has_w ? " weight" : "") + (has_b ? " bias" : ""));
        // A mean far from 0 against the spread: the split-mean arithmetic must match.
        Pair x = make_pair(s, dt, View::Contiguous, Values::Any, rng);
        Pair w = make_pair({s[1]}, dt, View::Contiguous, Values::Any, rng), b = make_pair({s[1]}, dt, View::Contiguous, Values::Any, rng);
        const Attrs attrs{{"eps", 1e-5}, {"has_weight", has_w}, {"has_bias", has_b}};
        const Tensors fc = run("layer_norm", {x.cpu, w.cpu, b.cpu}, attrs);
        const Tensors fd = run("layer_norm", {x.dev, w.dev, b.dev}, attrs);
        for (int o = 0; o < 3; ++o) EXPECT_TRUE(matches(fc[o], fd[o])) << where << ": output " << o;
        Pair g = make_pair(s, dt, View::Contiguous, Values::Any, rng);
        compare("layer_norm_backward", {g.cpu, x.cpu, w.cpu, fc[1], fc[2]}, {g.dev, x.dev, w.dev, to_dev(fc[1]), to_dev(fc[2])},
                Attrs{{"has_weight", has_w}}, where + " backward");
      }
    }
  }
}

TEST_F(CudaVsCpu, GroupNormForwardAndBackward) {
  struct Case {
    Shape s;
    int64_t groups;
  };
  const Case cases[] = {{{3, 6, 10}, 3}, {{2, 4, 1}, 2}, {{2, 8, 17}, 8}, {{1, 6, 300}, 1}};
  for (DType dt : common_dtypes("group_norm")) {
    for (const auto& [s, groups] : cases) {
      for (bool affine : {true, false}) {
        const std::string where = ctx("group_norm", dt, shape_str(s) + " groups " + std::to_string(groups) + (affine ? " affine" : ""));
        Pair x = make_pair(s, dt, View::Contiguous, Values::Any, rng);
        Pair w = make_pair({s[1]}, dt, View::Contiguous, Values::Any, rng), b = make_pair({s[1]}, dt, View::Contiguous, Values::Any, rng);
        const Attrs attrs{{"groups", groups}, {"eps", 1e-5}, {"has_weight", affine}, {"has_bias", affine}};
        const Tensors fc = run("group_norm", {x.cpu, w.cpu, b.cpu}, attrs);
        const Tensors fd = run("group_norm", {x.dev, w.dev, b.dev}, attrs);
        for (int o = 0; o < 3; ++o) EXPECT_TRUE(matches(fc[o], fd[o])) << where << ": output " << o;
        Pair g = make_pair(s, dt, View::Contiguous, Values::Any, rng);
        compare("group_norm_backward", {g.cpu, x.cpu, w.cpu, fc[1], fc[2]}, {g.dev, x.dev, w.dev, to_dev(fc[1]), to_dev(fc[2])},
                Attrs{{"groups", groups}, {"has_weight", affine}}, where + " backward");
      }
    }
  }
}

// ---- embedding, dropout -----------------------------------------------------------------------

Pair index_pair(int64_t m, int64_t v, std::mt19937& rng) {
  std::vector<double> idx(static_cast<size_t>(m));
  for (auto& i : idx) i = static_cast<double>(rng() % static_cast<uint32_t>(v));  // duplicates for small v
  return pair_of({m}, DType::Int64, idx);
}

TEST_F(CudaVsCpu, EmbeddingOnEveryDtypeAndLayout) {
  const int64_t V = 11, D = 6, M = 40;
  for (DType dt : common_dtypes("embedding")) {
    for (View v : {View::Contiguous, View::Transposed, View::Gapped}) {
      Pair w = make_pair({V, D}, dt, v, Values::Any, rng);
      Pair idx = index_pair(M, V, rng);
      compare("embedding", {w.cpu, idx.cpu}, {w.dev, idx.dev}, {}, ctx("embedding", dt, view_name(v)));
    }
  }
  // An index out of range: IndexError with the CPU's message on both devices.
  Pair w = make_pair({V, D}, DType::Float32, View::Contiguous, Values::Any, rng);
  for (double bad : {-1.0, static_cast<double>(V)}) {
    Pair idx = pair_of({3}, DType::Int64, {0.0, bad, 1.0});
    for (const Tensors& in : {Tensors{w.cpu, idx.cpu}, Tensors{w.dev, idx.dev}}) {
      try {
        run("embedding", in, {});
        ADD_FAILURE() << "embedding with index " << bad << " must raise";
      } catch (const IndexError& e) {
        EXPECT_NE(std::string(e.what()).find("index out of range in self"), std::string::npos) << e.what();
      }
    }
  }
}

TEST_F(CudaVsCpu, EmbeddingBackwardAddsDuplicates) {
  const int64_t V = 9, D = 37, M = 50;
  for (DType dt : common_dtypes("embedding_backward")) {
    for (int64_t padding : {int64_t{-1}, int64_t{2}}) {
      for (bool by_freq : {false, true}) {
        Pair g = make_pair({M, D}, dt, View::Contiguous, Values::Any, rng);
        Pair idx = index_pair(M, V, rng);
        const Attrs attrs{{"num_weights", V}, {"padding_idx", padding}, {"scale_grad_by_freq", by_freq}};
        compare("embedding_backward", {g.cpu, idx.cpu}, {g.dev, idx.dev}, attrs,
                ctx("embedding_backward", dt, "padding " + std::to_string(padding) + (by_freq ? " by freq" : "")));
      }
    }
  }
}

TEST_F(CudaVsCpu, DropoutDrawsTheCpuNumbers) {
  for (DType dt : common_dtypes("dropout")) {
    for (double p : {0.1, 0.5, 0.9}) {
      for (int64_t n : {int64_t{1}, int64_t{1003}, int64_t{40000}}) {
        Pair x = make_pair({n}, dt, View::Contiguous, Values::Any, rng);
        const Attrs attrs{{"p", p}, {"scale", 1.0 / (1.0 - p)}, {"seed", static_cast<int64_t>(rng())}, {"offset", int64_t{0}}};
        compare("dropout", {x.cpu}, {x.dev}, attrs, ctx("dropout", dt, "p " + std::to_string(p) + " n " + std::to_string(n)));
      }
    }
  }
}

// ---- pooling and upsampling ----------------------------------------------------------------------

// An (N, C, ...) operand in one of the layouts the pooling kernels read: packed, channels-last
// (4-d) or a strided view; `specials` replace every 7th value (-inf and NaN windows).
Pair volume_pair(const Shape& s, DType dt, int layout, std::mt19937& rng, const std::vector<double>& specials = {}) {
  if (layout == 1 && s.size() == 4) {
    Pair p = make_pair({s[0], s[2], s[3], s[1]}, dt, View::Contiguous, Values::Any, rng, specials);
    return {ops::permute(p.cpu, {0, 3, 1, 2}), ops::permute(p.dev, {0, 3, 1, 2})};
  }
  return make_pair(s, dt, layout == 2 ? View::Gapped : View::Contiguous, Values::Any, rng, specials);
}
const char* layout_name(int layout) { return layout == 0 ? "packed" : layout == 1 ? "channels-last" : "strided"; }

struct PoolCase {
  Shape input, kernel, stride, padding, dilation;
  bool ceil_mode;
};

// The output extent of a pooling (PyTorch's pooling_output_shape).
int64_t pooled(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const int64_t span = in + 2 * p - d * (k - 1) - 1;
  int64_t out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

const std::vector<PoolCase> kPool2d = {
    {{2, 3, 9, 11}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, false},
    {{1, 4, 13, 7}, {2, 3}, {2, 1}, {0, 1}, {2, 1}, true},
    {{2, 2, 8, 8}, {4, 4}, {3, 3}, {2, 2}, {1, 1}, true},
    {{1, 5, 5, 6}, {1, 1}, {1, 2}, {0, 0}, {1, 1}, false},
};
const std::vector<PoolCase> kPool3d = {
    {{2, 2, 5, 7, 6}, {2, 3, 3}, {2, 2, 1}, {1, 1, 0}, {1, 1, 2}, false},
    {{1, 3, 4, 5, 5}, {3, 2, 2}, {2, 2, 2}, {1, 0, 1}, {1, 1, 1}, true},
};

Shape pooled_shape(const PoolCase& pc, bool dilated) {
  Shape out = {pc.input[0], pc.input[1]};
  for (size_t i = 0; i < pc.kernel.size(); ++i)
    out.push_back(pooled(pc.input[i + 2], pc.kernel[i], pc.stride[i], pc.padding[i], dilated ? pc.dilation[i] : 1,
                         pc.ceil_mode));
  return out;
}

TEST_F(CudaVsCpu, MaxPoolingValuesAndIndices) {
  const std::vector<double> specials = {-INFINITY, -INFINITY, NAN, -INFINITY, 3.0, -INFINITY};
  for (const auto* cases : {&kPool2d, &kPool3d}) {
    for (const PoolCase& pc : *cases) {
      const std::string rank = pc.input.size() == 4 ? "2d" : "3d";
      for (DType dt : common_dtypes("max_pool" + rank)) {
        for (int layout : {0, 1, 2}) {
          const std::string where = ctx("max_pool" + rank, dt, shape_str(pc.input) + " " + layout_name(layout));
          Pair x = volume_pair(pc.input, dt, layout, rng, specials);
          const Attrs attrs{{"kernel_size", pc.kernel}, {"stride", pc.stride}, {"padding", pc.padding},
                            {"dilation", pc.dilation},  {"ceil_mode", pc.ceil_mode}};
          compare("max_pool" + rank, {x.cpu}, {x.dev}, attrs, where);
          // Adaptive: output sizes that do and do not divide the input.
          Shape out_size;
          for (size_t i = 2; i < pc.input.size(); ++i) out_size.push_back(i % 2 ? pc.input[i] : (pc.input[i] + 1) / 2 + 1);
          compare("adaptive_max_pool" + rank, {x.cpu}, {x.dev}, Attrs{{"output_size", out_size}}, where + " adaptive");
        }
      }
    }
  }
}

TEST_F(CudaVsCpu, AveragePoolingAndItsBackward) {
  for (const auto* cases : {&kPool2d, &kPool3d}) {
    for (const PoolCase& pc : *cases) {
      const std::string rank = pc.input.size() == 4 ? "2d" : "3d";
      const Shape out = pooled_shape(pc, false);
      Shape input_size(pc.input.begin() + 2, pc.input.end());
      for (DType dt : common_dtypes("avg_pool" + rank)) {
        for (int variant = 0; variant < 3; ++variant) {
          const bool include_pad = variant != 1;
          const int64_t divisor = variant == 2 ? 5 : 0;
          const int layout = variant;
          const std::string where = ctx("avg_pool" + rank, dt, shape_str(pc.input) + " " + layout_name(layout) +
                                                                   (include_pad ? " count_include_pad" : "") +
                                                                   (divisor ? " divisor 5" : ""));
          Pair x = volume_pair(pc.input, dt, layout, rng);
          const Attrs attrs{{"kernel_size", pc.kernel}, {"stride", pc.stride},         {"padding", pc.padding},
                            {"ceil_mode", pc.ceil_mode}, {"count_include_pad", include_pad}, {"divisor", divisor}};
          compare("avg_pool" + rank, {x.cpu}, {x.dev}, attrs, where);
          Pair g = volume_pair(out, dt, layout, rng);
          // A channels-last 2-d input's gradient is channels last (the functional layer's choice).
          const bool channels_last = layout == 1 && rank == "2d";
          Attrs battrs = attrs;
          battrs.set("input_size", input_size);
          battrs.set("channels_last", channels_last);
          compare("avg_pool" + rank + "_backward", {g.cpu}, {g.dev}, battrs, where + " backward");
          // Adaptive average, both ways.
          Shape out_size;
          for (size_t i = 2; i < pc.input.size(); ++i) out_size.push_back(i % 2 ? pc.input[i] - 2 : pc.input[i] + 3);
          compare("adaptive_avg_pool" + rank, {x.cpu}, {x.dev}, Attrs{{"output_size", out_size}}, where + " adaptive");
          Shape gshape = {pc.input[0], pc.input[1]};
          gshape.insert(gshape.end(), out_size.begin(), out_size.end());
          Pair ga = volume_pair(gshape, dt, layout, rng);
          compare("adaptive_avg_pool" + rank + "_backward", {ga.cpu}, {ga.dev},
                  Attrs{{"input_size", input_size}, {"output_size", out_size}, {"channels_last", channels_last}},
                  where + " adaptive backward");
        }
      }
    }
  }
}

TEST_F(CudaVsCpu, UpsamplingAndItsBackward) {
  struct Case {
    Shape input, output;
    double scale_h, scale_w;
  };
  const Case cases[] = {
      {{2, 3, 5, 7}, {11, 13}, 0.0, 0.0},  // sizes: scale in / out
      {{1, 2, 4, 4}, {6, 10}, 1.7, 2.5},   // user scales that do not give the sizes exactly
      {{1, 3, 9, 8}, {4, 3}, 0.0, 0.0},    // downsampling
      {{2, 1, 1, 6}, {3, 6}, 0.0, 0.0},    // one input row
  };
  for (const Case& c : cases) {
    const Shape out = {c.input[0], c.input[1], c.output[0], c.output[1]};
    const Shape input_size = {c.input[2], c.input[3]};
    for (DType dt : common_dtypes("upsample_nearest2d")) {
      for (int layout : {0, 1, 2}) {
        const std::string where = ctx("upsample", dt, shape_str(c.input) + " -> " + shape_str(c.output) + " " + layout_name(layout));
        Pair x = volume_pair(c.input, dt, layout, rng), g = volume_pair(out, dt, layout, rng);
        const Attrs nearest{{"output_size", c.output}, {"scale_h", c.scale_h}, {"scale_w", c.scale_w}};
        compare("upsample_nearest2d", {x.cpu}, {x.dev}, nearest, where + " nearest");
        Attrs nb = nearest;
        nb.set("input_size", input_size);
        compare("upsample_nearest2d_backward", {g.cpu}, {g.dev}, nb, where + " nearest backward");
        for (bool ac : {false, true}) {
          Attrs bil = nearest;
          bil.set("align_corners", ac);
          compare("upsample_bilinear2d", {x.cpu}, {x.dev}, bil, where + (ac ? " bilinear align_corners" : " bilinear"));
          bil.set("input_size", input_size);
          compare("upsample_bilinear2d_backward", {g.cpu}, {g.dev}, bil, where + (ac ? " bilinear align_corners backward" : " bilinear backward"));
          Attrs bic = nearest;
          bic.set("align_corners", ac);
          compare("upsample_bicubic2d", {x.cpu}, {x.dev}, bic, where + (ac ? " bicubic align_corners" : " bicubic"));
          bic.set("input_size", input_size);
          compare("upsample_bicubic2d_backward", {g.cpu}, {g.dev}, bic, where + (ac ? " bicubic align_corners backward" : " bicubic backward"));
        }
      }
    }
  }
}

}  // namespace
