#include "engine/engine.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "core/logging.h"

namespace pagoda {

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kNone: return "";
  }
  return "";
}

DType KVStorageDType(KVCacheDType t) {
  switch (t) {
    case KVCacheDType::kF32: return DType::kF32;
    case KVCacheDType::kBF16: return DType::kBF16;
    case KVCacheDType::kF16: return DType::kF16;
    default: return DType::kBF16;  // quantized: skipped layers and the side pool
  }
}

namespace {
// The config with only the decode batch sizes a step can reach, ascending.
EngineConfig WithReachableDecodeSizes(EngineConfig c) {
  std::vector<int64_t>& sizes = c.decode_batch_sizes;
  const int64_t cap = std::min(c.scheduler.max_num_seqs, c.scheduler.max_num_batched_tokens);
  std::erase_if(sizes, [&](int64_t b) { return b < 1 || b > cap; });
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  return c;
}

KVCacheManagerConfig ManagerConfig(const EngineConfig& c) {
  KVCacheManagerConfig m;
  m.num_blocks = static_cast<int32_t>(c.kv.num_blocks);
  m.block_size = static_cast<int32_t>(c.kv.block_size);
  m.enable_prefix_caching = c.enable_prefix_caching;
  m.hash_algo = c.prefix_hash_algo;
  return m;
}
}  // namespace

Engine::Engine(Model& model, const Tokenizer* tokenizer, const EngineConfig& config)
    : model_(model),
      tokenizer_(tokenizer),
      config_(WithReachableDecodeSizes(config)),
      kv_(ManagerConfig(config)),
      // Padded decode steps write and read one block past the manager's.
      cache_(model.backend().CreateKVCache(ApplyKVCacheFormat(
          model.KVShapeFor(config.kv.num_blocks + (config_.decode_batch_sizes.empty() ? 0 : 1), config.kv.block_size,
                           KVStorageDType(config.kv.dtype)),
          config.kv.dtype, config.kv_quant, model.spec().kv_shape().mla))),
      scheduler_(config.scheduler, kv_),
      runner_(model, *cache_, kv_, config_.decode_batch_sizes,
              config_.decode_batch_sizes.empty() ? -1 : static_cast<int32_t>(config.kv.num_blocks)) {
  // The workspace for the largest step the scheduler can make: steps never allocate it.
  model.ReserveWorkspace(config.scheduler.max_num_batched_tokens, config.scheduler.max_num_seqs);
  WarmUpDecodeGraphs();
  eos_ids_ = model.eos_ids();
  if (tokenizer_ != nullptr) {
    for (int32_t id : tokenizer_->eos_ids()) eos_ids_.push_back(id);
  }
}

void Engine::WarmUpDecodeGraphs() {
  const std::vector<int64_t>& sizes = config_.decode_batch_sizes;
  const int64_t max_len = config_.scheduler.max_model_len;
  if (sizes.empty() || model_.backend().DecodeGraphContexts(max_len, *cache_).empty()) return;
  const auto start = std::chrono::steady_clock::now();
  // First the widest step (the largest batch, a row at the longest context: the block table is
  // as wide as the widest row), eagerly: the step's input buffers reach their largest before
  // any graph is captured reading them.
  runner_.RunPaddingStep(sizes.back(), max_len);
  int64_t steps = 1;
  for (int64_t batch : sizes) {
    // Asked again for each size: a backend may find after a step that this model's decode
    // steps cannot be graphs (MoE routing waits on the host).
    const std::vector<int64_t> contexts = model_.backend().DecodeGraphContexts(max_len, *cache_);
    if (contexts.empty()) break;
    for (int64_t context : contexts) {
      for (int rep = 0; rep < 2; ++rep, ++steps) runner_.RunPaddingStep(batch, context);  // eager, then captured
    }
  }
  PAGODA_LOG(kInfo) << "decode graphs: " << sizes.size() << " batch sizes (" << sizes.front() << " to "
                    << sizes.back() << ") warmed up in " << steps << " steps, "
                    << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() << " s";
}

