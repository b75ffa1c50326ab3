#include "kiln/training/causal_lm_model.h"

#include <filesystem>

#include "kiln/backends/cpu/cpu_backend.h"
#include "kiln/core/error.h"
#include "kiln/graph/autodiff.h"
#include "kiln/io/atomic_file.h"
#include "kiln/io/safetensors.h"
#include "kiln/models/causal_lm.h"
#include "kiln/models/decoder.h"

namespace kiln::training {

namespace {

constexpr int32_t kIgnore = -100;
const std::string kGradPrefix = "grad:";

class Constants final : public graph::WeightStore {
 public:
  Tensor get(const std::string& name) const override {
    auto it = tensors.find(name);
    if (it == tensors.end()) throw InternalError("training graph asked for weight " + name);
    return it->second;
  }
  std::map<std::string, Tensor> tensors;
};

}  // namespace

CausalLMTrainable::~CausalLMTrainable() = default;

std::shared_ptr<CausalLMTrainable> CausalLMTrainable::from_pretrained(
    const std::string& dir, const TrainableOptions& options) {
  // Load through the inference model in f32 to reuse its checks (names, shapes, dtypes).
  auto lm = models::CausalLM::from_pretrained(dir, {.dtype = DType::f32, .device_map = "cpu",
                                                    .disable_compile = true});
  auto m = std::shared_ptr<CausalLMTrainable>(new CausalLMTrainable());
  m->dir_ = dir;
  m->config_ = lm->config();
  m->options_ = options;
  // Parameters in the order the training graph binds them, tied weights once.
  auto g = models::build_decoder_graph(m->config_, DType::f32, "eval", 1, 1, 1);
  auto constants = std::make_unique<Constants>();
  for (const auto& node : g.nodes) {
    if (node.op == graph::Op::Weight) constants->tensors[node.name] = lm->weight(node.name);
  }
  for (graph::Value s : g.states) {
    const std::string& name = g.node(s).name;
    m->params_.push_back({name, lm->weight(name).clone()});
  }
  m->constants_ = std::move(constants);
  return m;
}

nlohmann::json CausalLMTrainable::compile_stats() const {
  return cache_.stats_json();
}

LossSum CausalLMTrainable::forward_backward(const TrainBatch& batch, float loss_scale,
                                            std::vector<Tensor>& grads) {
  if (grads.size() != params_.size())
    throw InternalError("forward_backward: one gradient tensor per parameter expected");
  return run("train", batch, loss_scale, &grads);
}

LossSum CausalLMTrainable::evaluate(const TrainBatch& batch) { return run("eval", batch, 1.0f, nullptr); }

LossSum CausalLMTrainable::run(const std::string& function, const TrainBatch& batch,
                               float loss_scale, std::vector<Tensor>* grads) {
  const int64_t B = batch.batch_size(), T = batch.seq_len();
  for (const Tensor* t : {&batch.input_ids, &batch.attention_mask, &batch.labels})
    if (t->shape() != Shape{B, T} || t->dtype() != DType::i32)
      throw Error("batch", "input_ids, attention_mask and labels must be i32 [B, T]");
  if (T > config_.max_position_embeddings)
    throw Error("max_length", "sequence length " + std::to_string(T) +
                                  " exceeds max_position_embeddings " +
                                  std::to_string(config_.max_position_embeddings));
  // Causal shift on the host: position t predicts labels[t + 1].
  Tensor targets = Tensor::empty({B, T}, DType::i32);
  Tensor positions = Tensor::empty({B, T}, DType::i32);
  LossSum out;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const int32_t id = batch.input_ids.data<int32_t>()[b * T + t];
      if (id < 0 || id >= config_.vocab_size)
        throw Error("input_ids", "token id " + std::to_string(id) + " is outside the vocabulary");
      const int32_t next = t + 1 < T ? batch.labels.data<int32_t>()[b * T + t + 1] : kIgnore;
      if (next != kIgnore && (next < 0 || next >= config_.vocab_size))
        throw Error("labels", "label " + std::to_string(next) + " is outside the vocabulary");
      targets.data<int32_t>()[b * T + t] = next;
      positions.data<int32_t>()[b * T + t] = int32_t(t);
      out.num_tokens += next != kIgnore;
    }
  }
  const DType act = options_.bf16 ? DType::bf16 : DType::f32;
  auto build = [&] {
    graph::Graph g = models::build_decoder_graph(config_, act, function, B, T, T);
    if (function == "train") {
      graph::GraphBuilder b(std::move(g));
      std::map<graph::Value, graph::Value> grad_states;
      const graph::Graph& fwd = b.graph();
      std::vector<graph::Value> weights = fwd.states;
      const graph::Value loss = fwd.outputs.at(0);
      for (graph::Value s : weights) {
        const auto& n = b.node(s);
        grad_states[s] = b.state(kGradPrefix + n.name, n.shape, DType::f32);
      }
      g = graph::append_backward(b.finish(), loss, grad_states);
    }
    return g;
  };
  auto& backend = cpu::cpu_backend();
  std::shared_ptr<graph::Executable> exe;
  graph::CompileKey key{.function = function,
                        .shapes = {{"input_ids", {B, T}}},
                        .dtype = std::string(dtype_name(act)),
                        .device = "cpu"};
  if (options_.compile) {
    exe = cache_.get_or_compile(key, [&] {
      return graph::Executable::compile(build(), backend, *constants_, {});
    });
  } else {
    auto& e = eager_[key.str()];
    if (!e) e = graph::Executable::eager(build(), backend, *constants_);
    exe = e;
  }
  // Bind states by name: f32 master weights (the graph casts them for bf16), then gradient
  // accumulators.
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < params_.size(); ++i) index[params_[i].name] = i;
  std::vector<Tensor> states;
  for (graph::Value s : exe->graph().states) {
    std::string name = exe->graph().node(s).name;
    if (name.rfind(kGradPrefix, 0) == 0) {
      states.push_back((*grads)[index.at(name.substr(kGradPrefix.size()))]);
    } else {
      states.push_back(params_[index.at(name)].value);
    }
  }
  double loss_sum = 0;
  exe->run({batch.input_ids, positions, batch.attention_mask, targets}, states,
           {.loss_scale = loss_scale, .loss_sum = &loss_sum});
  out.loss_sum = loss_sum;
  return out;
}

void CausalLMTrainable::save_pretrained(const std::string& dir) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  // The f32 master weights, so a resumed run continues exactly (a bf16 save would round them).
  const DType saved = DType::f32;
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& p : params_)
    tensors.emplace_back(p.name, saved == DType::f32 ? p.value : p.value.to(saved));
  io::save_safetensors(dir + "/model.safetensors", tensors);
  io::write_file_atomic(dir + "/config.json", config_.to_json(saved).dump(2) + "\n");
  const std::string gen = dir_ + "/generation_config.json";
  if (fs::exists(gen) && fs::absolute(gen) != fs::absolute(dir + "/generation_config.json"))
    io::write_file_atomic(dir + "/generation_config.json", io::read_file(gen));
}

}  // namespace kiln::training
