// The CUDA kernel table against the CPU's (ops/kernels.h): every elementwise op code, forward and
// backward formulas alike, on contiguous, transposed and broadcast operands; copies between dtypes
// and layouts; fills; max, attention's weights, cross-entropy, layer and batch norm, embedding and
// index_select, each with its backward; dropout's mask; and the fused optimizer updates. Tolerances:
// the formulas are the same (ops/elementwise_formulas.h) but CUDA's expf/erff/powf and the CPU's
// vectorised exp/erf differ by a few ulps, so 1e-5 relative (GELU: the CPU's erf approximation,
// within 6e-7 absolute, sets 2e-6); sums over a row or a column add in another order on the device.
// Max and the scatter-adds are compared bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "tessera/ops/kernels.h"
#include "tessera/ops/ops.h"
#include "testing/cuda_device.h"

namespace tessera {
namespace {

void expect_close(const Tensor& gpu, const Tensor& cpu, float rtol, float atol, const std::string& what) {
  ASSERT_EQ(gpu.shape(), cpu.shape()) << what;
  const std::vector<float> g = gpu.cpu().contiguous().to_vector<float>(), c = cpu.contiguous().to_vector<float>();
  for (size_t i = 0; i < c.size(); ++i) {
    if (std::isnan(c[i])) {
      EXPECT_TRUE(std::isnan(g[i])) << what << " element " << i;
      continue;
    }
    EXPECT_NEAR(g[i], c[i], atol + rtol * std::fabs(c[i])) << what << " element " << i;
  }
}

void expect_same_bits(const Tensor& gpu, const Tensor& cpu, const std::string& what) {
  ASSERT_EQ(gpu.shape(), cpu.shape()) << what;
  ASSERT_EQ(gpu.dtype(), cpu.dtype()) << what;
  const Tensor g = gpu.cpu().contiguous(), c = cpu.contiguous();
  EXPECT_EQ(std::memcmp(g.raw_data(), c.raw_data(), static_cast<size_t>(c.numel()) * dtype_size(c.dtype())), 0) << what;
}

// The IndexError's text of `f` (empty where it throws none).
template <typename F>
std::string index_error_of(const F& f) {
  try {
    f();
  } catch (const IndexError& e) {
    return e.what();
  }
  return "";
}

const Kernels& gpu_kernels() { return kernels_for(cuda_device(0)); }
const Kernels& cpu_kernels_table() { return kernels_for(cpu_device()); }

// Positive operands where a formula needs them (log, sqrt, pow's base).
Tensor operand(const Shape& shape, uint64_t seed, bool positive) {
  Generator gen(seed);
  Tensor t = randn(shape, gen);
  return positive ? add(mul(t, t), 0.5f) : t;
}

TEST(CudaKernels, EveryUnaryCodeEqualsTheCpu) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  for (int code = 0; code <= static_cast<int>(UnaryOp::kNonzero); ++code) {
    const auto op = static_cast<UnaryOp>(code);
    const bool positive = op == UnaryOp::kLog || op == UnaryOp::kSqrt || op == UnaryOp::kPowScalar;
    for (const Shape& shape : {Shape{}, Shape{1}, Shape{7, 33}, Shape{3, 4, 5, 6}}) {
      Tensor a = operand(shape, 1 + code, positive);
      const float scalar = op == UnaryOp::kPowScalar ? 1.5f : 0.25f;
      Tensor cpu = kernels_for(a).unary(op, a, scalar);
      Tensor gpu = kernels_for(cuda_device(0)).unary(op, a.cuda(), scalar);
      expect_close(gpu, cpu, 1e-5f, op == UnaryOp::kGelu ? 2e-6f : 1e-7f, std::string(op_name(op)) + " " + shape_str(shape));
    }
    // A transposed (strided) operand.
    Tensor t = operand({5, 9}, 100 + code, positive);
    Tensor strided_gpu = transpose(t.cuda(), 0, 1);
    Tensor cpu = kernels_for(t).unary(op, transpose(t, 0, 1), 0.25f);
    expect_close(kernels_for(cuda_device(0)).unary(op, strided_gpu, 0.25f), cpu, 1e-5f, 2e-6f,
                 std::string(op_name(op)) + " transposed");
  }
}

TEST(CudaKernels, EveryBinaryCodeEqualsTheCpuWithBroadcasting) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  struct Shapes {
    Shape a, b;
  };
  for (int code = 0; code <= static_cast<int>(BinaryOp::kGeluGrad); ++code) {
    const auto op = static_cast<BinaryOp>(code);
    const bool positive = op == BinaryOp::kPow || op == BinaryOp::kPowBaseGrad || op == BinaryOp::kPowExponentGrad ||
                          op == BinaryOp::kSqrtGrad || op == BinaryOp::kDiv || op == BinaryOp::kDivisorGrad;
    for (const Shapes& s : {Shapes{{6, 10}, {6, 10}}, Shapes{{6, 10}, {10}}, Shapes{{4, 1, 3}, {5, 1}},
                            Shapes{{}, {3, 2}}}) {
      Tensor a = operand(s.a, 7 + code, positive), b = operand(s.b, 70 + code, positive);
      if (op == BinaryOp::kKeepWhere || op == BinaryOp::kDropWhere || op == BinaryOp::kFillWhere)
        b = gt(b, 0.0f);  // a mask
      Tensor cpu = kernels_for(a).binary(op, a, b, 1.5f);
      Tensor gpu = kernels_for(cuda_device(0)).binary(op, a.cuda(), b.cuda(), 1.5f);
      expect_close(gpu, cpu, 1e-5f, op == BinaryOp::kGeluGrad ? 2e-6f : 1e-7f,
                   std::string(op_name(op)) + " " + shape_str(s.a) + " with " + shape_str(s.b));
    }
  }
}