int64_t Engine::AddRequest(RequestSpec spec) {
  const int64_t len = static_cast<int64_t>(spec.prompt.size());
  const int64_t max_len = config_.scheduler.max_model_len;
  PAGODA_ENSURE(len > 0, ErrorCode::kInvalidArgument, "the prompt is empty");
  for (int32_t id : spec.prompt) {
    PAGODA_ENSURE(id >= 0 && id < model_.spec().vocab_size, ErrorCode::kInvalidArgument,
                  "prompt token id " << id << " is outside the vocabulary (size " << model_.spec().vocab_size << ")");
  }
  PAGODA_ENSURE(spec.max_tokens >= 1, ErrorCode::kInvalidArgument,
                "max_tokens must be at least 1 (got " << spec.max_tokens << ")");
  PAGODA_ENSURE(len + spec.max_tokens <= max_len, ErrorCode::kInvalidArgument,
                "this model's maximum context length is " << max_len << " tokens, but " << len + spec.max_tokens
                    << " were requested (" << len << " in the prompt, " << spec.max_tokens
                    << " for the completion)");
  PAGODA_ENSURE(spec.n >= 1 && spec.n <= 128, ErrorCode::kInvalidArgument, "n must be in [1, 128] (got " << spec.n << ")");
  PAGODA_ENSURE(spec.min_tokens >= 0 && spec.min_tokens <= spec.max_tokens, ErrorCode::kInvalidArgument,
                "min_tokens must be in [0, max_tokens] (got " << spec.min_tokens << ")");
  PAGODA_ENSURE(spec.prompt_logprobs <= 20, ErrorCode::kInvalidArgument,
                "prompt_logprobs must be at most 20 (got " << spec.prompt_logprobs << ")");
  spec.sampling.Validate();
  if (spec.prompt_logprobs >= 0) spec.want_prompt_logits = true;
  if (spec.want_prompt_logits && spec.prompt_logprobs < 0) spec.prompt_logprobs = 0;

  auto r = std::make_unique<Request>();
  r->id = next_id_;
  r->group_id = next_id_;
  next_id_ += spec.n;  // ids of the other samples, created when the prompt is computed
  r->tokens = spec.prompt;
  r->num_prompt_tokens = len;
  r->sampler = model_.backend().CreateSampler(spec.sampling);
  if (tokenizer_ != nullptr) {
    r->stop_checker =
        std::make_unique<StopChecker>(*tokenizer_, spec.stop, spec.prompt, spec.skip_special_tokens);
  }
  if (spec.want_prompt_logits) r->prompt_logprobs.resize(static_cast<size_t>(len - 1));
  r->arrival_time = Clock::now();
  r->spec = std::move(spec);
  const int64_t id = r->id;
  prompt_tokens_ += len;
  scheduler_.AddWaiting(r.get());
  requests_.emplace(id, std::move(r));
  return id;
}

void Engine::Abort(int64_t request_id) {
  for (auto it = requests_.begin(); it != requests_.end();) {
    Request& r = *it->second;
    if (r.id == request_id || r.group_id == request_id) {
      scheduler_.Remove(&r);
      it = requests_.erase(it);
    } else {
      ++it;
    }
  }
}

void Engine::Finish(Request& r, FinishReason reason, RequestOutput& out) {
  r.status = RequestStatus::kFinished;
  r.finish_reason = reason;
  scheduler_.Remove(&r);
  out.finished = true;
  out.finish_reason = reason;
}

