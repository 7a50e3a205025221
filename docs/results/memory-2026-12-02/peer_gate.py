# Runs peer_probe.py's hf_distill section in a device call shared with other GPU work:
#   - imports torch/transformers/FLA at once, then waits for the file $PEER_GATE before touching the GPU;
#   - builds the HF models directly on the GPU (random init on the device instead of the host: setup time only;
#     the models are then cast to bf16 exactly as peer_probe does);
#   - resets torch's peak-memory counter right before the timed loop (warm-up included), so the reported peak covers
#     the training steps with both bf16 models resident, as when the models were built on the host.
import os, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch, transformers
import peer_probe

gate = os.environ.get("PEER_GATE")
if gate:
    t = time.time()
    while not os.path.exists(gate):
        time.sleep(0.2)
    print(f"# waited {time.time() - t:.1f}s for {gate}", flush=True)

def on_device(cls):
    class Built:
        def __new__(_, *a, **kw):
            with torch.device("cuda"):
                return cls(*a, **kw)
    return Built

transformers.Qwen3ForCausalLM = on_device(transformers.Qwen3ForCausalLM)
transformers.Qwen3NextForCausalLM = on_device(transformers.Qwen3NextForCausalLM)
_timed = peer_probe.timed
def timed(fn, iters=10, warmup=3):
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    return _timed(fn, iters=iters, warmup=warmup)
peer_probe.timed = timed
t = time.time()
peer_probe.hf_distill()
print(f"# hf_distill took {time.time() - t:.1f}s", flush=True)
