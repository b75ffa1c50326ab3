#include "kiln/generation/generation_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "kiln/core/error.h"
#include "kiln/models/config.h"

namespace kiln::generation {

namespace {

// Fields Transformers writes that cannot change which tokens come out of a single-sequence,
// non-beam generate(): bookkeeping, output formatting, cache and compile settings, beam-only knobs
// (inert while num_beams is 1, which is enforced below), encoder-decoder and assisted-decoding
// settings. `renormalize_logits` is a log-softmax after the warpers, which leaves both the argmax
// and the sampling distribution unchanged.
const std::set<std::string> kIgnored = {
    "transformers_version", "_from_model_config", "_commit_hash", "_original_object_hash",
    "use_cache", "cache_implementation", "cache_config", "compile_config", "return_dict_in_generate",
    "output_scores", "output_logits", "output_attentions", "output_hidden_states",
    "early_stopping", "length_penalty", "low_memory", "decoder_start_token_id",
    "is_assistant", "num_assistant_tokens", "num_assistant_tokens_schedule",
    "assistant_confidence_threshold", "assistant_lookbehind", "target_lookbehind",
    "prompt_lookup_num_tokens", "max_matching_ngram_size", "renormalize_logits",
    "generation_kwargs", "trust_remote_code"};

// Fields that would change generation and that kiln does not implement: accepted only with the
// value (or null) at which Transformers leaves generation unchanged.
const std::map<std::string, io::Json> kNeutral = {
    {"num_beams", 1},
    {"num_beam_groups", 1},
    {"num_return_sequences", 1},
    {"diversity_penalty", 0.0},
    {"penalty_alpha", nullptr},
    {"typical_p", 1.0},
    {"epsilon_cutoff", 0.0},
    {"eta_cutoff", 0.0},
    {"no_repeat_ngram_size", 0},
    {"encoder_no_repeat_ngram_size", 0},
    {"encoder_repetition_penalty", 1.0},
    {"min_length", 0},
    {"min_new_tokens", nullptr},
    {"bad_words_ids", nullptr},
    {"force_words_ids", nullptr},
    {"constraints", nullptr},
    {"forced_bos_token_id", nullptr},
    {"forced_eos_token_id", nullptr},
    {"forced_decoder_ids", nullptr},
    {"suppress_tokens", nullptr},
    {"begin_suppress_tokens", nullptr},
    {"sequence_bias", nullptr},
    {"exponential_decay_length_penalty", nullptr},
    {"remove_invalid_values", false},
    {"guidance_scale", nullptr},
    {"watermarking_config", nullptr},
    {"dola_layers", nullptr},
    {"token_healing", false},
    {"max_time", nullptr},
    {"top_h", nullptr},
};

bool is_neutral(const io::Json& value, const io::Json& neutral) {
  if (value.is_null()) return true;
  if (neutral.is_null()) return false;
  if (value.is_number() && neutral.is_number()) return value.get<double>() == neutral.get<double>();
  return value == neutral;
}

std::vector<int64_t> id_list(const io::Json& j, const std::string& field, const std::string& where) {
  std::vector<int64_t> out;
  if (!j.contains(field) || j[field].is_null()) return out;
  const auto& v = j[field];
  const std::string w = where + ": " + field;
  if (v.is_number_integer()) {
    out.push_back(v.get<int64_t>());
  } else if (v.is_array()) {
    for (const auto& x : v) {
      if (!x.is_number_integer()) throw Error(w, "expected integer token ids, got " + x.dump());
      out.push_back(x.get<int64_t>());
    }
  } else {
    throw Error(w, "expected a token id or a list of token ids, got " + v.dump());
  }
  return out;
}

std::optional<int64_t> opt_int(const io::Json& j, const std::string& field, const std::string& where) {
  if (!j.contains(field) || j[field].is_null()) return std::nullopt;
  return io::get_int(j, field, where);
}

std::string fmt(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

GenerationConfig GenerationConfig::from_json(const io::Json& j, const std::string& where) {
  if (!j.is_object()) throw Error(where, "expected a JSON object");
  static const std::set<std::string> kRead = {
      "max_new_tokens", "max_length", "do_sample", "temperature", "top_k", "top_p", "min_p",
      "repetition_penalty", "seed", "eos_token_id", "pad_token_id", "bos_token_id",
      "stop_strings", "disable_compile"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    if (kRead.count(key) || kIgnored.count(key)) continue;
    auto neutral = kNeutral.find(key);
    if (neutral != kNeutral.end()) {
      if (!is_neutral(it.value(), neutral->second))
        throw Error(where + ": " + key,
                    "kiln does not implement this generation setting (value " + it.value().dump() +
                        "; only " + neutral->second.dump() + " or null is accepted)");
      continue;
    }
    throw Error(where + ": " + key,
                "unknown generation field (kiln refuses settings it cannot honour rather than "
                "ignore them)");
  }

  GenerationConfig c;
  if (auto v = opt_int(j, "max_new_tokens", where)) c.max_new_tokens = *v;
  c.max_length = opt_int(j, "max_length", where);
  c.do_sample = io::get_bool_or(j, "do_sample", false, where);
  // null means "not set": Transformers then skips the warper, which equals its neutral value.
  c.temperature = io::get_double_or(j, "temperature", 1.0, where);
  c.top_k = io::get_int_or(j, "top_k", j.contains("top_k") ? 0 : 50, where);
  c.top_p = io::get_double_or(j, "top_p", 1.0, where);
  if (j.contains("min_p") && !j["min_p"].is_null()) c.min_p = io::get_double(j, "min_p", where);
  c.repetition_penalty = io::get_double_or(j, "repetition_penalty", 1.0, where);
  if (auto s = opt_int(j, "seed", where)) {
    if (*s < 0) throw Error(where + ": seed", "must be non-negative, got " + std::to_string(*s));
    c.seed = static_cast<uint64_t>(*s);
  }
  c.eos_token_id = id_list(j, "eos_token_id", where);
  c.pad_token_id = opt_int(j, "pad_token_id", where);
  c.bos_token_id = opt_int(j, "bos_token_id", where);
  if (j.contains("stop_strings") && !j["stop_strings"].is_null()) {
    const auto& s = j["stop_strings"];
    const std::string w = where + ": stop_strings";
    if (s.is_string()) {
      c.stop_strings.push_back(s.get<std::string>());
    } else if (s.is_array()) {
      for (const auto& x : s) {
        if (!x.is_string()) throw Error(w, "expected strings, got " + x.dump());
        c.stop_strings.push_back(x.get<std::string>());
      }
    } else {
      throw Error(w, "expected a string or a list of strings, got " + s.dump());
    }
  }
  c.disable_compile = io::get_bool_or(j, "disable_compile", false, where);
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(where + ": " + e.where(), std::string(e.what()).substr(e.where().size() + 3));
  }
  return c;
}

GenerationConfig GenerationConfig::from_model_config(const models::ModelConfig& model_config) {
  GenerationConfig c;
  c.bos_token_id = model_config.bos_token_id;
  c.eos_token_id = model_config.eos_token_ids;
  c.pad_token_id = model_config.pad_token_id;
  return c;
}

GenerationConfig GenerationConfig::from_pretrained(const std::string& dir,
                                                   const models::ModelConfig& model_config) {
  const std::string path = dir + "/generation_config.json";
  if (!std::filesystem::exists(path)) return from_model_config(model_config);
  return from_json(io::load_json(path), path);
}

io::Json GenerationConfig::to_json() const {
  io::Json j = io::Json::object();
  if (bos_token_id) j["bos_token_id"] = *bos_token_id;
  if (eos_token_id.size() == 1) j["eos_token_id"] = eos_token_id[0];
  if (eos_token_id.size() > 1) j["eos_token_id"] = eos_token_id;
  if (pad_token_id) j["pad_token_id"] = *pad_token_id;
  j["do_sample"] = do_sample;
  const GenerationConfig d;
  if (max_new_tokens != d.max_new_tokens) j["max_new_tokens"] = max_new_tokens;
  if (max_length) j["max_length"] = *max_length;
  if (temperature != d.temperature) j["temperature"] = temperature;
  if (top_k != d.top_k) j["top_k"] = top_k;
  if (top_p != d.top_p) j["top_p"] = top_p;
  if (min_p) j["min_p"] = *min_p;
  if (repetition_penalty != d.repetition_penalty) j["repetition_penalty"] = repetition_penalty;
  if (seed) j["seed"] = *seed;
  if (!stop_strings.empty()) j["stop_strings"] = stop_strings;
  if (disable_compile) j["disable_compile"] = true;
  return j;
}

void GenerationConfig::validate() const {
  if (max_new_tokens <= 0)
    throw Error("max_new_tokens", "must be positive, got " + std::to_string(max_new_tokens));
  if (max_length && *max_length <= 0)
    throw Error("max_length", "must be positive, got " + std::to_string(*max_length));
  if (!std::isfinite(temperature) || (do_sample && temperature <= 0))
    throw Error("temperature",
                "must be a positive number when sampling, got " + fmt(temperature) +
                    " (for greedy decoding leave do_sample false)");
  if (top_k < 0) throw Error("top_k", "must be >= 0 (0 disables), got " + std::to_string(top_k));
  if (!(top_p > 0 && top_p <= 1))
    throw Error("top_p", "must be in (0, 1] (1 disables), got " + fmt(top_p));
  if (min_p && !(*min_p >= 0 && *min_p <= 1))
    throw Error("min_p", "must be in [0, 1], got " + fmt(*min_p));
  if (!(repetition_penalty > 0) || !std::isfinite(repetition_penalty))
    throw Error("repetition_penalty",
                "must be a positive number (1 disables), got " + fmt(repetition_penalty));
  for (int64_t id : eos_token_id)
    if (id < 0) throw Error("eos_token_id", "token ids must be >= 0, got " + std::to_string(id));
  if (pad_token_id && *pad_token_id < 0)
    throw Error("pad_token_id", "must be >= 0, got " + std::to_string(*pad_token_id));
  if (bos_token_id && *bos_token_id < 0)
    throw Error("bos_token_id", "must be >= 0, got " + std::to_string(*bos_token_id));
  for (const auto& s : stop_strings)
    if (s.empty()) throw Error("stop_strings", "an empty stop string would stop at once");
}

int64_t GenerationConfig::max_new_tokens_for(int64_t prompt_length) const {
  if (!max_length) return max_new_tokens;
  if (prompt_length >= *max_length)
    throw Error("max_length", "the prompt has " + std::to_string(prompt_length) +
                                  " tokens, which already reaches max_length " +
                                  std::to_string(*max_length) +
                                  " (raise max_length or set it unset and use max_new_tokens)");
  return std::min(max_new_tokens, *max_length - prompt_length);
}

std::optional<int64_t> GenerationConfig::effective_pad_token_id() const {
  if (pad_token_id) return pad_token_id;
  if (!eos_token_id.empty()) return eos_token_id[0];
  return std::nullopt;
}

bool GenerationConfig::is_eos(int64_t id) const {
  return std::find(eos_token_id.begin(), eos_token_id.end(), id) != eos_token_id.end();
}

}  // namespace kiln::generation
