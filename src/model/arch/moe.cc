#include "model/arch/moe.h"

namespace pagoda {

MoeLayer PrepareMoeLayer(Backend& backend, const MoeWeights& w, WeightLayout layout) {
  MoeLayer m;
  m.router = backend.PrepareWeight(w.router, layout);
  if (!w.score_bias.empty()) m.score_bias = backend.PrepareVector(w.score_bias);
  for (const SwiGluWeights& e : w.experts) {
    m.gate.push_back(backend.PrepareWeight(e.gate, layout));
    m.up.push_back(backend.PrepareWeight(e.up, layout));
    m.down.push_back(backend.PrepareWeight(e.down, layout));
  }
  if (!w.shared.empty()) {
    m.shared_gate = backend.PrepareWeight(w.shared.gate, layout);
    m.shared_up = backend.PrepareWeight(w.shared.up, layout);
    m.shared_down = backend.PrepareWeight(w.shared.down, layout);
  }
  backend.PrepareMoe(&m);
  return m;
}

}  // namespace pagoda
