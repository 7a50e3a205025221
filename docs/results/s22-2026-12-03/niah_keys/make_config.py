#!/usr/bin/env python3
"""Session 22 ([niah] #21 item 4): the config of ONE device call of configs/niah/experiment-gpu-keys.json.

The experiment's config format has no description key (unknown keys are input errors), so the derivation and its
sizing live here and in run.sh's header. What changes against configs/niah/experiment-gpu-keys.json:
  architectures  full_attention, standard_periodic (the seed's question: the hybrid against full attention)
  stage tokens   --steps0 / --steps1 steps of batch_rows x seq_len tokens (16 x 2048 = 32,768 per step); defaults
                 3,584 + 896 = 4,480 steps = 146.8M tokens per architecture, 87.5 % of the original 4,096 + 1,024
                 (134.2M + 33.5M), the 4:1 ratio of the two stages kept. Sizing (measured rates, docs/niah.md):
                 session 18 trained this model (8 layers, hidden 256, bf16, packed 16 x 2048 rows, 16/32-token
                 haystacks first) as two processes side by side on one H200 at a median 607.5k tokens/s (full
                 attention) and 415.8k (standard periodic); 83.9M tokens took 143.8 s and 181.9 s of training.
                 So 146.8M tokens: full attention ~242 s; standard periodic ~318 s at session 18's pattern (shared,
                 then alone), ~353 s at 415.8k throughout, ~414 s at session 14's 355k (8-row batches); plus ~10 s
                 of start-up and data and ~10 s of per-stage overhead. run.sh's training deadline is 430 s of a
                 525-s budget: the 95 s after it are for evaluation (16 s full attention, 6.5 s standard periodic in
                 session 18), its continuation or a checkpoint's evaluation, the reports and the tarball.
  checkpoints    every --checkpoint-every steps (default 256, was 512): a run cut by the deadline is evaluated at
                 its newest checkpoint, at most 255 steps old
  device         --device / --precision (train.precision and eval.precision): cuda + bf16 as the original
Everything else (10 languages, bytes, the model, packed rows, value_digits_min 2, the 2-key single + multikey stage
of 16/32-token haystacks, then all four tasks at 16-256, answer loss, lr 2e-3 -> 2e-4 per stage, the evaluation at
64 / 256 / 1k / 2k tokens, n 8, bf16, prefill chunks of 8192) is the original's.

--tiny (the CPU check only): the compiled-in tiny model (4 layers, hidden 64, 4/2 heads of 16; RRRA), batch_rows
--rows, log every step, the given --langs / --eval-lengths / --eval-n; seq_len and the stages' lengths unchanged.

usage: make_config.py OUT_JSON [--base configs/niah/experiment-gpu-keys.json] [--steps0 3584 --steps1 896]
       [--checkpoint-every 256] [--device cuda --precision bf16] [--archs full_attention,standard_periodic]
       [--tiny --rows 2 --langs eng_Latn,rus_Cyrl --eval-lengths 64,256 --eval-n 2]
Prints one line: the tokens and steps per stage.
"""
import argparse, json

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--base", default="configs/niah/experiment-gpu-keys.json")
p.add_argument("--steps0", type=int, default=3584)
p.add_argument("--steps1", type=int, default=896)
p.add_argument("--checkpoint-every", type=int, default=256)
p.add_argument("--device", default="cuda")
p.add_argument("--precision", default="bf16")
p.add_argument("--archs", default="full_attention,standard_periodic")
p.add_argument("--tiny", action="store_true")
p.add_argument("--rows", type=int, default=0, help="batch_rows (0: the base's)")
p.add_argument("--langs", default="")
p.add_argument("--eval-lengths", default="")
p.add_argument("--eval-n", type=int, default=0)
a = p.parse_args()

c = json.load(open(a.base))
c["architectures"] = a.archs.split(",")
c["device"] = a.device
t = c["train"]
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
if a.tiny:
    c["model"] = {"hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 4, "num_attention_heads": 4,
                  "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
                  "tie_word_embeddings": True, "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}}
    t["log_every_steps"] = 1
    t["eval_every_tokens"] = 0
if a.langs:
    c["langs"] = a.langs.split(",")
if a.eval_lengths:
    c["eval"]["lengths"] = [int(x) if x.isdigit() else x for x in a.eval_lengths.split(",")]
if a.eval_n:
    c["eval"]["n"] = a.eval_n
with open(a.out, "w") as f:
    json.dump(c, f, indent=2)
    f.write("\n")
print(f"config {a.out}: stage 1 {a.steps0} steps ({stages[0]['tokens']:,} tokens), stage 2 {a.steps1} steps "
      f"({stages[1]['tokens']:,} tokens), {step_tokens:,} tokens per step, checkpoint every {a.checkpoint_every}, "
      f"{c['device']} {a.precision}, {len(c['langs'])} languages, eval lengths {c['eval']['lengths']} n {c['eval']['n']}")
