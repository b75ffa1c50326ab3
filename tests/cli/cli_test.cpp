// The `kiln` binary end to end on the tiny checkpoint: generate (ids, text, prompts file) against the
// golden greedy ids, perplexity against the golden log-probabilities (including padded last windows
// and chunked windows), warmup's planned set, bench's JSON fields, devices, and one-line errors for
// bad input.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include "tests/support.h"

namespace {

namespace fs = std::filesystem;

const std::string kKiln = std::string(KILN_BINARY_DIR) + "/tools/cli/kiln";
const std::string kTiny = std::string(KILN_SHARED_DIR) + "/testdata/models/tiny";

struct Result {
  int status = -1;
  std::string out, err;
  std::vector<std::string> out_lines() const {
    std::vector<std::string> lines;
    std::istringstream in(out);
    for (std::string l; std::getline(in, l);)
      if (!l.empty()) lines.push_back(l);
    return lines;
  }
  std::vector<std::string> err_lines() const {
    std::vector<std::string> lines;
    std::istringstream in(err);
    for (std::string l; std::getline(in, l);)
      if (!l.empty()) lines.push_back(l);
    return lines;
  }
};

// A fresh temporary folder per test, removed at the end.
class TempDir {
 public:
  TempDir() {
    std::string t = (fs::temp_directory_path() / "kiln_cli_XXXXXX").string();
    path_ = mkdtemp(t.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'')
      q.append("'\\''");
    else
      q.push_back(c);
  }
  q.push_back('\'');
  return q;
}

// Runs `kiln ARGS` with stdout captured through popen and stderr through a file.
Result kiln(const std::string& args) {
  TempDir tmp;
  const std::string err_file = tmp.path() + "/stderr";
  Result r;
  int st = -1;
  r.out = kiln::test_support::run_command(quote(kKiln) + " " + args + " 2>" + quote(err_file), &st);
  r.status = st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream e(err_file);
  std::stringstream ss;
  ss << e.rdbuf();
  r.err = ss.str();
  return r;
}

std::vector<nlohmann::json> prompt_rows() { return kiln::test_support::tiny_golden_rows("prompt"); }

std::string ids_arg(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s.push_back(',');
    s.append(std::to_string(ids[i]));
  }
  return s;
}

// The first n golden greedy ids, cut after an eos (kiln stops there; the golden rows pad on).
std::vector<int32_t> golden_prefix(const nlohmann::json& row, size_t n) {
  auto ids = row["greedy_new_ids"].get<std::vector<int32_t>>();
  ids.resize(std::min(n, ids.size()));
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] == 151645 || ids[i] == 151643) return {ids.begin(), ids.begin() + long(i) + 1};
  return ids;
}

// A failing command: non-zero status, nothing on stdout, one line on stderr containing `needle`.
void expect_one_line_error(const Result& r, const std::string& needle) {
  EXPECT_NE(r.status, 0);
  auto lines = r.err_lines();
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_NE(lines[0].find(needle), std::string::npos) << lines[0];
  EXPECT_EQ(lines[0].find("internal error"), std::string::npos) << lines[0];
}

TEST(CliGenerate, PromptIdsMatchGoldenGreedy) {
  for (const auto& row : prompt_rows()) {
    auto prompt = row["prompt_ids"].get<std::vector<int32_t>>();
    auto r = kiln("generate " + quote(kTiny) + " --prompt-ids " + ids_arg(prompt) +
                  " --json --dtype f32 --max-new-tokens 8");
    ASSERT_EQ(r.status, 0) << r.err;
    auto lines = r.out_lines();
    ASSERT_EQ(lines.size(), 1u) << r.out;
    auto j = nlohmann::json::parse(lines[0]);
    EXPECT_EQ(j["prompt_ids"].get<std::vector<int32_t>>(), prompt);
    EXPECT_EQ(j["output_ids"].get<std::vector<int32_t>>(), golden_prefix(row, 8))
        << "row " << row["index"];
    EXPECT_TRUE(j["text"].is_string());
    for (const char* k : {"prefill_tokens_per_s", "decode_tokens_per_s", "compiles", "peak_rss_bytes"})
      EXPECT_TRUE(j["stats"].contains(k)) << k;
  }
}

