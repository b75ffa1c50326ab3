// `kiln plot LOG --out loss.svg`: draws the loss and learning-rate curves of a training run.
#include <iostream>

#include "kiln/training/plot.h"
#include "tools/cli/command.h"

KILN_COMMAND(plot, "Plot loss and learning rate from train_log.jsonl or trainer_state.json") {
  struct Options {
    std::string log;
    std::string out = "loss.svg";
  };
  auto opt = std::make_shared<Options>();
  cmd.add_option("LOG", opt->log, "train_log.jsonl or trainer_state.json")->required();
  cmd.add_option("--out,-o", opt->out, "SVG file to write (default loss.svg)");
  return [opt] {
    kiln::training::plot_training_log(opt->log, opt->out);
    std::cout << "wrote " << opt->out << "\n";
    return 0;
  };
}
