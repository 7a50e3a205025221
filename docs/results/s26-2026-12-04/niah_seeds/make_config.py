#!/usr/bin/env python3
"""Session 26 ([niah] #21 item 4): the config of ONE seed of the several-seeds call on configs/niah/experiment-gpu-keys-lr1e-3.json.

Session 23 found that the onset of retrieval (the answer CE leaving its ~0.44 plateau) is a sharp transition whose
timing depends on the schedule and the seed more than on the architecture (docs/results.md, session 23), so one run
per architecture cannot measure a deficit. This call trains several seeds per architecture, each seed in its own
experiment folder with its own config (the experiment's config format has no description key, unknown keys are input
errors, so the derivation lives here and in run.sh's header). What changes against the base:
  seed           --seed N sets train.init_seed (the model's initialisation) and train.data_seed (the order of the
                 training rows) to N; train_data.seed (the examples themselves) stays the base's, so every seed trains
                 on the same examples in another order from another initialisation
  architectures  --archs (run.sh: full_attention, standard_periodic, reverse_periodic; the first must be
                 full_attention, the baseline of the experiment's deficits)
  stage tokens   --steps0 / --steps1 steps of batch_rows x seq_len tokens (16 x 2048 = 32,768 per step); defaults
                 1,024 + 256 = 1,280 steps = 41.9M tokens per run (the base: 4,096 + 1,024), the 4:1 ratio kept.
                 Sizing: session 23 ran four processes side by side on one H200 at 193-314k tokens/s each,
                 ~0.9-1.0M tokens/s in all; 9 runs x 41.9M = 377M tokens ~ 380-420 s (run.sh's README)
  checkpoints    every --checkpoint-every steps (default 128): a run cut by the deadline is evaluated at its newest
                 checkpoint, at most 127 steps old
  evaluation     --eval-lengths (default 64,256,1k,4k: two trained lengths, two untrained; the base also has 2k and
                 8k); n 8, the four tasks, the 10 languages and everything else are the base's
  device         --device / --precision (train.precision and eval.precision): cuda + bf16 as the base
Everything else (10 languages, bytes, the 8-layer hidden-256 model, packed rows, value_digits_min 2, the 2-key single
+ multikey stage of 16/32-token haystacks, then all four tasks at 16-256, answer loss, lr 1e-3 -> 1e-4 per stage,
n 8, prefill chunks of 8192) is the base's.

--tiny (the CPU check only): the compiled-in tiny model (4 layers, hidden 64, 4/2 heads of 16), batch_rows --rows,
log every step, no validation between the start and the end, the given --langs / --eval-n; seq_len and the stages'
haystack lengths unchanged.

usage: make_config.py OUT_JSON --seed N [--base configs/niah/experiment-gpu-keys-lr1e-3.json] [--steps0 1024
       --steps1 256] [--checkpoint-every 128] [--device cuda --precision bf16]
       [--archs full_attention,standard_periodic,reverse_periodic] [--eval-lengths 64,256,1k,4k]
       [--tiny --rows 2 --langs eng_Latn,rus_Cyrl --eval-n 2]
Prints one line: the seed, the tokens and steps per stage, the evaluation.
"""
import argparse, json

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--seed", type=int, required=True, help="train.init_seed and train.data_seed")
p.add_argument("--base", default="configs/niah/experiment-gpu-keys-lr1e-3.json")
p.add_argument("--steps0", type=int, default=1024)
p.add_argument("--steps1", type=int, default=256)
p.add_argument("--checkpoint-every", type=int, default=128)
p.add_argument("--device", default="cuda")
p.add_argument("--precision", default="bf16")
p.add_argument("--archs", default="full_attention,standard_periodic,reverse_periodic")
p.add_argument("--eval-lengths", default="64,256,1k,4k")
p.add_argument("--tiny", action="store_true")
p.add_argument("--rows", type=int, default=0, help="batch_rows (0: the base's)")
p.add_argument("--langs", default="", help="(empty: the base's)")
p.add_argument("--eval-n", type=int, default=0, help="(0: the base's)")
a = p.parse_args()

c = json.load(open(a.base))
c["architectures"] = a.archs.split(",")
c["device"] = a.device
t = c["train"]
t["init_seed"] = t["data_seed"] = a.seed
if a.rows:
    t["batch_rows"] = t["micro_batch_rows"] = a.rows
step_tokens = t["batch_rows"] * t["seq_len"]
stages = c["train_data"]["stages"]
assert len(stages) == 2, "the keys config has two stages"
stages[0]["tokens"] = a.steps0 * step_tokens
stages[1]["tokens"] = a.steps1 * step_tokens
t["checkpoint_every_steps"] = a.checkpoint_every
t["precision"] = a.precision
c["eval"]["precision"] = a.precision
c["eval"]["lengths"] = [int(x) if x.isdigit() else x for x in a.eval_lengths.split(",")]
if a.tiny:
    c["model"] = {"hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 4, "num_attention_heads": 4,
                  "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
                  "tie_word_embeddings": True, "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}}
    t["log_every_steps"] = 1
    t["eval_every_tokens"] = 0
if a.langs:
    c["langs"] = a.langs.split(",")
if a.eval_n:
    c["eval"]["n"] = a.eval_n
with open(a.out, "w") as f:
    json.dump(c, f, indent=2)
    f.write("\n")
print(f"config {a.out}: seed {a.seed} (init, data order), stage 1 {a.steps0} steps ({stages[0]['tokens']:,} tokens), "
      f"stage 2 {a.steps1} steps ({stages[1]['tokens']:,} tokens), {step_tokens:,} tokens per step, checkpoint every "
      f"{a.checkpoint_every}, {c['device']} {a.precision}, {len(c['langs'])} languages, eval lengths "
      f"{c['eval']['lengths']} n {c['eval']['n']}")
