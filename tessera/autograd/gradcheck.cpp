#include "tessera/autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/ops.h"

namespace tessera::autograd {

namespace {

// Storage offsets (in elements) of every logical element of `t`, in row-major order.
std::vector<int64_t> element_offsets(const Tensor& t) {
  std::vector<int64_t> out;
  const int64_t n = t.numel(), nd = t.dim();
  std::vector<int64_t> idx(nd, 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = t.offset();
    for (int64_t d = 0; d < nd; ++d) off += idx[d] * t.strides()[d];
    out.push_back(off);
    for (int64_t d = nd - 1; d >= 0; --d) {
      if (++idx[d] < t.shape()[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

double projected(const Tensor& y, const std::vector<float>& r) {
  std::vector<float> v = y.to_vector<float>();
  double s = 0.0;
  for (size_t i = 0; i < v.size(); ++i) s += static_cast<double>(v[i]) * r[i];
  return s;
}

}  // namespace

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f, std::vector<Tensor> inputs,
                          const GradcheckOptions& opt) {
  GradcheckResult result;
  std::vector<bool> checked(inputs.size(), false);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || inputs[i].dtype() != DType::Float32) continue;
    TESSERA_CHECK(inputs[i].is_leaf(), "[gradcheck] input ", i, " must be a leaf tensor");
    inputs[i].set_grad(Tensor());
    inputs[i].set_requires_grad(true);
    checked[i] = true;
  }
  bool previous_mode = grad_enabled();
  set_grad_enabled(true);
  Tensor y = f(inputs);
  Generator gen(opt.seed);
  std::vector<float> r(static_cast<size_t>(y.numel()));
  for (auto& x : r) x = gen.uniform() * 2.0f - 1.0f;
  if (y.requires_grad()) y.backward(from_vector(r, y.shape()));
  set_grad_enabled(previous_mode);

  NoGradGuard no_grad;
  for (size_t i = 0; i < inputs.size() && result.ok; ++i) {
    if (!checked[i]) continue;
    Tensor analytic = inputs[i].grad();
    std::vector<float> a = analytic.defined() ? analytic.to_vector<float>() : std::vector<float>(inputs[i].numel(), 0.0f);
    float* base = static_cast<float*>(inputs[i].impl()->storage->data());
    std::vector<int64_t> offs = element_offsets(inputs[i]);
    for (size_t e = 0; e < offs.size(); ++e) {
      float saved = base[offs[e]];
      base[offs[e]] = saved + static_cast<float>(opt.eps);
      double plus = projected(f(inputs), r);
      base[offs[e]] = saved - static_cast<float>(opt.eps);
      double minus = projected(f(inputs), r);
      base[offs[e]] = saved;
      double numeric = (plus - minus) / (2.0 * opt.eps);
      double err = std::abs(numeric - a[e]);
      result.max_abs_error = std::max(result.max_abs_error, err);
      if (err > opt.atol + opt.rtol * std::abs(numeric) || std::isnan(a[e])) {
        std::ostringstream msg;
        msg << "input " << i << " (shape " << shape_str(inputs[i].shape()) << ") element " << e << ": analytic "
            << a[e] << " vs numeric " << numeric;
        result.ok = false;
        result.message = msg.str();
        break;
      }
    }
  }
  return result;
}

}  // namespace tessera::autograd