void Engine::AppendToken(Request& r, int32_t id, const TokenLogprobs* lp, RequestOutput& out) {
  const bool past_min = r.num_output_tokens() >= r.spec.min_tokens;
  const bool is_eos = !r.spec.ignore_eos && std::find(eos_ids_.begin(), eos_ids_.end(), id) != eos_ids_.end();
  const bool is_stop_id = std::find(r.spec.stop_token_ids.begin(), r.spec.stop_token_ids.end(), id) !=
                          r.spec.stop_token_ids.end();
  r.tokens.push_back(id);
  ++generation_tokens_;
  if (!r.has_first_token) {
    r.has_first_token = true;
    r.first_token_time = Clock::now();
  }
  out.new_token_ids.push_back(id);
  if (lp != nullptr) {
    r.logprobs.push_back(*lp);
    out.new_logprobs.push_back(*lp);
  }
  if (past_min && (is_eos || is_stop_id)) {
    // The stop token is an output token, as in vLLM: in the ids, the logprobs (an echo
    // client reads the logprob of the last position from it) and the counts; not in the text.
    if (r.stop_checker) out.new_text += r.stop_checker->Flush();
    Finish(r, FinishReason::kStop, out);
    return;
  }
  if (r.stop_checker) {
    const bool check = r.num_output_tokens() > r.spec.min_tokens;
    StopChecker::Result s = r.stop_checker->Add(id, check);
    out.new_text += s.text;
    if (s.stopped) {
      Finish(r, FinishReason::kStop, out);
      return;
    }
  }
  if (r.num_output_tokens() >= r.spec.max_tokens || r.num_tokens() >= config_.scheduler.max_model_len) {
    if (r.stop_checker) out.new_text += r.stop_checker->Flush();
    Finish(r, FinishReason::kLength, out);
  }
}

void Engine::ForkSamples(Request& parent, const TensorView& row, std::vector<RequestOutput>* outs) {
  parent.forked = true;
  for (int64_t i = 1; i < parent.spec.n; ++i) {
    auto child = std::make_unique<Request>();
    child->id = parent.id + i;
    child->group_id = parent.id;
    child->sample_index = i;
    child->spec = parent.spec;
    child->tokens = parent.tokens;
    child->num_prompt_tokens = parent.num_prompt_tokens;
    child->num_computed_tokens = parent.num_computed_tokens;
    child->num_cached_tokens = parent.num_cached_tokens;
    child->forked = true;
    SamplingParams sp = parent.spec.sampling;
    if (sp.seed) sp.seed = *sp.seed + static_cast<uint64_t>(i);
    child->sampler = model_.backend().CreateSampler(sp);
    if (tokenizer_ != nullptr) {
      child->stop_checker = std::make_unique<StopChecker>(
          *tokenizer_, child->spec.stop, child->spec.prompt, child->spec.skip_special_tokens);
    }
    child->prompt_logprobs = parent.prompt_logprobs;
    child->arrival_time = parent.arrival_time;
    kv_.Fork(parent.id, child->id);
    scheduler_.AddRunning(child.get());
    Request* c = child.get();
    requests_.emplace(c->id, std::move(child));
    PostProcess(*c, row, outs);
  }
}

SampleRow Engine::RowFor(Request& r, TokenLogprobs* logprobs) const {
  SampleRow sample;
  sample.state = r.sampler.get();
  sample.prompt = std::span<const int32_t>(r.tokens.data(), r.num_prompt_tokens);
  sample.output = std::span<const int32_t>(r.tokens.data() + r.num_prompt_tokens, r.num_output_tokens());
  sample.logprobs = logprobs;
  return sample;
}

void Engine::PostProcess(Request& r, const TensorView& row, std::vector<RequestOutput>* outs) {
  if (r.spec.n > 1 && !r.forked) ForkSamples(r, row, outs);
  TokenLogprobs lp;
  const bool want_lp = r.spec.sampling.logprobs >= 0;
  SampleRow sample = RowFor(r, want_lp ? &lp : nullptr);
  // Host rows are changed by the sampler (penalties): it works on a copy; the other children
  // of a fork read the same row.
  std::vector<float> copy;
  TensorView sampled = row;
  if (row.device == Device::kCpu) {
    copy.assign(row.f32(), row.f32() + row.cols);
    sampled = TensorView::F32(copy.data(), 1, row.cols);
  }
  model_.backend().Sample(sampled, std::span<SampleRow>(&sample, 1));
  Emit(r, sample.token, want_lp ? &lp : nullptr, outs);
}