TEST(CliGenerate, TextPromptIsEncodedWithTheTokenizer) {
  const auto row = prompt_rows()[0];
  auto r = kiln("generate " + quote(kTiny) + " " + quote(row["text"].get<std::string>()) +
                " --json --dtype f32 --max-new-tokens 8");
  ASSERT_EQ(r.status, 0) << r.err;
  auto j = nlohmann::json::parse(r.out_lines().at(0));
  EXPECT_EQ(j["prompt_ids"], row["prompt_ids"]);
  EXPECT_EQ(j["output_ids"].get<std::vector<int32_t>>(), golden_prefix(row, 8));

  // Plain (streamed) output is the decoded text of those ids.
  auto plain = kiln("generate " + quote(kTiny) + " " + quote(row["text"].get<std::string>()) +
                    " --dtype f32 --max-new-tokens 8");
  ASSERT_EQ(plain.status, 0) << plain.err;
  EXPECT_EQ(plain.out, j["text"].get<std::string>() + "\n");
}

TEST(CliGenerate, PromptsFilePrintsOneObjectPerRowInOrder) {
  TempDir tmp;
  const auto rows = prompt_rows();
  const std::string file = tmp.path() + "/prompts.jsonl";
  {
    std::ofstream out(file);
    out << nlohmann::json{{"prompt_ids", rows[1]["prompt_ids"]}}.dump() << "\n";
    out << nlohmann::json{{"prompt", rows[0]["text"]}}.dump() << "\n\n";
    out << nlohmann::json{{"prompt_ids", rows[2]["prompt_ids"]}}.dump() << "\n";
  }
  auto r = kiln("generate " + quote(kTiny) + " --prompts-file " + quote(file) +
                " --json --dtype f32 --max-new-tokens 6");
  ASSERT_EQ(r.status, 0) << r.err;
  auto lines = r.out_lines();
  ASSERT_EQ(lines.size(), 3u) << r.out;
  const size_t order[] = {1, 0, 2};
  for (size_t i = 0; i < 3; ++i) {
    auto j = nlohmann::json::parse(lines[i]);
    EXPECT_EQ(j["prompt_ids"], rows[order[i]]["prompt_ids"]) << "line " << i;
    // Batched with left padding, each row equals its unbatched (golden) continuation.
    EXPECT_EQ(j["output_ids"].get<std::vector<int32_t>>(), golden_prefix(rows[order[i]], 6))
        << "line " << i;
  }
}

TEST(CliPerplexity, LogprobsMatchGoldenInF32) {
  for (const auto& row : prompt_rows()) {
    auto ids = row["prompt_ids"].get<std::vector<int32_t>>();
    auto golden = row["next_token_logprobs"].get<std::vector<double>>();
    auto r = kiln("perplexity " + quote(kTiny) + " --ids " + ids_arg(ids) +
                  " --logprobs --json --dtype f32");
    ASSERT_EQ(r.status, 0) << r.err;
    auto j = nlohmann::json::parse(r.out_lines().at(0));
    EXPECT_EQ(j["tokens_scored"], ids.size() - 1);
    EXPECT_EQ(j["windows"], 1);
    EXPECT_EQ(j["context"], ids.size());
    auto lp = j["logprobs"].get<std::vector<double>>();
    ASSERT_EQ(lp.size(), golden.size());
    double nll = 0;
    for (size_t i = 0; i < lp.size(); ++i) {
      EXPECT_NEAR(lp[i], golden[i], 1e-4) << "row " << row["index"] << " token " << i;
      nll -= golden[i];
    }
    nll /= double(golden.size());
    EXPECT_NEAR(j["mean_nll"].get<double>(), nll, 1e-4);
    EXPECT_NEAR(j["perplexity"].get<double>(), std::exp(j["mean_nll"].get<double>()),
                1e-9 * j["perplexity"].get<double>());
  }
}