// The ops themselves on the device: a forward and backward through the table, against the CPU.
TEST(CudaKernels, ElementwiseOpsAndTheirGradientsEqualTheCpu) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  Tensor x = randn({8, 16}), w = randn({8, 16});  // no broadcast: its backward would sum, which has no CUDA kernel yet
  auto run = [&](Device device) {
    Tensor xs = x.to(device).set_requires_grad(true);
    Tensor ws = w.to(device).set_requires_grad(true);
    Tensor y = mul(gelu(add(xs, ws)), sigmoid(xs));
    Tensor loss_grad = ones_like(y);
    y.backward(loss_grad);
    return std::vector<Tensor>{y.cpu(), xs.grad().cpu(), ws.grad().cpu()};
  };
  const auto cpu = run(cpu_device()), gpu = run(cuda_device(0));
  for (size_t i = 0; i < cpu.size(); ++i) expect_close(gpu[i], cpu[i], 1e-5f, 2e-6f, "output/grad " + std::to_string(i));
}

TEST(CudaKernels, CopiesConvertAndKeepLayouts) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  Tensor f = randn({6, 7});
  Tensor on_device = f.cuda();
  // Strided to contiguous, and a broadcast source into a strided destination.
  expect_close(contiguous(transpose(on_device, 0, 1)), contiguous(transpose(f, 0, 1)), 0, 0, "transpose copy");
  Tensor dst = zeros({7, 6}).cuda();
  Tensor dst_view = transpose(dst, 0, 1);
  copy_(dst_view, on_device);
  expect_close(dst, contiguous(transpose(f, 0, 1)), 0, 0, "copy into a transposed view");
  // dtype conversions equal the CPU's bit for bit.
  for (DType to : {DType::BFloat16, DType::Float16, DType::Int64}) {
    Tensor gpu = to_dtype(on_device, to).cpu(), cpu = to_dtype(f, to);
    EXPECT_EQ(std::memcmp(gpu.raw_data(), cpu.raw_data(), static_cast<size_t>(cpu.numel()) * dtype_size(to)), 0)
        << dtype_name(to);
  }
  Tensor filled = ones_like(on_device);
  expect_close(filled, ones({6, 7}), 0, 0, "ones_like");
  mul_(filled, 3.0f);
  add_(filled, on_device, 0.5f);
  expect_close(filled, add(mul(f, 0.5f), 3.0f), 1e-6f, 1e-6f, "mul_ and add_");
}

