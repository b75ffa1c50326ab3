#include "kiln/training/trainable_model.h"

#include <cstring>

#include "kiln/core/error.h"
#include "kiln/io/safetensors.h"

namespace kiln::training {

int64_t count_label_tokens(const TrainBatch& batch) {
  const Tensor& labels = batch.labels;
  KILN_CHECK(labels.dtype() == DType::i32 && labels.ndim() == 2, "labels must be i32 [B, L]");
  const int32_t* l = labels.data<int32_t>();
  int64_t b = labels.dim(0), n = labels.dim(1), count = 0;
  for (int64_t i = 0; i < b; ++i)
    for (int64_t t = 1; t < n; ++t) count += l[i * n + t] != -100;
  return count;
}

std::vector<Tensor> zeros_like(const std::vector<Parameter>& params) {
  std::vector<Tensor> out;
  out.reserve(params.size());
  for (const auto& p : params) out.push_back(Tensor::zeros(p.value.shape(), DType::f32));
  return out;
}

void TrainableModel::load_parameters(const std::string& dir) {
  io::CheckpointReader reader(dir);
  // Check every tensor before touching any, so a bad folder never leaves a half-loaded model.
  auto& params = parameters();
  for (const auto& p : params) {
    if (!reader.contains(p.name))
      throw Error(dir, "checkpoint has no tensor '" + p.name + "'");
    const auto& info = reader.info(p.name);
    if (info.shape != p.value.shape())
      throw Error(dir + ": " + p.name, "shape " + shape_str(info.shape) + " in the checkpoint, " +
                                           shape_str(p.value.shape()) + " in the model");
    if (info.dtype_str != "F32" && info.dtype_str != "BF16" && info.dtype_str != "F16")
      throw Error(dir + ": " + p.name, "dtype " + info.dtype_str + " is not a float type");
  }
  for (auto& p : params) {
    Tensor t = reader.tensor(p.name);
    if (t.dtype() == DType::f32) {
      std::memcpy(p.value.raw(), t.raw(), p.value.nbytes());
    } else {
      convert(t.raw(), t.dtype(), p.value.raw(), DType::f32, p.value.numel());
    }
  }
}

}  // namespace kiln::training
