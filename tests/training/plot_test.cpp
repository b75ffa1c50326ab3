#include "kiln/training/plot.h"

#include <gtest/gtest.h>

#include "kiln/core/error.h"
#include "kiln/io/atomic_file.h"
#include "toy_model.h"

namespace kiln::training {
namespace {

TEST(Plot, NiceTicks) {
  EXPECT_EQ(nice_ticks(0, 10, 5), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  auto t = nice_ticks(0.00012, 0.00098, 4);
  ASSERT_GE(t.size(), 3u);
  EXPECT_NEAR(t[1] - t[0], 2e-4, 1e-12);
  EXPECT_FALSE(nice_ticks(3, 3).empty());  // a flat series still gets an axis
}

TEST(Plot, WritesSvgFromJsonlAndTrainerState) {
  std::string dir = testing::fresh_dir("plot");
  std::string log;
  for (int s = 1; s <= 20; ++s) {
    io::Json e = {{"loss", 3.0 / s}, {"learning_rate", 1e-3 * (20 - s) / 20}, {"step", s}};
    log += e.dump() + "\n";
    if (s % 10 == 0) log += io::Json({{"eval_loss", 2.0 / s}, {"step", s}}).dump() + "\n";
  }
  testing::write_text(dir + "/train_log.jsonl", log);
  plot_training_log(dir + "/train_log.jsonl", dir + "/loss.svg");
  std::string svg = io::read_file(dir + "/loss.svg");
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_EQ(std::count(svg.begin(), svg.end(), '<') - 1,  // every element closed (minus <?xml)
            int(std::count(svg.begin(), svg.end(), '>') - 1));
  EXPECT_NE(svg.find("<polyline"), std::string::npos);
  EXPECT_NE(svg.find(">learning rate<"), std::string::npos);
  EXPECT_NE(svg.find(">step<"), std::string::npos);
  EXPECT_NE(svg.find(">eval loss<"), std::string::npos);

  io::Json history = io::Json::array();
  for (int i = 1; i <= 3; ++i) history.push_back({{"loss", 1.0 / i}, {"step", i}});
  io::Json state = {{"global_step", 3}, {"log_history", history}};
  testing::write_text(dir + "/trainer_state.json", state.dump());
  TrainingCurves c = read_training_curves(dir + "/trainer_state.json");
  EXPECT_EQ(c.loss.size(), 3u);
  EXPECT_TRUE(c.learning_rate.empty());
}

TEST(Plot, BadLogsAreErrors) {
  std::string dir = testing::fresh_dir("plot_bad");
  testing::write_text(dir + "/a.jsonl", "{\"loss\": 1, \"step\": 1}\nnot json\n");
  try {
    read_training_curves(dir + "/a.jsonl");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), dir + "/a.jsonl:2");
  }
  testing::write_text(dir + "/b.jsonl", "{\"train_runtime\": 1, \"step\": 1}\n");
  EXPECT_THROW(read_training_curves(dir + "/b.jsonl"), Error);
  EXPECT_THROW(read_training_curves(dir + "/missing.jsonl"), Error);
}

}  // namespace
}  // namespace kiln::training