TEST(CudaKernels, SumsAndSoftmaxEqualTheCpu) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  Tensor x = randn({4, 5, 300});
  Tensor xd = x.cuda();
  for (const Shape& dims : {Shape{}, Shape{2}, Shape{0}, Shape{0, 2}, Shape{1}}) {
    expect_close(sum(xd, dims, false), sum(x, dims, false), 1e-5f, 1e-5f, "sum over " + shape_str(dims));
    expect_close(sum(xd, dims, true), sum(x, dims, true), 1e-5f, 1e-5f, "sum keepdim over " + shape_str(dims));
  }
  EXPECT_NEAR(squared_norm(xd), squared_norm(x), 1e-9 * squared_norm(x));
  for (bool log_space : {false, true}) {
    auto run = [&](Device device) {
      Tensor in = x.to(device).set_requires_grad(true);
      Tensor y = log_space ? log_softmax(in, -1) : softmax(in, 1);
      y.backward(ones_like(y));  // a broadcast-free gradient: sum's and softmax's backward on the device
      return std::vector<Tensor>{y.cpu(), in.grad().cpu()};
    };
    const auto cpu = run(cpu_device()), gpu = run(cuda_device(0));
    expect_close(gpu[0], cpu[0], 1e-5f, 1e-6f, log_space ? "log_softmax" : "softmax");
    expect_close(gpu[1], cpu[1], 1e-4f, 1e-5f, log_space ? "log_softmax backward" : "softmax backward");
  }
  // A row of -inf (a fully masked attention row) is NaN on both.
  Tensor masked = full({2, 3}, -std::numeric_limits<float>::infinity());
  expect_close(softmax(masked.cuda(), 1), softmax(masked, 1), 0, 0, "masked row");
}

TEST(CudaKernels, FusedUpdatesEqualTheCpu) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  const int64_t n = 100003;
  Tensor p = randn({n}), g = randn({n}), m = zeros({n}), v = zeros({n});
  Tensor pd = p.cuda(), gd = g.cuda(), md = m.cuda(), vd = v.cuda();
  const AdamStep adam{0.01f, 0.5f, 0.9f, 0.999f, 1e-8f, 0.1f, 0.001f, true};
  adam_update_(p, g, m, v, adam);
  adam_update_(pd, gd, md, vd, adam);
  expect_close(pd, p, 1e-6f, 1e-7f, "adamw parameter");
  expect_close(vd, v, 1e-6f, 0, "adamw second moment");
  Tensor buffer = zeros({n}), buffer_d = buffer.cuda();
  const SgdStep sgd{0.1f, 0.9f, 0.0f, 0.01f, true, true};
  sgd_update_(p, g, buffer, sgd);
  sgd_update_(pd, gd, buffer_d, sgd);
  expect_close(pd, p, 1e-6f, 1e-7f, "sgd parameter");
  Tensor none;
  lars_update_(p, g, none, 0.2f, 0.1f, 0.0f);
  lars_update_(pd, gd, none, 0.2f, 0.1f, 0.0f);
  expect_close(pd, p, 1e-6f, 1e-7f, "lars parameter");
}

// Rows with a NaN (the first wins), ties (the first index wins) and -inf; a column with a NaN and a
// tie across rows.
Tensor max_operand() {
  std::vector<float> v = randn({5, 300}).to_vector<float>();
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  v[1 * 300 + 17] = nan;
  v[1 * 300 + 200] = nan;
  for (int j = 0; j < 300; ++j) v[2 * 300 + j] = j % 3 == 0 ? 2.5f : -1.0f;
  v[3 * 300 + 5] = v[3 * 300 + 250] = 9.0f;
  for (int j = 0; j < 300; ++j) v[4 * 300 + j] = -inf;
  v[0 * 300 + 10] = v[2 * 300 + 10] = 7.0f;  // column 10's tie, rows 0 and 2
  return from_vector(v, {5, 300});
}

