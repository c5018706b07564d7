# kiln doctor --deep: a seconds-long kernel smoke on every GPU (bf16 matmul checked against fp32).
import json, time
out = {"gpus": []}
try:
    import torch
    for i in range(torch.cuda.device_count()):
        r = {"index": i}
        try:
            torch.cuda.set_device(i)
            g = torch.Generator(device=f"cuda:{i}").manual_seed(0)
            a = torch.randn(4096, 4096, device=f"cuda:{i}", dtype=torch.bfloat16, generator=g)
            b = torch.randn(4096, 4096, device=f"cuda:{i}", dtype=torch.bfloat16, generator=g)
            (a @ b); torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(10):
                c = a @ b
            torch.cuda.synchronize()
            dt = (time.perf_counter() - t) / 10
            ref = a.float() @ b.float()
            r["max_rel_err"] = float(((c.float() - ref).abs().max() / ref.abs().max()).item())
            r["tflops"] = round(2 * 4096 ** 3 / dt / 1e12, 1)
            r["cap"] = list(torch.cuda.get_device_capability(i))
            r["ok"] = r["max_rel_err"] < 0.05
        except Exception as e:
            r["ok"] = False
            r["error"] = repr(e)[:400]
        out["gpus"].append(r)
except Exception as e:
    out["error"] = repr(e)[:400]
print("KILN_DEEP " + json.dumps(out))
