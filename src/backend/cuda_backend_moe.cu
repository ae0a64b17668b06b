// CudaBackend's mixture-of-experts layers: the router in f32 on the device, the routing
// decision on the host (kernels/cpu/moe.h), the experts' SwiGLUs as bf16 GEMMs.
#include "backend/cuda_backend_state.cuh"

#include "kernels/cpu/moe.h"

namespace pagoda {

void CudaBackend::PrepareMoe(MoeLayer* layer) {
  UseDevice(s_->device);
  auto m = std::make_shared<CudaMoe>();
  if (!layer->score_bias.empty()) {
    const TensorView& v = layer->score_bias.view;
    m->score_bias.resize(v.cols);
    PAGODA_CUDA_CHECK(cudaMemcpy(m->score_bias.data(), v.data, v.cols * sizeof(float), cudaMemcpyDeviceToHost));
  }
  m->router_f32 = WidenToF32(Impl(layer->router));
  layer->impl = std::move(m);
}

void CudaBackend::Moe(const MoeSpec& spec, const MoeLayer& layer, const TensorView& x, const TensorView& y) {
  OpTimer timer(s_.get(), "Moe");
  PAGODA_CHECK(layer.impl != nullptr) << "CudaBackend::Moe: the layer was not prepared (PrepareMoe)";
  PAGODA_CHECK(x.contiguous() && y.contiguous()) << "CudaBackend::Moe: x and y must be contiguous";
  const auto& moe = *static_cast<const CudaMoe*>(layer.impl.get());
  State& s = *s_;
  const int64_t n = x.rows, dim = x.cols, ne = spec.num_experts, k = spec.num_experts_per_tok;
  PAGODA_CHECK(static_cast<int64_t>(layer.gate.size()) == ne) << "MoE weights for " << layer.gate.size() << " experts";
  if (n == 0) return;
  // The router on the device, the routing decision on the host (kernels/cpu/moe.cc's): this
  // model's steps cannot be graphs.
  PAGODA_CHECK(!s.graphs->capturing()) << "CudaBackend::Moe: a MoE layer in a step being captured";
  s.host_waiting_caches.insert(s.step_cache_id);
  float* logits = s.moe_logits.Get<float>(n * ne);
  s.Gemm(moe.router_f32, x, logits, ne, false);
  s.host_logits.resize(n * ne);
  PAGODA_CUDA_CHECK(cudaMemcpy(s.host_logits.data(), logits, n * ne * sizeof(float), cudaMemcpyDeviceToHost));
  s.host_ids.resize(n * k);
  s.host_weights.resize(n * k);
  RouteTokens(spec, moe.score_bias, s.host_logits.data(), n, s.host_ids.data(), s.host_weights.data());

  // (token, slot) pairs grouped per expert (a counting sort, as on the CPU).
  s.starts.assign(ne + 1, 0);
  for (int64_t i = 0; i < n * k; ++i) ++s.starts[s.host_ids[i] + 1];
  for (int64_t e = 0; e < ne; ++e) s.starts[e + 1] += s.starts[e];
  s.fill.assign(s.starts.begin(), s.starts.end() - 1);
  s.host_rows.resize(n * k);
  s.host_dest.resize(n * k);
  for (int64_t i = 0; i < n * k; ++i) {
    const int64_t at = s.fill[s.host_ids[i]]++;
    s.host_rows[at] = static_cast<int32_t>(i / k);
    s.host_dest[at] = static_cast<int32_t>(i);
  }
  const int32_t* rows = s.moe_rows.Upload(s.host_rows.data(), n * k);
  const int32_t* dest = s.moe_dest.Upload(s.host_dest.data(), n * k);
  const float* weights = s.moe_weights.Upload(s.host_weights.data(), n * k);

  float* routed = s.moe_out.Get<float>(n * k * dim);  // [n * k, dim]: output of slot (t, j)
  for (int64_t e = 0; e < ne; ++e) {
    const int64_t m = s.starts[e + 1] - s.starts[e];
    if (m == 0) continue;
    float* xe = s.moe_x.Get<float>(m * dim);
    float* ye = s.moe_y.Get<float>(m * dim);
    cuda::GatherRows(x.f32(), dim, rows + s.starts[e], m, dim, xe, dim, s.stream);
    s.SwiGlu(layer.gate[e], layer.up[e], layer.down[e], TensorView::F32(xe, m, dim, Device::kCuda), ye);
    cuda::ScatterRows(ye, dim, dest + s.starts[e], m, dim, routed, dim, s.stream);
  }
  if (layer.shared_gate.empty()) {
    cuda::FillRows(y.f32(), y.row_stride, n, dim, 0.0f, s.stream);
  } else {
    s.SwiGlu(layer.shared_gate, layer.shared_up, layer.shared_down, x, y.f32());
  }
  cuda::MoeCombine(routed, weights, n, k, dim, y.f32(), y.row_stride, s.stream);
}

}  // namespace pagoda