TEST(CudaKernels, MaxAndItsBackwardEqualTheCpu) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  Generator gen(3);
  const Tensor a = max_operand();
  struct Case {
    Tensor x;
    int64_t dim;
    std::string what;
  };
  const Tensor odd = randn({4, 7, 3}, gen), short_rows = randn({6, 7}, gen);
  for (const Case& c : {Case{a, 1, "rows of 300"}, Case{a, 0, "columns"}, Case{odd, 1, "a middle dim"},
                        Case{odd, 2, "a last dim of 3"}, Case{short_rows, 1, "short rows"},
                        Case{transpose(a, 0, 1), 1, "a transposed input"}}) {
    for (bool keepdim : {false, true}) {
      const std::string what = c.what + (keepdim ? " keepdim" : "");
      const MaxResult cpu = cpu_kernels_table().max(c.x, c.dim, keepdim);
      const Tensor xd = c.x.is_contiguous() ? c.x.cuda() : transpose(a.cuda(), 0, 1);
      const MaxResult gpu = gpu_kernels().max(xd, c.dim, keepdim);
      expect_same_bits(gpu.values, cpu.values, what + " values");
      expect_same_bits(gpu.indices, cpu.indices, what + " indices");
      const Tensor g = randn(cpu.values.shape(), gen);
      expect_same_bits(gpu_kernels().max_backward(g.cuda(), gpu.indices, c.x.shape(), c.dim, keepdim),
                       cpu_kernels_table().max_backward(g, cpu.indices, c.x.shape(), c.dim, keepdim),
                       what + " backward");
    }
  }
  // Through the op: max's gradient on the device.
  Tensor xd = a.cuda().set_requires_grad(true);
  Tensor values = max(xd, 1, false).values;
  values.backward(ones_like(values));
  Tensor xc = a.clone().set_requires_grad(true);
  Tensor values_cpu = max(xc, 1, false).values;
  values_cpu.backward(ones_like(values_cpu));
  expect_same_bits(xd.grad(), xc.grad(), "max's gradient through the op");
}

TEST(CudaKernels, AttentionWeightsEqualTheCpu) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  Generator gen(5);
  // Square, a key row longer than a block (Tq < Tk: the queries at the end of a key cache), and more
  // queries than keys (under `causal` the first rows see no key: NaN rows on both).
  for (const Shape& shape : {Shape{2, 3, 5, 5}, Shape{2, 4, 300}, Shape{3, 7, 5}}) {
    const Tensor scores = randn(shape, gen), g = randn(shape, gen);
    for (bool causal : {false, true}) {
      const std::string what = shape_str(shape) + (causal ? " causal" : "");
      const Tensor cpu = cpu_kernels_table().attention_weights(scores, 0.125f, causal);
      const Tensor gpu = gpu_kernels().attention_weights(scores.cuda(), 0.125f, causal);
      expect_close(gpu, cpu, 1e-5f, 1e-7f, what);
      expect_close(gpu_kernels().attention_weights_backward(gpu, g.cuda(), 0.125f, causal),
                   cpu_kernels_table().attention_weights_backward(cpu, g, 0.125f, causal), 1e-4f, 1e-6f,
                   what + " backward");
    }
  }
  // A NaN score makes its row NaN; the other rows are untouched.
  Tensor with_nan = randn({2, 6, 6}, gen);
  std::vector<float> v = with_nan.to_vector<float>();
  v[7] = std::numeric_limits<float>::quiet_NaN();
  with_nan = from_vector(v, {2, 6, 6});
  expect_close(gpu_kernels().attention_weights(with_nan.cuda(), 0.5f, false),
               cpu_kernels_table().attention_weights(with_nan, 0.5f, false), 1e-5f, 1e-7f, "a NaN score");
}

