#include "tessera/backend/cpu/onednn_conv.h"

#include <omp.h>

#include <algorithm>
#include <list>
#include <memory>
#include <mutex>
#include <vector>
#include <oneapi/dnnl/dnnl.hpp>

#include "tessera/core/cpu_allocator.h"
#include "tessera/core/error.h"

namespace tessera::cpu {

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// The primitive descriptors of one convolution shape, built once (building costs far more than a
// small convolution) and kept in a small most-recently-used cache.
struct ConvPrimitives {
  ConvShape shape;
  int threads;  // oneDNN sizes a primitive's work split for the OpenMP team it was created under
  memory::desc user_src, user_weights, user_bias, user_dst;
  dnnl::convolution_forward::primitive_desc fwd;
  dnnl::convolution_backward_data::primitive_desc bwd_data;
  dnnl::convolution_backward_weights::primitive_desc bwd_weights;
  dnnl::convolution_forward fwd_prim;
  dnnl::convolution_backward_data bwd_data_prim;
  dnnl::convolution_backward_weights bwd_weights_prim;
};

ConvPrimitives build(const ConvShape& s) {
  auto& eng = cpu_engine();
  memory::dims src{s.N, s.C, s.H, s.W}, dst{s.N, s.OC, s.OH, s.OW}, bias{s.OC};
  memory::dims weights = s.groups == 1 ? memory::dims{s.OC, s.C, s.KH, s.KW}
                                       : memory::dims{s.groups, s.OC / s.groups, s.C / s.groups, s.KH, s.KW};
  memory::dims strides{s.stride_h, s.stride_w}, dilates{s.dilation_h - 1, s.dilation_w - 1};
  memory::dims pad_l{s.pad_h, s.pad_w};
  // Right padding that makes oneDNN's output size equal ours (it may be smaller than pad_l).
  memory::dims pad_r{(s.OH - 1) * s.stride_h + (s.KH - 1) * s.dilation_h + 1 - s.H - s.pad_h,
                     (s.OW - 1) * s.stride_w + (s.KW - 1) * s.dilation_w + 1 - s.W - s.pad_w};
  // Operands of the products in bf16 under mixed precision; what a primitive writes stays f32.
  const dt operand = s.bf16 ? dt::bf16 : dt::f32;
  memory::desc src_any(src, operand, tag::any), dst_any(dst, dt::f32, tag::any), w_any(weights, operand, tag::any);
  memory::desc src_out_any(src, dt::f32, tag::any), dst_in_any(dst, operand, tag::any),
      w_out_any(weights, dt::f32, tag::any);
  memory::desc bias_md(bias, dt::f32, tag::x);
  // Scratchpads are ours (scratchpad_mode::user), one per calling thread: Debian's oneDNN shares one
  // library scratchpad among all primitives, so two threads running convolutions at once (ranks of
  // the threaded backend, a data-loader thread) corrupted each other's reduction barriers and
  // backward-weights spun forever.
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  ConvPrimitives p;
  p.shape = s;
  p.threads = omp_get_max_threads();
  p.user_src = memory::desc(src, dt::f32, tag::nchw);
  p.user_dst = memory::desc(dst, dt::f32, tag::nchw);
  p.user_weights = memory::desc(weights, dt::f32, s.groups == 1 ? tag::oihw : tag::goihw);
  p.user_bias = bias_md;
  dnnl::convolution_forward::desc fd(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, src_any,
                                     w_any, bias_md, dst_any, strides, dilates, pad_l, pad_r);
  p.fwd = dnnl::convolution_forward::primitive_desc(fd, attr, eng);
  dnnl::convolution_backward_data::desc bd(dnnl::algorithm::convolution_direct, src_out_any, w_any, dst_in_any,
                                           strides, dilates, pad_l, pad_r);
  p.bwd_data = dnnl::convolution_backward_data::primitive_desc(bd, attr, eng, p.fwd);
  dnnl::convolution_backward_weights::desc bw(dnnl::algorithm::convolution_direct, src_any, w_out_any, bias_md,
                                              dst_in_any, strides, dilates, pad_l, pad_r);
  p.bwd_weights = dnnl::convolution_backward_weights::primitive_desc(bw, attr, eng, p.fwd);
  p.fwd_prim = dnnl::convolution_forward(p.fwd);
  p.bwd_data_prim = dnnl::convolution_backward_data(p.bwd_data);
  p.bwd_weights_prim = dnnl::convolution_backward_weights(p.bwd_weights);
  return p;
}

std::shared_ptr<const ConvPrimitives> primitives_for(const ConvShape& s) {
  static std::mutex mu;
  static std::list<std::shared_ptr<const ConvPrimitives>> cache;  // most recent first
  // tessera serve's dynamic batches take every size from 1 to --max-batch: with 32 entries the CNN's
  // two layers thrashed at 64 shapes (2,500 requests/s at 64 clients instead of 7,000).
  constexpr size_t kCapacity = 512;
  std::lock_guard<std::mutex> lock(mu);
  // Keyed by thread count too: a primitive built for one thread keeps running on one thread after
  // set_num_threads(2) (measured: CNN at 2 threads 3412 instead of 4702 samples/s).
  const int threads = omp_get_max_threads();
  for (auto it = cache.begin(); it != cache.end(); ++it)
    if ((*it)->shape == s && (*it)->threads == threads) {
      cache.splice(cache.begin(), cache, it);
      return cache.front();
    }
  try {
    cache.push_front(std::make_shared<const ConvPrimitives>(build(s)));
  } catch (const dnnl::error& e) {
    throw NotSupportedError(std::string("[conv2d] oneDNN cannot build this convolution: ") + e.what());
  }
  if (cache.size() > kCapacity) cache.pop_back();
  return cache.front();
}

// A memory in the layout the primitive wants: `user` itself, or a reordered copy of it (in `owner`'s
// buffer when given one).
memory as_layout(memory user, const memory::desc& wanted, dnnl::stream& stream, bool copy_in,
                 std::shared_ptr<void>* owner = nullptr) {
  if (user.get_desc() == wanted) return user;
  if (owner != nullptr) *owner = cpu_allocator::allocate_shared(std::max<size_t>(wanted.get_size(), 1));
  memory m = owner != nullptr ? memory(wanted, cpu_engine(), owner->get()) : memory(wanted, cpu_engine());
  if (copy_in) dnnl::reorder(user, m).execute(stream, user, m);
  return m;
}

// This thread's scratchpad, grown to what `pd` asks for.
memory scratchpad_for(const dnnl::primitive_desc_base& pd) {
  thread_local std::vector<uint8_t> buffer;
  memory::desc md = pd.scratchpad_desc();
  if (buffer.size() < md.get_size() || buffer.empty()) buffer.resize(std::max<size_t>(md.get_size(), 1));
  return memory(md, cpu_engine(), buffer.data());
}

void copy_out(memory from, memory user, dnnl::stream& stream) {
  if (from.get_data_handle() != user.get_data_handle()) dnnl::reorder(from, user).execute(stream, from, user);
}

memory wrap(const memory::desc& md, const float* data) {
  return memory(md, cpu_engine(), const_cast<float*>(data));
}

}  // namespace