TEST(CliPerplexity, TextFileEqualsItsIds) {
  TempDir tmp;
  const auto row = prompt_rows()[1];
  const std::string file = tmp.path() + "/text.txt";
  std::ofstream(file) << row["text"].get<std::string>();
  auto r = kiln("perplexity " + quote(kTiny) + " --text-file " + quote(file) +
                " --logprobs --json --dtype f32");
  ASSERT_EQ(r.status, 0) << r.err;
  auto j = nlohmann::json::parse(r.out_lines().at(0));
  auto lp = j["logprobs"].get<std::vector<double>>();
  auto golden = row["next_token_logprobs"].get<std::vector<double>>();
  ASSERT_EQ(lp.size(), golden.size());
  for (size_t i = 0; i < lp.size(); ++i) EXPECT_NEAR(lp[i], golden[i], 1e-4) << i;

  // Plain output carries the same numbers as lines.
  auto plain = kiln("perplexity " + quote(kTiny) + " --text-file " + quote(file) + " --dtype f32");
  ASSERT_EQ(plain.status, 0) << plain.err;
  EXPECT_NE(plain.out.find("tokens_scored: " + std::to_string(golden.size())), std::string::npos)
      << plain.out;
  EXPECT_NE(plain.out.find("perplexity: "), std::string::npos);
}

std::vector<double> logprobs_of(const std::vector<int32_t>& ids, const std::string& extra) {
  auto r = kiln("perplexity " + quote(kTiny) + " --ids " + ids_arg(ids) +
                " --logprobs --json --dtype f32 " + extra);
  EXPECT_EQ(r.status, 0) << r.err;
  if (r.status != 0) return {};
  return nlohmann::json::parse(r.out_lines().at(0))["logprobs"].get<std::vector<double>>();
}

