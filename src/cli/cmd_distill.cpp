// `hybridlm distill --teacher DIR --student DIR --data CORPUS --out DIR --tokens N [--seq-len n --batch B
// --micro-batch b --lr-rec LR --lr-rest LR --tau T --eval-every TOKENS --checkpoint-every STEPS ...]
// [--resume CKPT|RUN]`: forward-KL distillation of a converted hybrid student from a frozen teacher (the seed's
// Algorithm 1, lines 18-27; defaults from Table C.3). The options come from the one TrainConfig table
// (train/trainer_options.h); the resolved settings are printed and saved as DIR/config.json.
#include <memory>

#include "cli/subcommands.h"
#include "cli/train_device_cli.h"
#include "train/trainer_options.h"

namespace hlm {

void add_distill_command(CLI::App& app, std::function<int()>& action) {
  auto config = std::make_shared<TrainConfig>(train_config_defaults(TrainJob::Distill));
  CLI::App* cmd = app.add_subcommand(
      "distill", "Distill a hybrid student from a frozen teacher with forward KL (seed Algorithm 1)");
  cmd->footer(train_command_footer() +
              "Defaults follow the seed's Table C.3 (B x n = 96 x 1024, micro-batch 2, lr 7e-5 / 2e-5, 3% warmup\n"
              "from x1e-3, cosine to 1e-5, AdamW (0.9, 0.999) eps 1e-8 wd 0.01, clip 1, tau 1, validation every 10M\n"
              "tokens).\n"
              "Examples:\n"
              "  hybridlm convert --teacher runs/teacher/model --placement reverse_periodic --out students/rp\n"
              "  hybridlm distill --teacher runs/teacher/model --student students/rp --data corpus/ --tokenizer bytes \\\n"
              "      --tokens 2000000 --seq-len 256 --batch 16 --micro-batch 4 --lr-rec 1e-3 --lr-rest 3e-4 --out runs/rp\n"
              "  hybridlm distill --resume runs/rp --out runs/rp                  # continue after a stop or crash\n"
              "  hybridlm distill --resume runs/rp --out runs/rp --device cuda    # continue on GPU 0 (CUDA builds)");
  for (const TrainOption& o : train_options()) {
    if (!(o.jobs & kTrainJobDistill)) continue;
    std::visit([&](auto member) { cmd->add_option(o.option, (*config).*member, o.help)->capture_default_str(); },
               o.field);
  }
  cmd->callback([config, cmd, &action] {
    std::vector<std::string> given;
    for (const TrainOption& o : train_options())
      if ((o.jobs & kTrainJobDistill) && cmd->count(o.option) > 0) given.push_back(o.key);
    action = [config, given] {
      const TrainConfig resolved = train_config_resolve(TrainJob::Distill, *config, given);
      const std::unique_ptr<TrainDevice> device = train_device_for(resolved);
      return train_command_run(resolved, device.get());
    };
  });
}

}  // namespace hlm
