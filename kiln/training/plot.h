// Training curves as a standalone SVG: `kiln plot LOG --out loss.svg`.
//
// Reads a train_log.jsonl (one log entry per line, as the Trainer writes it) or a trainer_state.json
// (its log_history) and draws two panels sharing the step axis: the training loss (line) with the
// eval loss (dots) above, the learning rate below, each with labelled axes and ticks. The SVG is
// written atomically. A log without any loss or learning-rate entry is a kiln::Error naming the file.
//
// Example:
//   kiln::training::plot_training_log("out/train_log.jsonl", "loss.svg");
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kiln/io/json.h"

namespace kiln::training {

struct TrainingCurves {
  std::vector<std::pair<double, double>> loss;           // (step, loss)
  std::vector<std::pair<double, double>> eval_loss;      // (step, eval_loss)
  std::vector<std::pair<double, double>> learning_rate;  // (step, learning_rate)
};

// Collects the curves from log entries ({loss|eval_loss|learning_rate, step}).
TrainingCurves curves_from_log_history(const io::Json& entries);
// Reads train_log.jsonl or trainer_state.json (chosen by content: a JSON object with
// log_history, else JSON lines). Errors name the file (and line).
TrainingCurves read_training_curves(const std::string& path);
// The SVG document.
std::string render_training_svg(const TrainingCurves& curves, const std::string& title);
// read_training_curves + render_training_svg + atomic write.
void plot_training_log(const std::string& log_path, const std::string& svg_path);

// "Nice" axis ticks (1, 2 or 5 times a power of ten) covering [lo, hi]; for tests.
std::vector<double> nice_ticks(double lo, double hi, int target_count = 5);

}  // namespace kiln::training