TEST(CudaKernels, CrossEntropyEqualsTheCpu) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  Generator gen(11);
  const int64_t N = 37, C = 300;
  const Tensor logits = randn({N, C}, gen);
  const std::vector<int64_t> drawn = randint(0, C, {N}, gen).to_vector<int64_t>();
  for (const CrossEntropyOptions& opt : {CrossEntropyOptions{}, CrossEntropyOptions{-100, 0.1f},
                                         CrossEntropyOptions{3, 0.25f}}) {
    const std::string what = "ignore " + std::to_string(opt.ignore_index) + ", smoothing " +
                             std::to_string(opt.label_smoothing);
    std::vector<int64_t> t = drawn;
    t[4] = t[20] = t[36] = opt.ignore_index;  // the last row too
    const Tensor targets = from_vector(t, {N});
    const CrossEntropyResult cpu = cpu_kernels_table().cross_entropy(logits, targets, opt);
    const CrossEntropyResult gpu = gpu_kernels().cross_entropy(logits.cuda(), targets.cuda(), opt);
    EXPECT_EQ(gpu.loss.device(), cuda_device(0)) << what;
    EXPECT_EQ(gpu.loss.dim(), 0) << what;
    EXPECT_EQ(gpu.count, cpu.count) << what;
    const float loss = cpu.loss.item<float>();
    EXPECT_NEAR(gpu.loss.cpu().item<float>(), loss, 1e-5f * std::fabs(loss)) << what;
    // The log-sum-exp of the rows not ignored (the CPU leaves the others unwritten).
    const std::vector<float> lse_gpu = gpu.lse.cpu().to_vector<float>(), lse_cpu = cpu.lse.to_vector<float>();
    for (int64_t i = 0; i < N; ++i) {
      if (t[static_cast<size_t>(i)] == opt.ignore_index) continue;
      EXPECT_NEAR(lse_gpu[static_cast<size_t>(i)], lse_cpu[static_cast<size_t>(i)], 1e-5f) << what << " row " << i;
    }
    const Tensor g = scalar_tensor(1.5f);
    expect_close(gpu_kernels().cross_entropy_backward(logits.cuda(), targets.cuda(), gpu.lse, g.cuda(), opt, gpu.count),
                 cpu_kernels_table().cross_entropy_backward(logits, targets, cpu.lse, g, opt, cpu.count), 1e-5f, 1e-8f,
                 what + " backward");
  }
  // Every target ignored: no count, a NaN loss, a zero gradient.
  const Tensor ignored = from_vector(std::vector<int64_t>(static_cast<size_t>(N), -100), {N});
  const CrossEntropyResult none = gpu_kernels().cross_entropy(logits.cuda(), ignored.cuda(), {});
  EXPECT_EQ(none.count, 0);
  EXPECT_TRUE(std::isnan(none.loss.cpu().item<float>()));
  expect_close(gpu_kernels().cross_entropy_backward(logits.cuda(), ignored.cuda(), none.lse, scalar_tensor(1.0f).cuda(),
                                                    {}, 0),
               zeros({N, C}), 0, 0, "all ignored backward");
  // An out-of-range target: the CPU's IndexError, word for word (the first bad position).
  std::vector<int64_t> bad = drawn;
  bad[30] = C;
  bad[33] = -5;
  const Tensor bad_targets = from_vector(bad, {N});
  const std::string cpu_error =
      index_error_of([&] { cpu_kernels_table().cross_entropy(logits, bad_targets, {}); });
  EXPECT_FALSE(cpu_error.empty());
  EXPECT_EQ(index_error_of([&] { gpu_kernels().cross_entropy(logits.cuda(), bad_targets.cuda(), {}); }), cpu_error);
  // Through the op, forward and backward on the device.
  const Tensor targets = from_vector(drawn, {N});
  Tensor ld = logits.cuda().set_requires_grad(true), lc = logits.clone().set_requires_grad(true);
  Tensor loss_gpu = cross_entropy(ld, targets.cuda()), loss_cpu = cross_entropy(lc, targets);
  loss_gpu.backward();
  loss_cpu.backward();
  EXPECT_NEAR(loss_gpu.cpu().item<float>(), loss_cpu.item<float>(), 1e-5f * std::fabs(loss_cpu.item<float>()));
  expect_close(ld.grad(), lc.grad(), 1e-5f, 1e-8f, "cross_entropy's gradient through the op");
}

