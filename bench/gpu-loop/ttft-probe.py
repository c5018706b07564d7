"""Time to first token, request by request, with no warm-up: the client's TTFT beside llama-server's
own timings (prompt_ms: prompt processing; the rest of the TTFT is queueing, HTTP and the first
decode step). Sends the body kiln's bench sends (greedy, ignore_eos, cache_prompt false).

usage: ttft-probe.py URL N MAX_TOKENS [W]   (W: the first W requests are 64 tokens, as kiln's warm-ups)
"""
import json
import sys
import time
import urllib.request

url, n, max_tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
warm = int(sys.argv[4]) if len(sys.argv) > 4 else 0
prompt = "Write a long, detailed story about a lighthouse keeper who discovers a hidden message in the fog."
last_end = None
print("req tokens  ttft_ms  prompt_ms prompt_n  decode_tok_s  gap_since_last_s  wall_clock")
for i in range(1, n + warm + 1):
    tokens = 64 if i <= warm else max_tokens
    body = {"prompt": prompt, "max_tokens": tokens, "temperature": 0.0, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}, "cache_prompt": False}
    req = urllib.request.Request(f"{url}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    gap = None if last_end is None else time.time() - last_end
    t0 = time.time()
    first = None
    timings = {}
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            v = json.loads(data)
            ch = v.get("choices") or []
            if first is None and ch and ch[0].get("text"):
                first = time.time() - t0
            timings = v.get("timings", timings)
    last_end = time.time()
    print(f"{i:>3} {tokens:>6} {1000 * (first or 0):>8.1f} {timings.get('prompt_ms', 0):>10.1f} "
          f"{timings.get('prompt_n', 0):>8} {timings.get('predicted_per_second', 0):>13.1f} "
          f"{'' if gap is None else f'{gap:.3f}':>17}  {time.strftime('%H:%M:%S', time.localtime(t0))}.{int(t0 % 1 * 1000):03d}",
          flush=True)