// 30 tokens in windows of 12: [0, 12), [12, 24), [24, 30). The last window is padded on the right
// to 12 slots (one graph); each window must equal scoring its tokens alone, unpadded.
TEST(CliPerplexity, RightPaddedLastWindowEqualsUnpaddedScoring) {
  const auto row = prompt_rows()[1];
  auto ids = row["prompt_ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(ids.size(), 30u);
  auto r = kiln("perplexity " + quote(kTiny) + " --ids " + ids_arg(ids) +
                " --context 12 --logprobs --json --dtype f32");
  ASSERT_EQ(r.status, 0) << r.err;
  auto j = nlohmann::json::parse(r.out_lines().at(0));
  EXPECT_EQ(j["windows"], 3);
  EXPECT_EQ(j["context"], 12);
  EXPECT_EQ(j["tokens_scored"], 11 + 11 + 5);
  auto lp = j["logprobs"].get<std::vector<double>>();
  ASSERT_EQ(lp.size(), 27u);

  // Window 1 starts at position 0 like the golden row: its 11 log-probs are the golden ones.
  auto golden = row["next_token_logprobs"].get<std::vector<double>>();
  for (size_t i = 0; i < 11; ++i) EXPECT_NEAR(lp[i], golden[i], 1e-4) << i;
  // Windows 2 and 3 (the padded one) equal their tokens scored on their own.
  auto w2 = logprobs_of({ids.begin() + 12, ids.begin() + 24}, "");
  auto w3 = logprobs_of({ids.begin() + 24, ids.end()}, "");
  ASSERT_EQ(w2.size(), 11u);
  ASSERT_EQ(w3.size(), 5u);
  for (size_t i = 0; i < 11; ++i) EXPECT_NEAR(lp[11 + i], w2[i], 1e-5) << "window 2, " << i;
  for (size_t i = 0; i < 5; ++i) EXPECT_NEAR(lp[22 + i], w3[i], 1e-5) << "window 3, " << i;
  // A wrong answer would show: window 3 scored from a fresh context differs from the full prefix.
  EXPECT_GT(std::fabs(w3[0] - golden[24]), 1e-4);
}

// Chunked scoring (the cache carries earlier chunks) equals one call over the whole window, also
// when the window is not a multiple of the chunk.
TEST(CliPerplexity, ChunkedWindowsEqualOneCall) {
  const auto row = prompt_rows()[1];
  auto ids = row["prompt_ids"].get<std::vector<int32_t>>();
  auto golden = row["next_token_logprobs"].get<std::vector<double>>();
  for (const char* chunk : {"7", "1"}) {
    auto lp = logprobs_of(ids, std::string("--chunk ") + chunk);
    ASSERT_EQ(lp.size(), golden.size()) << chunk;
    for (size_t i = 0; i < lp.size(); ++i) EXPECT_NEAR(lp[i], golden[i], 1e-4) << chunk << " " << i;
  }
}

TEST(CliPerplexity, BadArguments) {
  expect_one_line_error(kiln("perplexity " + quote(kTiny) + " --ids 5"), "--ids");
  expect_one_line_error(kiln("perplexity " + quote(kTiny) + " --ids 1,2,3 --context 1"),
                        "--context");
  expect_one_line_error(kiln("perplexity " + quote(kTiny)), "--text-file");
  expect_one_line_error(kiln("perplexity " + quote(kTiny) + " --ids 1,999999999"), "--ids");
  expect_one_line_error(kiln("perplexity " + quote(kTiny) + " --text-file /nonexistent/file.txt"),
                        "/nonexistent/file.txt");
}

TEST(CliWarmup, CompilesExactlyThePlannedSet) {
  auto r = kiln("warmup " + quote(kTiny) + " --batch 2 --max-length 100 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  auto j = nlohmann::json::parse(r.out_lines().at(0));
  // Buckets 32 and 64 fit a cache of 100 with room for a new token; 128 does not.
  ASSERT_EQ(j["graphs"].size(), 3u) << j.dump();
  const std::vector<std::pair<std::string, int64_t>> want = {
      {"prefill", 32}, {"prefill", 64}, {"decode", 1}};
  double total = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const auto& g = j["graphs"][i];
    EXPECT_EQ(g["function"], want[i].first);
    EXPECT_EQ(g["seq"], want[i].second);
    EXPECT_EQ(g["batch"], 2);
    EXPECT_EQ(g["cache_len"], 100);
    EXPECT_GT(g["compile_ms"].get<double>(), 0.0);
    total += g["compile_ms"].get<double>();
  }
  EXPECT_NEAR(j["total_compile_ms"].get<double>(), total, 1e-6);
  EXPECT_EQ(j["compiles"]["prefill"]["compiles"], 2);
  EXPECT_EQ(j["compiles"]["decode"]["compiles"], 1);

  auto plain = kiln("warmup " + quote(kTiny) + " --max-length 40 --buckets 8,16,64");
  ASSERT_EQ(plain.status, 0) << plain.err;
  auto lines = plain.out_lines();
  ASSERT_GE(lines.size(), 5u) << plain.out;
  EXPECT_EQ(lines[1].rfind("prefill\t1\t8\t40\t", 0), 0u) << lines[1];
  EXPECT_EQ(lines[2].rfind("prefill\t1\t16\t40\t", 0), 0u) << lines[2];
  EXPECT_EQ(lines[3].rfind("decode\t1\t1\t40\t", 0), 0u) << lines[3];
  EXPECT_EQ(lines[4].rfind("total: 3 graphs", 0), 0u) << lines[4];

  expect_one_line_error(kiln("warmup " + quote(kTiny) + " --max-length 20"), "--max-length");
  expect_one_line_error(kiln("warmup " + quote(kTiny) + " --max-length 64 --buckets 8,x"),
                        "--buckets");
  expect_one_line_error(kiln("warmup " + quote(kTiny) + " --batch 0"), "--batch");
}

TEST(CliBench, TinyRunPrintsEveryField) {
  auto r = kiln("bench " + quote(kTiny) +
                " --batch 1 --prompt-tokens 4 --new-tokens 2 --repeats 1 --dtype f32 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  auto j = nlohmann::json::parse(r.out_lines().at(0));
  for (const char* k :
       {"batch", "prompt_tokens", "new_tokens", "dtype", "prefill_tokens_per_s",
        "prefill_roofline_fraction", "decode_tokens_per_s", "decode_roofline_fraction",
        "memory_bandwidth_gbs", "gemm_peak_gflops", "machine_peak_gflops",
        "prefill_machine_peak_fraction", "decode_bytes_per_token",
        "prefill_flops_per_token", "compile_ms", "peak_rss_bytes", "weight_bytes",
        "kv_cache_bytes"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["dtype"], "f32");
  EXPECT_EQ(j["prompt_tokens"], 4);
  EXPECT_GT(j["prefill_tokens_per_s"].get<double>(), 0);
  EXPECT_GT(j["decode_tokens_per_s"].get<double>(), 0);
  EXPECT_GT(j["memory_bandwidth_gbs"].get<double>(), 0);
  // The decode roofline is paired with each timed repeat (one here).
  ASSERT_EQ(j["memory_bandwidth_gbs_per_repeat"].size(), 1u);
  ASSERT_EQ(j["decode_roofline_fraction_per_repeat"].size(), 1u);
  EXPECT_EQ(j["memory_bandwidth_gbs"], j["memory_bandwidth_gbs_per_repeat"][0]);
  EXPECT_EQ(j["decode_roofline_fraction"], j["decode_roofline_fraction_per_repeat"][0]);
  // The yardstick reads as many bytes as a step (256 MiB to 2 GiB); the 256 MiB reading is beside
  // it.
  const double step_bytes = j["decode_bytes_per_token"].get<double>();  // batch 1
  EXPECT_GE(j["memory_bandwidth_read_bytes"].get<double>(), std::max(step_bytes, 256.0 * (1 << 20)));
  ASSERT_EQ(j["memory_bandwidth_256mib_gbs_per_repeat"].size(), 1u);
  const double step_s = j["decode_step_ms_median"].get<double>() * 1e-3;
  EXPECT_NEAR(j["decode_roofline_fraction"].get<double>(),
              step_bytes / (step_s * j["memory_bandwidth_gbs"].get<double>() * 1e9), 1e-9);
  EXPECT_NEAR(j["decode_roofline_fraction_256mib"].get<double>(),
              step_bytes /
                  (step_s * j["memory_bandwidth_256mib_gbs_per_repeat"][0].get<double>() * 1e9),
              1e-9);
  // So are the prefill rooflines: the peaks measured right before the repeat.
  for (const char* k : {"prefill_ms_per_repeat", "prefill_roofline_fraction_per_repeat",
                        "gemm_peak_gflops_per_repeat", "machine_peak_gflops_per_repeat",
                        "prefill_machine_peak_fraction_per_repeat"})
    ASSERT_EQ(j[k].size(), 1u) << k;
  EXPECT_EQ(j["gemm_peak_gflops"], j["gemm_peak_gflops_per_repeat"][0]);
  EXPECT_EQ(j["prefill_roofline_fraction"], j["prefill_roofline_fraction_per_repeat"][0]);
  EXPECT_EQ(j["prefill_machine_peak_fraction"], j["prefill_machine_peak_fraction_per_repeat"][0]);
  EXPECT_NEAR(j["prefill_roofline_fraction"].get<double>(),
              j["prefill_flops_per_token"].get<double>() * 4 /
                  (j["prefill_ms_per_repeat"][0].get<double>() * 1e-3) /
                  (j["gemm_peak_gflops"].get<double>() * 1e9),
              1e-9);
  EXPECT_GT(j["gemm_peak_gflops_before"].get<double>(), 0);
  EXPECT_GT(j["gemm_peak_gflops"].get<double>(), 0);
  // The latency probes, also taken before each repeat (measure_load_latency's own test compares
  // them).
  ASSERT_EQ(j["cache_latency_ns_per_repeat"].size(), 1u);
  ASSERT_EQ(j["memory_latency_ns_per_repeat"].size(), 1u);
  EXPECT_EQ(j["cache_latency_ns"], j["cache_latency_ns_per_repeat"][0]);
  EXPECT_EQ(j["cache_latency_probe_bytes"], 4 << 20);
  EXPECT_GT(j["cache_latency_ns"].get<double>(), 0);
  EXPECT_GT(j["memory_latency_ns"].get<double>(), 0);
#if defined(__x86_64__)
  // Measured wherever the CPU has AVX2 + FMA (0 where it has neither that nor AVX-512).
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    EXPECT_GT(j["machine_peak_gflops"].get<double>(), 0);
    EXPECT_GT(j["prefill_machine_peak_fraction"].get<double>(), 0);
  }
#endif
  EXPECT_GT(j["compile_ms"]["prefill"].get<double>(), 0);
  EXPECT_GT(j["compile_ms"]["decode"].get<double>(), 0);
  // tiny: 151936 x 64 tied embeddings + 2 small layers, in f32.
  EXPECT_GT(j["weight_bytes"].get<double>(), 151936.0 * 64 * 4);
  // KV cache: 2 layers x k,v x 1 x 6 slots x 2 heads x 16 x 4 bytes.
  EXPECT_EQ(j["kv_cache_bytes"], 2 * 2 * 6 * 2 * 16 * 4);
  expect_one_line_error(kiln("bench " + quote(kTiny) + " --new-tokens 0"), "--new-tokens");
}

TEST(CliDevices, JsonListsCpu) {
  auto r = kiln("devices --json");
  ASSERT_EQ(r.status, 0) << r.err;
  auto j = nlohmann::json::parse(r.out_lines().at(0));
  bool cpu = false;
  for (const auto& d : j["devices"]) cpu = cpu || d["device"] == "cpu";
  EXPECT_TRUE(cpu) << j.dump();
  EXPECT_TRUE(j.contains("cuda_available"));
}

TEST(CliErrors, BadInputIsOneLineNamingTheCulprit) {
  const std::string gen = "generate " + quote(kTiny) + " ";
  expect_one_line_error(kiln(gen + "--prompt-ids 1,x"), "--prompt-ids");
  expect_one_line_error(kiln(gen + "--prompt-ids 1,2 --max-new-tokens 0"), "max_new_tokens");
  expect_one_line_error(kiln(gen + "--prompt-ids 1,2 --max-new-tokens -3"), "max_new_tokens");
  expect_one_line_error(kiln(gen + "--prompt-ids 1,999999999"), "input_ids");
  expect_one_line_error(kiln(gen + "--prompt-ids 1,2 --dtype f64"), "--dtype");

  // Devices: cuda is not in this build (the message lists what is), neuron is not supported.
  auto cuda = kiln(gen + "--prompt-ids 1,2 --device cuda");
  expect_one_line_error(cuda, "cuda");
  EXPECT_NE(cuda.err.find("cpu"), std::string::npos) << cuda.err;
  auto neuron = kiln(gen + "--prompt-ids 1,2 --device neuron");
  expect_one_line_error(neuron, "neuron");
  EXPECT_NE(neuron.err.find("not supported"), std::string::npos) << neuron.err;
}

TEST(CliErrors, BrokenModelFoldersNameTheFile) {
  TempDir tmp;
  // No config.json.
  const std::string empty = tmp.path() + "/empty";
  fs::create_directory(empty);
  expect_one_line_error(kiln("generate " + quote(empty) + " --prompt-ids 1,2"), "config.json");
  expect_one_line_error(kiln("perplexity " + quote(empty) + " --ids 1,2"), "config.json");

  // model.safetensors cut in half.
  const std::string cut = tmp.path() + "/truncated";
  fs::create_directory(cut);
  fs::copy_file(kTiny + "/config.json", cut + "/config.json");
  {
    std::ifstream in(kTiny + "/model.safetensors", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_GT(bytes.size(), 1000u);
    std::ofstream(cut + "/model.safetensors", std::ios::binary)
        .write(bytes.data(), std::streamsize(bytes.size() / 2));
  }
  expect_one_line_error(kiln("generate " + quote(cut) + " --prompt-ids 1,2"), "model.safetensors");

  // No folder at all.
  expect_one_line_error(kiln("generate " + quote(tmp.path() + "/missing") + " --prompt-ids 1,2"),
                        "missing");
}

}  // namespace