TEST(CudaKernels, LayerNormEqualsTheCpu) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  Generator gen(13);
  struct Case {
    Shape shape;
    int64_t D;
    bool affine;
  };
  // A row longer than a block; two normalised dims; many rows (the column sums in several chunks).
  for (const Case& c : {Case{{6, 300}, 300, true}, Case{{5, 3, 7}, 21, false}, Case{{1000, 33}, 33, true}}) {
    const std::string what = shape_str(c.shape) + (c.affine ? " with weight and bias" : "");
    const Tensor x = randn(c.shape, gen), g = randn(c.shape, gen);
    const Tensor w = c.affine ? randn({c.D}, gen) : Tensor(), b = c.affine ? randn({c.D}, gen) : Tensor();
    const Tensor wd = c.affine ? w.cuda() : Tensor(), bd = c.affine ? b.cuda() : Tensor();
    const WithSaved cpu = cpu_kernels_table().layer_norm(x, w, b, c.D, 1e-5f);
    const WithSaved gpu = gpu_kernels().layer_norm(x.cuda(), wd, bd, c.D, 1e-5f);
    expect_close(gpu.out, cpu.out, 1e-4f, 1e-5f, what);
    expect_close(gpu.saved, cpu.saved, 1e-4f, 1e-5f, what + " mean and rstd");
    const LayerGrads gc = cpu_kernels_table().layer_norm_backward(x, w, cpu.saved, g, c.D, true, true);
    const LayerGrads gg = gpu_kernels().layer_norm_backward(x.cuda(), wd, gpu.saved, g.cuda(), c.D, true, true);
    expect_close(gg.x, gc.x, 1e-4f, 1e-5f, what + " input gradient");
    expect_close(gg.weight, gc.weight, 1e-4f, 1e-4f, what + " weight gradient");
    expect_close(gg.bias, gc.bias, 1e-4f, 1e-4f, what + " bias gradient");
    // The column sums are the same bits run to run.
    const LayerGrads again = gpu_kernels().layer_norm_backward(x.cuda(), wd, gpu.saved, g.cuda(), c.D, true, true);
    expect_same_bits(again.weight, gg.weight, what + " weight gradient, run twice");
    expect_same_bits(again.bias, gg.bias, what + " bias gradient, run twice");
    const LayerGrads only_x = gpu_kernels().layer_norm_backward(x.cuda(), wd, gpu.saved, g.cuda(), c.D, false, false);
    EXPECT_FALSE(only_x.weight.defined());
    EXPECT_FALSE(only_x.bias.defined());
  }
}

TEST(CudaKernels, BatchNormEqualsTheCpu) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  Generator gen(17);
  for (const Shape& shape : {Shape{4, 3, 5, 7}, Shape{8, 5}, Shape{2, 4, 300}}) {
    const int64_t C = shape[1];
    const Tensor x = randn(shape, gen), g = randn(shape, gen), w = randn({C}, gen), b = randn({C}, gen);
    // Running statistics as strided views (every other element of a buffer).
    const Tensor r = randn({2 * C}, gen);
    Tensor mean_buf = randn({2 * C}, gen), var_buf = add(mul(r, r), 0.5f);
    Tensor mean_buf_d = mean_buf.cuda(), var_buf_d = var_buf.cuda();
    Tensor rm = slice(mean_buf, 0, 0, 2 * C, 2), rv = slice(var_buf, 0, 0, 2 * C, 2);
    Tensor rm_d = slice(mean_buf_d, 0, 0, 2 * C, 2), rv_d = slice(var_buf_d, 0, 0, 2 * C, 2);
    for (bool training : {true, false}) {
      const std::string what = shape_str(shape) + (training ? " training" : " evaluation");
      const WithSaved cpu = cpu_kernels_table().batch_norm(x, rm, rv, w, b, training, 0.1f, 1e-5f);
      const WithSaved gpu = gpu_kernels().batch_norm(x.cuda(), rm_d, rv_d, w.cuda(), b.cuda(), training, 0.1f, 1e-5f);
      expect_close(gpu.out, cpu.out, 1e-5f, 1e-5f, what);
      expect_close(gpu.saved, cpu.saved, 1e-5f, 1e-6f, what + " mean and rstd");
      expect_close(mean_buf_d, mean_buf, 1e-6f, 1e-7f, what + " running mean (and the elements between)");
      expect_close(var_buf_d, var_buf, 1e-6f, 1e-7f, what + " running var (and the elements between)");
      const LayerGrads gc = cpu_kernels_table().batch_norm_backward(x, w, cpu.saved, g, training, true, true);
      const LayerGrads gg =
          gpu_kernels().batch_norm_backward(x.cuda(), w.cuda(), gpu.saved, g.cuda(), training, true, true);
      expect_close(gg.x, gc.x, 1e-4f, 1e-5f, what + " input gradient");
      expect_close(gg.weight, gc.weight, 1e-5f, 1e-5f, what + " weight gradient");
      expect_close(gg.bias, gc.bias, 1e-5f, 1e-5f, what + " bias gradient");
    }
  }
  // Training without running statistics nor weight.
  const Tensor x = randn({6, 4, 9}, gen);
  Tensor none, none_d;
  const WithSaved cpu = cpu_kernels_table().batch_norm(x, none, none, Tensor(), Tensor(), true, 0.1f, 1e-5f);
  const WithSaved gpu = gpu_kernels().batch_norm(x.cuda(), none_d, none_d, Tensor(), Tensor(), true, 0.1f, 1e-5f);
  expect_close(gpu.out, cpu.out, 1e-5f, 1e-5f, "no running statistics, no affine");
}

