// `kiln train` end to end on the golden batch: the losses and gradient norms Transformers' Trainer
// logs (../shared/testdata/models/tiny.golden.jsonl, row train/f32) come out of trainer_state.json,
// one train graph is compiled, and the final model folder loads back. On a terminal (a pty from
// util-linux's `script`) the progress line is redrawn in place.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "kiln/models/causal_lm.h"
#include "tests/support.h"

namespace {

namespace fs = std::filesystem;

std::string run(const std::string& cmd, int* status) {
  return kiln::test_support::run_command(cmd + " 2>&1", status);
}

TEST(TrainCli, GoldenBatchThroughKilnTrain) {
  nlohmann::json row;
  for (const auto& j : kiln::test_support::tiny_golden_rows("train"))
    if (j["mode"] == "f32") row = j;
  ASSERT_FALSE(row.is_null());
  const fs::path dir = fs::temp_directory_path() / ("kiln_train_cli_" + std::to_string(getpid()));
  fs::create_directories(dir);
  {
    std::ofstream data(dir / "train.jsonl");
    for (const auto& t : row["texts"]) data << nlohmann::json{{"text", t}}.dump() << "\n";
  }
  const std::string out_dir = (dir / "out").string();
  int status = 0;
  std::string log = run(std::string(KILN_BINARY_DIR) + "/tools/cli/kiln train --model " +
                            KILN_SHARED_DIR + "/testdata/models/tiny --data " +
                            (dir / "train.jsonl").string() + " --output-dir " + out_dir +
                            " --max-length 32 --per-device-train-batch-size 4 --learning-rate 1e-3"
                            " --max-steps 3 --logging-steps 1 --save-steps 3 --weight-decay 0",
                        &status);
  ASSERT_EQ(status, 0) << log;
  auto state = nlohmann::json::parse(std::ifstream(out_dir + "/checkpoint-3/trainer_state.json"));
  const auto& history = state["log_history"];
  for (int i = 0; i < 3; ++i) {
    const auto& want = row["steps"][size_t(i)];
    const auto& got = history[size_t(i)];
    EXPECT_NEAR(got["loss"].get<double>(), want["loss"].get<double>(),
                1e-4 * want["loss"].get<double>());
    EXPECT_NEAR(got["grad_norm"].get<double>(), want["grad_norm"].get<double>(),
                1e-4 * want["grad_norm"].get<double>());
    EXPECT_NEAR(got["learning_rate"].get<double>(), want["lr"].get<double>(), 1e-12);
  }
  // One train graph compiled for the whole run (the final line of the log carries the counters).
  const auto final_line = nlohmann::json::parse(log.substr(log.rfind("{\"compile_stats\"")));
  EXPECT_EQ(final_line["compile_stats"]["train"]["compiles"], 1) << log;
  // The final model loads in kiln and holds the trained weights.
  auto m = kiln::AutoModelForCausalLM::from_pretrained(out_dir, {.dtype = kiln::DType::f32});
  double sum = 0;
  for (float v : m->weight("model.embed_tokens.weight").to_f32_vector()) sum += v;
  EXPECT_NEAR(sum, row["param_stats_after_step3"]["model.embed_tokens.weight"]["sum"].get<double>(),
              1e-3);
  fs::remove_all(dir);
}

TEST(TrainCli, ProgressLineOnATerminal) {
  int status = 0;
  run("command -v script", &status);
  if (status != 0) GTEST_SKIP() << "util-linux's script is not installed";
  const fs::path dir = fs::temp_directory_path() / ("kiln_train_tty_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "train.txt") << "In the beginning God created the heaven and the earth.\n"
                                      "And the earth was without form, and void.\n";
  const std::string train = std::string(KILN_BINARY_DIR) + "/tools/cli/kiln train --model " +
                            KILN_SHARED_DIR + "/testdata/models/tiny --data " +
                            (dir / "train.txt").string() + " --output-dir " +
                            (dir / "out").string() +
                            " --max-length 16 --per-device-train-batch-size 1 --max-steps 4"
                            " --logging-steps 2 --save-strategy no";
  // script -e returns the command's status; the typescript file holds what the terminal showed.
  const std::string typescript = (dir / "typescript").string();
  run("script -qec '" + train + "' " + typescript, &status);
  ASSERT_EQ(status, 0);
  std::ifstream in(typescript);
  const std::string screen((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Redrawn in place (carriage return + erase line), with step, percent, tokens/s and ETA.
  EXPECT_NE(screen.find("\r\x1b[K1/4 [ 25%] loss "), std::string::npos) << screen;
  EXPECT_NE(screen.find("\r\x1b[K4/4 [100%] loss "), std::string::npos) << screen;
  EXPECT_NE(screen.find(" tok/s  ETA "), std::string::npos) << screen;
  // Without a terminal the same run prints no progress line, only the JSON log lines.
  const std::string plain = run(train, &status);
  ASSERT_EQ(status, 0) << plain;
  EXPECT_EQ(plain.find("\x1b[K"), std::string::npos) << plain;
  EXPECT_NE(plain.find("\"loss\":"), std::string::npos) << plain;
  fs::remove_all(dir);
}

// The Trainer's resume test uses a toy model; this one runs the real decoder through `kiln train`:
// a run resumed from its step-2 checkpoint logs what the uninterrupted run logs for steps 3 and 4.
TEST(TrainCli, ResumeEqualsUninterruptedOnTheTinyModel) {
  const fs::path dir =
      fs::temp_directory_path() / ("kiln_train_resume_" + std::to_string(getpid()));
  fs::create_directories(dir);
  {
    std::ofstream data(dir / "train.txt");
    for (int i = 0; i < 8; ++i)
      data << "Line " << i << " of a small text: and God saw that it was good, verse " << i * 7
           << ".\n";
  }
  const std::string base = std::string(KILN_BINARY_DIR) + "/tools/cli/kiln train --model " +
                           KILN_SHARED_DIR + "/testdata/models/tiny --data " +
                           (dir / "train.txt").string() +
                           " --max-length 16 --per-device-train-batch-size 2 --max-steps 4"
                           " --logging-steps 1 --save-steps 2 --learning-rate 1e-3"
                           " --lr-scheduler-type cosine --warmup-steps 1 --disable-tqdm";
  int status = 0;
  const std::string full_log = run(base + " --output-dir " + (dir / "full").string(), &status);
  ASSERT_EQ(status, 0) << full_log;
  const std::string resumed_log =
      run(base + " --output-dir " + (dir / "resumed").string() + " --resume-from-checkpoint " +
              (dir / "full" / "checkpoint-2").string(),
          &status);
  ASSERT_EQ(status, 0) << resumed_log;
  // It did resume: the second run trained (and logged) steps 3 and 4 only.
  EXPECT_EQ(resumed_log.find("\"step\":1}"), std::string::npos) << resumed_log;
  EXPECT_NE(resumed_log.find("\"step\":3}"), std::string::npos) << resumed_log;
  auto history = [&](const std::string& run_dir) {
    auto state = nlohmann::json::parse(std::ifstream(dir / run_dir / "checkpoint-4" /
                                                     "trainer_state.json"));
    std::vector<std::pair<double, double>> steps;  // (loss, grad_norm) of the step entries
    for (const auto& e : state["log_history"])
      if (e.contains("loss"))
        steps.emplace_back(e["loss"].get<double>(), e["grad_norm"].get<double>());
    return steps;
  };
  const auto full = history("full"), resumed = history("resumed");
  ASSERT_EQ(full.size(), 4u);
  ASSERT_EQ(resumed.size(), 4u);  // steps 1-2 come from the checkpoint's log history
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(resumed[i].first, full[i].first, 1e-6 * full[i].first) << "loss of step " << i + 1;
    EXPECT_NEAR(resumed[i].second, full[i].second, 1e-6 * full[i].second)
        << "grad_norm of step " << i + 1;
  }
  fs::remove_all(dir);
}

}  // namespace
