# kiln doctor --deep: probe torch symmetric memory the way SGLang 0.5.9's TorchSymmMemCommunicator
# does (allocate, rendezvous, read multicast_ptr), then time a 64 KiB bf16 all-reduce through NCCL
# and through symm-mem two-shot. Adapted from shared/fixtures/gpu/symm-mem-probe.py.
# Multicast stays disabled: kiln always sets TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NCCL_NVLS_ENABLE=0
# NVSHMEM_DISABLE_NVLS=1, and this script refuses to run without the first.
import os, time, json, torch, torch.distributed as dist
assert os.environ.get("TORCH_SYMM_MEM_DISABLE_MULTICAST") == "1", "refusing to run with multicast enabled"
rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(rank)
dist.init_process_group("nccl", device_id=torch.device(f"cuda:{rank}"))
ws = dist.get_world_size()
import torch.distributed._symmetric_memory as symm
res = {"rank": rank, "world": ws, "cap": list(torch.cuda.get_device_capability())}
try:
    buf = symm.empty(1 << 20, device=f"cuda:{rank}", dtype=torch.bfloat16)
    h = symm.rendezvous(buf, dist.group.WORLD.group_name)
    res["multicast_ptr"] = int(h.multicast_ptr)
    res["rendezvous"] = "ok"
except Exception as e:
    res["rendezvous"] = repr(e)[:300]
x = torch.randn(4096 * 8, device="cuda", dtype=torch.bfloat16)
for _ in range(20): dist.all_reduce(x)
torch.cuda.synchronize(); t = time.perf_counter()
for _ in range(200): dist.all_reduce(x)
torch.cuda.synchronize(); res["nccl_allreduce_64KiB_us"] = round((time.perf_counter() - t) / 200 * 1e6, 2)
try:
    y = symm.empty(4096 * 8, device=f"cuda:{rank}", dtype=torch.bfloat16)
    symm.rendezvous(y, dist.group.WORLD.group_name)
    y.copy_(x)
    op = torch.ops.symm_mem.two_shot_all_reduce_
    for _ in range(20): op(y, "sum", dist.group.WORLD.group_name)
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(200): op(y, "sum", dist.group.WORLD.group_name)
    torch.cuda.synchronize(); res["symm_two_shot_64KiB_us"] = round((time.perf_counter() - t) / 200 * 1e6, 2)
except Exception as e:
    res["symm_two_shot"] = repr(e)[:300]
print("RESULT", json.dumps(res), flush=True)
dist.destroy_process_group()