TEST(CudaKernels, EmbeddingAndIndexSelectEqualTheCpuBitForBit) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  Generator gen(19);
  // Repeated indices: their gradients add up, in the CPU's order on the device too.
  const Tensor weight = randn({50, 300}, gen);
  const Tensor indices = from_vector(std::vector<int64_t>{3, 7, 3, 49, 0, 3, 7, 12}, {2, 4});
  const Tensor out_cpu = cpu_kernels_table().embedding(weight, indices);
  const Tensor out_gpu = gpu_kernels().embedding(weight.cuda(), indices.cuda());
  expect_same_bits(out_gpu, out_cpu, "embedding");
  const Tensor g = randn({2, 4, 300}, gen);
  expect_same_bits(gpu_kernels().embedding_backward(g.cuda(), indices.cuda(), 50),
                   cpu_kernels_table().embedding_backward(g, indices, 50), "embedding backward");
  // Many repeats of a few rows (a padding token), run twice: the same bits.
  const Tensor many = randint(0, 5, {4000}, gen), gm = randn({4000, 33}, gen);
  const Tensor once = gpu_kernels().embedding_backward(gm.cuda(), many.cuda(), 5);
  expect_same_bits(once, cpu_kernels_table().embedding_backward(gm, many, 5), "4000 indices into 5 rows");
  expect_same_bits(gpu_kernels().embedding_backward(gm.cuda(), many.cuda(), 5), once, "4000 indices, run twice");
  // Out of range: the CPU's IndexError, word for word.
  for (int64_t bad : {int64_t{50}, int64_t{-1}}) {
    const Tensor bad_indices = from_vector(std::vector<int64_t>{1, 2, bad, 4, bad}, {5});
    const std::string cpu_error = index_error_of([&] { cpu_kernels_table().embedding(weight, bad_indices); });
    EXPECT_FALSE(cpu_error.empty());
    EXPECT_EQ(index_error_of([&] { gpu_kernels().embedding(weight.cuda(), bad_indices.cuda()); }), cpu_error);
  }

  const Tensor t = randn({4, 9, 5}, gen);
  const Tensor picks = from_vector(std::vector<int64_t>{2, 0, 2, 3, 2, 1, 0}, {7});
  for (int64_t d = 0; d < 3; ++d) {
    const std::string what = "index_select over dim " + std::to_string(d);
    const Tensor cpu = cpu_kernels_table().index_select(t, d, picks);
    const Tensor gpu = gpu_kernels().index_select(t.cuda(), d, picks.cuda());
    expect_same_bits(gpu, cpu, what);
    const Tensor gs = randn(cpu.shape(), gen);
    expect_same_bits(gpu_kernels().index_select_backward(gs.cuda(), t.shape(), d, picks.cuda()),
                     cpu_kernels_table().index_select_backward(gs, t.shape(), d, picks), what + " backward");
  }
  const Tensor out_of_range = from_vector(std::vector<int64_t>{0, 4}, {2});
  const std::string cpu_error = index_error_of([&] { cpu_kernels_table().index_select(t, 0, out_of_range); });
  EXPECT_FALSE(cpu_error.empty());
  EXPECT_EQ(index_error_of([&] { gpu_kernels().index_select(t.cuda(), 0, out_of_range.cuda()); }), cpu_error);
}

