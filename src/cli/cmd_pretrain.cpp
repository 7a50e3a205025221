// `hybridlm pretrain --model-config CONFIG.json --data CORPUS --out DIR --tokens N [--seq-len n --batch B
// --micro-batch b --lr LR --seed S ...] [--resume CKPT|RUN]`: cross-entropy training of a model created from scratch
// (train/trainer.h). The options come from the one TrainConfig table (train/trainer_options.h); the resolved settings
// are printed and saved as DIR/config.json.
#include <memory>

#include "cli/subcommands.h"
#include "cli/train_device_cli.h"
#include "train/trainer_options.h"

namespace hlm {

void add_pretrain_command(CLI::App& app, std::function<int()>& action) {
  auto config = std::make_shared<TrainConfig>(train_config_defaults(TrainJob::Pretrain));
  CLI::App* cmd = app.add_subcommand("pretrain", "Train a model from scratch with next-token cross-entropy");
  cmd->footer(train_command_footer() +
              "Examples:\n"
              "  hybridlm pretrain --model-config tiny_qwen3.json --data corpus/ --tokenizer bytes --out runs/teacher \\\n"
              "      --tokens 2000000 --seq-len 256 --batch 16 --micro-batch 4 --lr 3e-3 --eval-every 200000\n"
              "  hybridlm pretrain --resume runs/teacher --out runs/teacher      # continue after a stop or crash\n"
              "  hybridlm pretrain --model-config tiny_qwen3.json --data corpus/ --out runs/t --tokens 2000000 \\\n"
              "      --device cuda                                                # steps on GPU 0 (CUDA builds)\n"
              "  hybridlm pretrain --model-config tiny_qwen3.json --data corpus/ --out runs/t --tokens 20000000 \\\n"
              "      --passes 4                                 # a small corpus read up to 4 times, reshuffled each pass");
  for (const TrainOption& o : train_options()) {
    if (!(o.jobs & kTrainJobPretrain)) continue;
    std::visit([&](auto member) { cmd->add_option(o.option, (*config).*member, o.help)->capture_default_str(); },
               o.field);
  }
  cmd->callback([config, cmd, &action] {
    std::vector<std::string> given;
    for (const TrainOption& o : train_options())
      if ((o.jobs & kTrainJobPretrain) && cmd->count(o.option) > 0) given.push_back(o.key);
    action = [config, given] {
      const TrainConfig resolved = train_config_resolve(TrainJob::Pretrain, *config, given);
      const std::unique_ptr<TrainDevice> device = train_device_for(resolved);
      return train_command_run(resolved, device.get());
    };
  });
}

}  // namespace hlm
