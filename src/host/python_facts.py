# kiln: facts about a Python environment, printed as one JSON line. Imports neither torch nor
# sglang (an `import torch` costs seconds): kiln reads torch's facts from its files.
import json, sys, sysconfig

try:
    import importlib.metadata as md
except ImportError:  # Python < 3.8
    md = None

PACKAGES = ["torch", "flash-attn", "flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache",
            "sgl-kernel", "sglang", "triton", "transformers", "nvidia-nccl-cu12", "nvidia-nccl-cu13"]
facts = {"executable": sys.executable, "version": sys.version.split()[0],
         "purelib": sysconfig.get_paths().get("purelib"), "packages": {}, "torch_dir": None}
for name in PACKAGES:
    try:
        facts["packages"][name] = md.version(name)
    except Exception:
        pass
if "torch" in facts["packages"]:
    # Where torch is, without importing it (kiln reads its version.py and CUDA libraries).
    try:
        import importlib.util
        spec = importlib.util.find_spec("torch")
        dirs = list(spec.submodule_search_locations or []) if spec else []
        facts["torch_dir"] = dirs[0] if dirs else None
    except Exception:
        pass
print("KILN_FACTS " + json.dumps(facts))