TEST(CudaKernels, DropoutMaskKeepsItsRateAndFollowsTheSeed) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  const float p = 0.3f, keep_scale = 1.0f / (1.0f - p);
  const Shape shape{1000, 101};
  const int64_t n = shape_numel(shape);
  Generator gen(42);
  const Tensor first = gpu_kernels().dropout_mask(shape, cuda_device(0), p, gen);
  const Tensor second = gpu_kernels().dropout_mask(shape, cuda_device(0), p, gen);
  // Values 0 or 1 / (1 - p) only; the kept count within 6 binomial standard deviations of n (1 - p).
  const std::vector<float> m = first.cpu().to_vector<float>();
  int64_t kept = 0;
  for (float v : m) {
    EXPECT_TRUE(v == 0.0f || v == keep_scale) << v;
    kept += v != 0.0f;
  }
  const double expected = static_cast<double>(n) * (1.0 - p);
  const double spread = std::sqrt(static_cast<double>(n) * p * (1.0 - p));
  EXPECT_NEAR(static_cast<double>(kept), expected, 6.0 * spread);
  // One draw per call: the generator moved by exactly one number.
  Generator reference(42);
  reference.next_u64();
  reference.next_u64();
  EXPECT_EQ(gen.next_u64(), reference.next_u64());
  // The same seed, the same masks; the next call, another mask.
  Generator replay(42);
  expect_same_bits(gpu_kernels().dropout_mask(shape, cuda_device(0), p, replay), first, "replayed mask");
  const Tensor first_cpu = first.cpu(), second_cpu = second.cpu();
  EXPECT_NE(std::memcmp(first_cpu.raw_data(), second_cpu.raw_data(), sizeof(float) * static_cast<size_t>(n)), 0);
  // p = 1 drops everything (0, not inf); p = 0 keeps everything at 1.
  Generator edge(1);
  expect_close(gpu_kernels().dropout_mask({7, 3}, cuda_device(0), 1.0f, edge), zeros({7, 3}), 0, 0, "p = 1");
  expect_close(gpu_kernels().dropout_mask({7, 3}, cuda_device(0), 0.0f, edge), ones({7, 3}), 0, 0, "p = 0");
}

TEST(CudaKernels, LambEqualsTheCpu) {
  TESSERA_SKIP_WITHOUT_CUDA_DEVICE();
  const int64_t n = 100003;
  Generator gen(23);
  Tensor p = randn({n}, gen), g = randn({n}, gen), m = mul(randn({n}, gen), 0.1f);
  Tensor v = mul(mul(randn({n}, gen), randn({n}, gen)), 0.01f);
  v = mul(v, v);  // a second moment is not negative
  Tensor pd = p.cuda(), gd = g.cuda(), md = m.cuda(), vd = v.cuda();
  const LambStep step{0.9f, 0.999f, 0.1f, 0.001f, 0.19f, 0.002f, 1e-6f, 0.01f};
  const auto [w_cpu, u_cpu] = lamb_moments_(p, g, m, v, step);
  const auto [w_gpu, u_gpu] = lamb_moments_(pd, gd, md, vd, step);
  EXPECT_NEAR(w_gpu, w_cpu, 1e-9 * w_cpu);
  EXPECT_NEAR(u_gpu, u_cpu, 1e-5 * u_cpu);
  expect_close(md, m, 1e-6f, 1e-8f, "lamb first moment");
  expect_close(vd, v, 1e-6f, 1e-10f, "lamb second moment");
  // The norms are the same bits run to run (block sums added in block order).
  Tensor md2 = m.cuda(), vd2 = v.cuda();
  const LambStep no_change{1.0f, 1.0f, 0.0f, 0.0f, 0.19f, 0.002f, 1e-6f, 0.01f};  // moments stay as they are
  const auto first = lamb_moments_(pd, gd, md2, vd2, no_change);
  const auto second = lamb_moments_(pd, gd, md2, vd2, no_change);
  EXPECT_EQ(first, second);
  lamb_apply_(p, m, v, step, 0.05f);
  lamb_apply_(pd, md, vd, step, 0.05f);
  expect_close(pd, p, 1e-5f, 1e-6f, "lamb parameter");
}

}  // namespace
}  // namespace tessera
