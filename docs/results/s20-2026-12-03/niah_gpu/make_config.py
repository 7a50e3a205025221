#!/usr/bin/env python3
"""Session 20: the experiment config of one GPU rung, as session 17's rung.sh writes it (from
configs/niah/experiment-cpu-short.json: 4/2 heads of 16, lr -> lr/10 cosine, 5 % warmup, answer loss, bytes), with:
  architectures  the given list (full_attention first; one process per architecture via --architectures)
  full_fraction  0.25, as K2long_sp (2 layers: one attention layer; standard_periodic RA, reverse_periodic AR)
  corpus         a small haystack corpus of plain sentences (only the experiment's own 1-sample evaluation cell reads
                 it; training reads <out>/data, which run.sh fills with easy_data.py examples before the run)
  train          init_seed = data_seed = --seed (weights and training-document order; the examples and the
                 validation/test documents stay the same), fp32, recompute none (no forward recomputed in the
                 backward: fewer kernel launches, identical results), a checkpoint every --checkpoint-every steps (0: none;
                 run.sh evaluates the newest one of a run cut by its time limit), held_out_docs --held-out
  eval           one 8-token single cell, fp32, a 64 MiB state budget (14 processes share the GPU)

usage: make_config.py OUT_JSON --seq S --rows R --steps N --lr LR --archs a,b --seed K --corpus DIR
                      [--layers 2 --hidden 64 --kv 2 --log-every 40 --held-out 64 --checkpoint-every 0]
"""
import argparse, json

p = argparse.ArgumentParser()
p.add_argument("out"); p.add_argument("--seq", type=int, required=True); p.add_argument("--rows", type=int, required=True)
p.add_argument("--steps", type=int, required=True); p.add_argument("--lr", type=float, required=True)
p.add_argument("--archs", required=True); p.add_argument("--seed", type=int, default=0)
p.add_argument("--corpus", required=True); p.add_argument("--layers", type=int, default=2)
p.add_argument("--hidden", type=int, default=64); p.add_argument("--kv", type=int, default=2)
p.add_argument("--log-every", type=int, default=40); p.add_argument("--held-out", type=int, default=64)
p.add_argument("--checkpoint-every", type=int, default=0)
p.add_argument("--base", default="configs/niah/experiment-cpu-short.json")
a = p.parse_args()

c = json.load(open(a.base))
c["model"].update({"num_hidden_layers": a.layers, "hidden_size": a.hidden, "intermediate_size": 3 * a.hidden,
                   "num_attention_heads": a.hidden // 16, "num_key_value_heads": a.kv, "head_dim": 16})
c["train"].update({"tokens": a.steps * a.rows * a.seq, "seq_len": a.seq, "batch_rows": a.rows,
                   "micro_batch_rows": a.rows, "lr": a.lr, "min_lr": a.lr / 10, "log_every_steps": a.log_every,
                   "checkpoint_every_steps": a.checkpoint_every, "held_out_docs": a.held_out, "init_seed": a.seed,
                   "data_seed": a.seed, "precision": "fp32", "recompute": "none"})
c["train_data"]["lengths"] = [8]
c["architectures"] = a.archs.split(",")
c["full_fraction"] = 0.25
c["corpus"] = a.corpus
c["held_out_docs"] = 4
c["eval"].update({"lengths": [8], "n": 1, "max_batch": 1, "precision": "fp32", "max_memory": "64M"})
json.dump(c, open(a.out, "w"), indent=1)
