# torch SDPA (cuDNN backend) fwd+bwd timed as peer_probe.py's sdpa section times it (q [B, 32, T, 128], k/v
# [B, 8, T, 128] bf16 from randn, is_causal, enable_gqa; 3 warm-ups, 10 calls back to back, mean), once with the
# peer's output gradient (all ones: o.backward(ones_like(o))) and once with normal values, to see whether the
# gradient's values move the time. Prints one JSON line per measurement.
# Usage: python3 sdpa_dout.py [--shapes 8x1024,2x4096,1x16384] [--backends cudnn,flash] [--trace-dout ones|normal]
#   --trace-dout: that variant's last timed calls also run under torch.profiler (CUDA activity); its kernel table
#   (per kernel: calls, total and mean device time) is printed after the shape's lines.
import argparse, json
import torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend

ap = argparse.ArgumentParser()
ap.add_argument("--shapes", default="8x1024,2x4096,1x16384")
ap.add_argument("--backends", default="cudnn")
ap.add_argument("--trace-dout", default="")
ap.add_argument("--repeats", type=int, default=2, help="ones/normal alternations per shape")
args = ap.parse_args()
BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}
H, HKV, D = 32, 8, 128

def timed(fn, iters=10, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(iters):
        fn()
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) / iters

def kernel_table(fn, iters=10):
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    return prof.key_averages().table(sort_by="cuda_time_total", row_limit=20, max_name_column_width=110)

for shape in args.shapes.split(","):
    B, T = (int(x) for x in shape.split("x"))
    torch.manual_seed(0)
    q = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(B, HKV, T, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(B, HKV, T, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    grads = {"ones": torch.ones(B, H, T, D, device="cuda", dtype=torch.bfloat16),
             "normal": torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16)}
    for name in args.backends.split(","):
        be = BACKENDS[name]
        def fwd():
            with sdpa_kernel([be]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        for rep in range(args.repeats):
            for dname, g in grads.items():
                def fb():
                    o = fwd(); o.backward(g)
                fb_ms = timed(fb)
                f_ms = timed(fwd)
                print(json.dumps({"backend": name, "B": B, "T": T, "d_out": dname, "rep": rep,
                                  "fwd_ms": round(f_ms, 4), "fwdbwd_ms": round(fb_ms, 4)}), flush=True)
                if dname == args.trace_dout and rep == args.repeats - 1:
                    print(f"kernels of {name} B{B} T{T} d_out {dname}, 10 fwd+bwd calls:\n" + kernel_table(fb), flush=True)