void Engine::SampleStep(ModelRunner::StepResult& step, std::vector<RequestOutput>* outs) {
  const size_t n = step.sampled.size();
  if (n == 0) return;
  const TensorView logits = step.Logits(model_.spec().vocab_size);
  std::vector<std::vector<RequestOutput>> children(n);
  std::vector<TokenLogprobs> lps(n);
  std::vector<SampleRow> rows(n);
  for (size_t i = 0; i < n; ++i) {
    Request& r = *step.sampled[i];
    if (r.spec.n > 1 && !r.forked) ForkSamples(r, logits.RowRange(static_cast<int64_t>(i), 1), &children[i]);
    rows[i] = RowFor(r, r.spec.sampling.logprobs >= 0 ? &lps[i] : nullptr);
  }
  model_.backend().Sample(logits, rows);
  for (size_t i = 0; i < n; ++i) {
    for (RequestOutput& c : children[i]) outs->push_back(std::move(c));
    Emit(*step.sampled[i], rows[i].token, rows[i].logprobs, outs);
  }
}

void Engine::Emit(Request& r, int32_t id, const TokenLogprobs* lp, std::vector<RequestOutput>* outs) {
  RequestOutput out;
  out.request_id = r.id;
  if (r.spec.want_prompt_logits && !r.prompt_logprobs_sent) {
    out.prompt_logprobs = std::move(r.prompt_logprobs);
    r.prompt_logprobs.clear();
    r.prompt_logprobs_sent = true;
  }
  AppendToken(r, id, lp, out);
  out.num_prompt_tokens = r.num_prompt_tokens;
  out.num_output_tokens = r.num_output_tokens();
  out.num_cached_tokens = r.num_cached_tokens;
  outs->push_back(std::move(out));
}

// The prompt rows of this step (a prefill may take several steps: chunks). A request that
// was preempted after its first output computes its prompt again; those rows are dropped.
void Engine::StorePromptLogprobs(const ModelRunner::StepResult& step) {
  const int64_t vocab = model_.spec().vocab_size;
  const float* row = step.prompt_logits.data();
  for (const ModelRunner::StepResult::PromptRows& pr : step.prompt_rows) {
    Request& r = *pr.request;
    for (int64_t i = 0; i < pr.count; ++i, row += vocab) {
      const int64_t p = pr.first_position + i;
      if (r.prompt_logprobs_sent || p + 1 >= r.num_prompt_tokens) continue;
      model_.backend().Logprobs(TensorView::F32(row, 1, vocab), std::span<const int32_t>(&r.tokens[p + 1], 1),
                                r.spec.prompt_logprobs, std::span<TokenLogprobs>(&r.prompt_logprobs[p], 1));
    }
  }
}

std::vector<RequestOutput> Engine::Step() {
  std::vector<RequestOutput> outs;
  SchedulerOutput sched = scheduler_.Schedule();
  // Blocks freed since the last step (finished, aborted, preempted requests) drop their side
  // copies before new owners write them.
  const std::vector<int32_t> released = kv_.TakeReleasedBlocks();
  if (!released.empty()) cache_->ReleaseBlocks(released);
  if (sched.scheduled.empty()) return outs;
  ++steps_;
  ModelRunner::StepResult step = runner_.Execute(sched);
  for (const ScheduledRequest& s : sched.scheduled) s.request->num_computed_tokens += s.num_tokens;
  StorePromptLogprobs(step);
  SampleStep(step, &outs);
  for (auto it = requests_.begin(); it != requests_.end();) {
    it = it->second->finished() ? requests_.erase(it) : std::next(it);
  }
  return outs;
}

EngineStats Engine::Stats() const {
  EngineStats s;
  s.num_running = scheduler_.num_running();
  s.num_waiting = scheduler_.num_waiting();
  s.num_preemptions = scheduler_.num_preemptions();
  s.prompt_tokens = prompt_tokens_;
  s.generation_tokens = generation_tokens_;
  s.kv_usage = kv_.Usage();
  s.prefix_cache = kv_.prefix_cache_stats();
  s.steps = steps_;
  return s;
}

}  // namespace pagoda