ConvSource onednn_conv_forward(const ConvShape& s, const float* src, const float* weights, const float* bias,
                               float* dst, bool keep_source) {
  auto p = primitives_for(s);
  dnnl::stream stream(cpu_engine());
  memory u_src = wrap(p->user_src, src), u_w = wrap(p->user_weights, weights), u_dst = wrap(p->user_dst, dst);
  // A source kept for the backward lives in the tensor allocator's memory (counted like activations).
  std::shared_ptr<void> kept_buffer;
  memory m_src = as_layout(u_src, p->fwd.src_desc(), stream, true, keep_source ? &kept_buffer : nullptr);
  memory m_w = as_layout(u_w, p->fwd.weights_desc(), stream, true);
  memory m_dst = as_layout(u_dst, p->fwd.dst_desc(), stream, false);
  std::vector<float> zero_bias;
  if (!bias) zero_bias.assign(s.OC, 0.0f);
  memory m_bias = wrap(p->user_bias, bias ? bias : zero_bias.data());
  p->fwd_prim.execute(stream, {{DNNL_ARG_SRC, m_src}, {DNNL_ARG_WEIGHTS, m_w}, {DNNL_ARG_BIAS, m_bias}, {DNNL_ARG_DST, m_dst},
                                {DNNL_ARG_SCRATCHPAD, scratchpad_for(p->fwd)}});
  copy_out(m_dst, u_dst, stream);
  stream.wait();
  if (!keep_source) return {};
  return {std::make_shared<const memory>(m_src), kept_buffer};
}

