# kiln: facts about a Python environment, printed as one JSON line. Never imports sglang;
# imports torch only when it is installed (for its CUDA build, arch list and device count).
import json, sys, sysconfig

try:
    import importlib.metadata as md
except ImportError:  # Python < 3.8
    md = None

PACKAGES = ["torch", "flash-attn", "flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache",
            "sgl-kernel", "sglang", "triton", "transformers", "nvidia-nccl-cu12", "nvidia-nccl-cu13"]
facts = {"executable": sys.executable, "version": sys.version.split()[0],
         "purelib": sysconfig.get_paths().get("purelib"), "packages": {}, "torch": None}
for name in PACKAGES:
    try:
        facts["packages"][name] = md.version(name)
    except Exception:
        pass
if "torch" in facts["packages"]:
    t = {}
    try:
        import torch
        t["version"] = torch.__version__
        t["cuda"] = torch.version.cuda
        flags = getattr(torch._C, "_cuda_getArchFlags", None)
        arch = flags() if flags else None
        t["arch_list"] = arch.split() if arch else torch.cuda.get_arch_list()
        t["device_count"] = torch.cuda.device_count()
    except Exception as e:  # a broken install is a fact too
        t["error"] = repr(e)[:400]
    facts["torch"] = t
print("KILN_FACTS " + json.dumps(facts))