void onednn_conv_backward(const ConvShape& s, const float* diff_dst, const float* weights, const ConvSource& src,
                          float* diff_src, float* diff_weights, float* diff_bias) {
  auto p = primitives_for(s);
  dnnl::stream stream(cpu_engine());
  const bool data = diff_src != nullptr, weight = diff_weights != nullptr || diff_bias != nullptr;
  TESSERA_ASSERT(!weight || src.memory, "onednn_conv_backward: the weight gradient needs the forward's source");
  memory u_dd = wrap(p->user_dst, diff_dst);
  memory dd_data, dd_weights;
  if (data) dd_data = as_layout(u_dd, p->bwd_data.diff_dst_desc(), stream, true);
  if (weight)
    dd_weights = data && dd_data.get_desc() == p->bwd_weights.diff_dst_desc()
                     ? dd_data
                     : as_layout(u_dd, p->bwd_weights.diff_dst_desc(), stream, true);
  if (data) {
    memory u_w = wrap(p->user_weights, weights), u_ds = wrap(p->user_src, diff_src);
    memory m_w = as_layout(u_w, p->bwd_data.weights_desc(), stream, true);
    memory m_ds = as_layout(u_ds, p->bwd_data.diff_src_desc(), stream, false);
    p->bwd_data_prim.execute(stream, {{DNNL_ARG_DIFF_DST, dd_data}, {DNNL_ARG_WEIGHTS, m_w}, {DNNL_ARG_DIFF_SRC, m_ds},
                                       {DNNL_ARG_SCRATCHPAD, scratchpad_for(p->bwd_data)}});
    copy_out(m_ds, u_ds, stream);
  }
  if (weight) {
    std::vector<float> scratch_weights, scratch_bias;
    if (!diff_weights) scratch_weights.resize(p->user_weights.get_size() / sizeof(float));
    if (!diff_bias) scratch_bias.resize(s.OC);
    memory kept = *std::static_pointer_cast<const memory>(src.memory);
    memory m_src = as_layout(kept, p->bwd_weights.src_desc(), stream, true);
    memory u_dw = wrap(p->user_weights, diff_weights ? diff_weights : scratch_weights.data());
    memory m_dw = as_layout(u_dw, p->bwd_weights.diff_weights_desc(), stream, false);
    memory m_db = wrap(p->user_bias, diff_bias ? diff_bias : scratch_bias.data());
    p->bwd_weights_prim.execute(stream, {{DNNL_ARG_SRC, m_src}, {DNNL_ARG_DIFF_DST, dd_weights},
                                         {DNNL_ARG_DIFF_WEIGHTS, m_dw}, {DNNL_ARG_DIFF_BIAS, m_db},
                                         {DNNL_ARG_SCRATCHPAD, scratchpad_for(p->bwd_weights)}});
    copy_out(m_dw, u_dw, stream);
  }
  stream.wait();
}

}  // namespace tessera::cpu
