#!/usr/bin/env python3
"""A loopback server that speaks SGLang 0.5.9's HTTP wire protocol, for kiln's tests.

Every field and framing rule below is read from the sglang 0.5.9 wheel from PyPI
(`pip download sglang==0.5.9 --no-deps`), cited as file:line under `sglang/srt/`. What it does
not do is run a model: token ids come from a fixed function of the prompt, so that two launches
agree (the greedy A/B) unless `--diverge-after N` changes every id past the N-th.

It takes SGLang's own launch flags where it has them (`--model-path`, `--host`, `--port`,
`--stream-output`, `--stream-interval`, `--speculative-algorithm`,
`--speculative-num-draft-tokens`, `--random-seed`, `--log-requests`) and logs SGLang's own lines in its logger
format, so `kiln serve` can launch it as a profile with `signatures = "sglang-0.5.9"`.

Standard library only; run it as `python3 sglang_wire_server.py --port N ...`.
"""

import argparse
import dataclasses
import hashlib
import json
import random
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

VERSION = "0.5.9"


@dataclasses.dataclass
class ServerArgs:
    """The part of server_args.py's ServerArgs that /server_info shows and these tests vary."""

    model_path: str = ""
    tokenizer_path: str = ""
    served_model_name: str = ""
    host: str = "127.0.0.1"
    port: int = 30000
    # server_args.py:307 `nccl_port: Optional[int] = None` (PortArgs picks one, not ServerArgs).
    nccl_port: object = None
    tp_size: int = 1
    mem_fraction_static: float = 0.88
    # server_args.py:354 `stream_interval: int = 1`.
    stream_interval: int = 1
    stream_output: bool = False
    random_seed: object = None
    speculative_algorithm: object = None
    speculative_num_draft_tokens: object = None
    weight_version: str = "default"
    enable_cache_report: bool = False
    # server_args.py's `enable_torch_symm_mem: bool = False`; the stand-in logs no line for it
    # (SGLang 0.5.9 logs no positive one either), so only /server_info says it is on.
    enable_torch_symm_mem: bool = False
    # server_args.py's `attention_backend: Optional[str] = None` (SGLang resolves it at start-up;
    # the stand-in keeps what it was given). Named only in the start-up dump below.
    attention_backend: object = None
    # server_args.py:372 `log_requests: bool = False`.
    log_requests: bool = False


def log(msg, rank=None):
    """srt/utils configure_logger: `[%(asctime)s%(prefix)s] %(message)s`; the prefix ` TP0` for
    a scheduler rank, none for the HTTP/tokenizer process."""
    prefix = f" TP{rank}" if rank is not None else ""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"[{stamp}{prefix}] {msg}", flush=True)


def token_ids(prompt, n, diverge_after, repeat):
    """n deterministic ids for `prompt` (the stand-in for greedy decoding); with `repeat`, one id
    over and over (a model stuck on one token)."""
    seed = int.from_bytes(hashlib.sha256(prompt.encode()).digest()[:8], "little")
    ids = []
    for k in range(n):
        tid = (seed * (k + 7) + k * 2654435761) % 32000 + 10
        if repeat:
            tid = 42
        if diverge_after is not None and k >= diverge_after:
            tid = (tid + 1) % 32000 + 10
        ids.append(tid)
    return ids


def log_received(body):
    """utils/request_logger.py:112 (`--log-requests`, called from tokenizer_manager.py:508): the
    request as `_dataclass_to_string_truncated` (:225) writes a GenerateReqInput at the default
    level 2 (sampling params included), here only the fields the stand-in reads."""
    params = body.get("sampling_params") or {}
    shown = ", ".join(f"'{k}': {v!r}" for k, v in params.items())
    log(f"Receive: obj=GenerateReqInput(text={body.get('text')!r}, sampling_params={{{shown}}}, stream={bool(body.get('stream'))})")


def piece(tid):
    """The detokenized text of one id."""
    return f" w{tid}"


class State:
    def __init__(self, opts, args):
        self.opts = opts
        self.args = args
        # http_server.py:478 `server_status == ServerStatus.Starting` answers 503 until warm-up.
        self.up = False
        # Requests answered so far (`--every-other-step-ms` slows every second one).
        self.requests = 0


def steps(n, spec_draft):
    """Tokens each forward pass yields: 1 without speculative decoding; with it, 1 to
    `spec_draft` (accepted drafts + the target's own token), a fixed pattern."""
    if not spec_draft:
        return [1] * n
    out, k = [], 0
    while sum(out) < n:
        out.append(min(1 + (k % spec_draft), n - sum(out)))
        k += 1
    return out


def generate(state, prompt, sampling, rid, created):
    """The outs tokenizer_manager.py's _handle_batch_output (:1476) builds for one request, one
    per batch the scheduler sends, each a dict as /generate streams it."""
    a, o = state.args, state.opts
    n = int(sampling.get("max_new_tokens", 128))
    ids = token_ids(prompt, n, o.diverge_after, o.repeat_token)
    prompt_tokens = len(prompt.split()) + 1
    spec = a.speculative_algorithm is not None
    draft = int(a.speculative_num_draft_tokens or 0) if spec else 0
    interval = int(sampling.get("stream_interval") or a.stream_interval)
    sent_ids, text, produced, verify_ct, last_offset = [], "", 0, 0, 0
    state.requests += 1
    step_ms = o.step_ms
    if o.every_other_step_ms is not None and state.requests % 2 == 0:
        step_ms = o.every_other_step_ms
    for size in steps(n, draft):
        time.sleep(step_ms / 1000.0)
        produced += size
        verify_ct += 1
        stopped = o.stop_after is not None and produced >= o.stop_after
        if stopped:
            produced = o.stop_after
        finished = produced >= n or stopped
        # scheduler_output_processor_mixin.py:969-978: a streamed request is sent when
        # `len(output_ids) % stream_interval == 1` (interval > 1) or `== 0` (interval 1), and
        # always when finished (:959-966).
        if not finished:
            mod = produced % interval
            if not (mod == 1 if interval > 1 else mod == 0):
                continue
        new = ids[len(sent_ids) : produced]
        sent_ids.extend(new)
        text += "".join(piece(t) for t in new)
        # tokenizer_manager.py:1494-1500: every out's meta_info.
        meta = {
            "id": rid,
            # schedule_batch.py:172-176 FINISH_LENGTH.to_json(): {"type": "length", "length": N};
            # None until the request finishes.
            # FINISH_MATCHED_TOKEN (:136-140) {"type": "stop", "matched": id} for an EOS.
            "finish_reason": (
                ({"type": "stop", "matched": 2} if stopped else {"type": "length", "length": n})
                if finished
                else None
            ),
            "prompt_tokens": prompt_tokens,
            "weight_version": a.weight_version,
            "total_retractions": 0,
        }
        # tokenizer_manager.py:1527-1531: the request's completion tokens so far (cumulative
        # in every out, also with --stream-output) and the prefix-cache hits.
        meta["completion_tokens"] = produced + (o.usage_extra if finished else 0)
        meta["cached_tokens"] = 0
        if a.stream_output:
            # tokenizer_manager.py:1554-1557 (--stream-output and stream): only the new ids.
            out_ids = sent_ids[last_offset:]
            last_offset = len(sent_ids)
        else:
            # tokenizer_manager.py:1558-1560: every id so far, a copy each time.
            out_ids = list(sent_ids)
        if finished:
            # tokenizer_manager.py:1592-1595: e2e_latency once finished.
            meta["e2e_latency"] = time.time() - created
            if spec:
                # tokenizer_manager.py:1837-1857 _calculate_spec_decoding_metrics: drafts
                # exclude the target-sampled token; accept length = completion / verify steps.
                guess = draft - 1
                accepted = produced - verify_ct
                meta["spec_accept_rate"] = accepted / (verify_ct * guess)
                meta["spec_accept_length"] = produced / verify_ct
                meta["spec_accept_token_num"] = accepted
                meta["spec_draft_token_num"] = verify_ct * guess
                meta["spec_verify_ct"] = verify_ct
        # tokenizer_manager.py:1552, 1562-1566: text is the whole text so far (state.text +=).
        yield {"text": text, "output_ids": out_ids, "meta_info": meta}
        if finished:
            return


def coalesce(outs, slow_reader_every):
    """tokenizer_manager.py:1128-1130: the HTTP side sends `state.out_list[-1]`, the newest of
    the outs that arrived while it was away, and drops the rest; `slow_reader_every` > 1 drops
    all but every k-th out (never the last) as a slow client would see. Lazy: each out is sent
    as its batch is made."""
    prev = None
    for i, out in enumerate(outs):
        if prev is not None and (slow_reader_every <= 1 or (i - 1) % slow_reader_every == 0):
            yield prev
        prev = out
    if prev is not None:
        yield prev


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""

    def log_message(self, fmt, *args):  # uvicorn's access log, in its own words
        print(f'INFO:     127.0.0.1 - "{self.command} {self.path} HTTP/1.1" {args[1] if len(args) > 1 else ""}', flush=True)

    @property
    def state(self):
        return self.server.state

    def send_json(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_empty(self, code):
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def start_stream(self):
        # http_server.py:679-683: StreamingResponse(media_type="text/event-stream"), which
        # uvicorn sends chunked.
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def chunk(self, data):
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def end_stream(self):
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def do_GET(self):
        s, a = self.state, self.state.args
        path = self.path.split("?")[0]
        if path in ("/health", "/health_generate"):
            # http_server.py:464-540: 503 while starting; /health answers 200 at once (without
            # SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION), /health_generate after a one-token
            # generation it polls for once a second (:515-522).
            if not s.up:
                return self.send_empty(503)
            if path == "/health_generate":
                time.sleep(1.0)
            return self.send_empty(200)
        if path in ("/get_model_info", "/model_info"):
            if path == "/get_model_info":
                # http_server.py:546-549: the deprecated name warns, then answers the same.
                log("Endpoint '/get_model_info' is deprecated and will be removed in a future version. Please use '/model_info' instead.")
            # http_server.py:556-569.
            return self.send_json(200, {
                "model_path": a.model_path,
                "tokenizer_path": a.tokenizer_path,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": a.weight_version,
                "has_image_understanding": False,
                "has_audio_understanding": False,
                "model_type": "llama",
                "architectures": ["LlamaForCausalLM"],
            })
        if path in ("/get_server_info", "/server_info"):
            # http_server.py:596-609: server_args as a dict, the scheduler's info
            # (scheduler.py:3141-3145), the per-DP internal states, the version.
            args = dataclasses.asdict(a)
            internal = dict(args, last_gen_throughput=s.opts.step_ms and 1000.0 / s.opts.step_ms,
                            memory_usage={"weight": 0.01, "kvcache": 0.02, "token_capacity": 4096, "graph": 0.0},
                            effective_max_running_requests_per_dp=48)
            return self.send_json(200, {
                **args,
                "status": "ready",
                "max_total_num_tokens": 4096,
                "max_req_input_len": 4090,
                "internal_states": [internal],
                "version": VERSION,
            })
        if path == "/v1/models":
            # http_server.py:1421-1450 and entrypoints/openai/protocol.py:53-69 ModelCard.
            return self.send_json(200, {"object": "list", "data": [{
                "id": a.served_model_name, "object": "model", "created": int(time.time()),
                "owned_by": "sglang", "root": a.served_model_name, "parent": None,
                "max_model_len": 4096,
            }]})
        return self.send_json(404, {"detail": "Not Found"})

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n) or b"{}")

    def do_POST(self):
        s = self.state
        path = self.path.split("?")[0]
        # No status check: http_server.py:649-684 takes a request as soon as uvicorn is up (the
        # warm-up itself is one).
        body = self.read_body()
        created = time.time()
        rid = uuid.uuid4().hex
        if path == "/generate":
            if s.args.log_requests:
                log_received(body)
            outs = generate(s, body.get("text", ""), body.get("sampling_params") or {}, rid, created)
            if not body.get("stream"):
                # http_server.py:684-690: not streamed, the one final out.
                return self.send_json(200, list(outs)[-1])
            self.start_stream()
            for out in coalesce(outs, s.opts.slow_reader_every):
                if s.opts.cut_after is not None and out["meta_info"]["completion_tokens"] > s.opts.cut_after:
                    # A server that dies mid-stream: the connection closes, no final out, no [DONE].
                    self.close_connection = True
                    return self.end_stream()
                if s.opts.empty_data_lines:
                    # An event whose data is empty (the SSE spec allows it; proxies send them).
                    self.chunk(b"data:\n\n")
                # http_server.py:657-660: `b"data: " + orjson.dumps(out) + b"\n\n"`.
                self.chunk(b"data: " + json.dumps(out, separators=(",", ":")).encode() + b"\n\n")
            # http_server.py:668: after the last out, always.
            self.chunk(b"data: [DONE]\n\n")
            return self.end_stream()
        if path in ("/v1/completions", "/v1/chat/completions"):
            return self.openai_stream(path, body, rid, created)
        return self.send_json(404, {"detail": "Not Found"})

    def openai_stream(self, path, body, rid, created):
        s = self.state
        chat = path.endswith("chat/completions")
        prompt = "".join(m.get("content", "") for m in body.get("messages", [])) if chat else body.get("prompt", "")
        sampling = {"max_new_tokens": body.get("max_completion_tokens") or body.get("max_tokens") or 128}
        outs = list(coalesce(generate(s, prompt, sampling, rid, created), s.opts.slow_reader_every))
        model = body.get("model") or s.args.served_model_name
        stamp = int(created)
        if not body.get("stream"):
            final = outs[-1]
            usage = {"prompt_tokens": final["meta_info"]["prompt_tokens"],
                     "completion_tokens": final["meta_info"]["completion_tokens"]}
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
            return self.send_json(200, {"id": rid, "object": "text_completion", "created": stamp, "model": model,
                                        "choices": [{"index": 0, "text": final["text"], "finish_reason": final["meta_info"]["finish_reason"]["type"]}],
                                        "usage": usage})
        self.start_stream()
        sent = ""
        for out in outs:
            meta = out["meta_info"]
            # serving_completions.py:268-269 (serving_chat.py alike): the text not yet sent.
            delta = out["text"][len(sent):]
            sent += delta
            fin = meta["finish_reason"]
            if chat:
                # serving_chat.py: ChatCompletionStreamResponse with a `delta`.
                choice = {"index": 0, "delta": {"role": "assistant", "content": delta},
                          "logprobs": None, "finish_reason": fin["type"] if fin else None,
                          "matched_stop": None}
                chunk = {"id": meta["id"], "object": "chat.completion.chunk", "created": stamp,
                         "model": model, "choices": [choice], "usage": None}
            else:
                # serving_completions.py:272-289, protocol.py:362-384: the choice's fields;
                # `usage` null unless continuous_usage_stats (:291-299).
                choice = {"index": 0, "text": delta, "logprobs": None,
                          "finish_reason": fin["type"] if fin else None, "matched_stop": None}
                chunk = {"id": meta["id"], "object": "text_completion", "created": stamp,
                         "model": model, "choices": [choice], "usage": None}
            self.chunk(f"data: {json.dumps(chunk)}\n\n".encode())
        # serving_completions.py:343-360: with stream_options.include_usage, one more chunk, no
        # choices, the usage (exclude_none).
        if (body.get("stream_options") or {}).get("include_usage"):
            meta = outs[-1]["meta_info"]
            usage = {"prompt_tokens": meta["prompt_tokens"],
                     "total_tokens": meta["prompt_tokens"] + meta["completion_tokens"],
                     "completion_tokens": meta["completion_tokens"], "reasoning_tokens": 0}
            final = {"id": meta["id"], "object": "chat.completion.chunk" if chat else "text_completion",
                     "created": stamp, "model": model, "choices": [], "usage": usage}
            self.chunk(f"data: {json.dumps(final)}\n\n".encode())
        # serving_completions.py:368.
        self.chunk(b"data: [DONE]\n\n")
        self.end_stream()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model-path", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--tp-size", "--tp", type=int, default=1)
    p.add_argument("--stream-interval", type=int, default=1)
    p.add_argument("--stream-output", action="store_true")
    p.add_argument("--random-seed", type=int)
    p.add_argument("--speculative-algorithm")
    p.add_argument("--speculative-num-draft-tokens", type=int)
    p.add_argument("--mem-fraction-static", type=float, default=0.88)
    p.add_argument("--enable-torch-symm-mem", action="store_true")
    p.add_argument("--attention-backend")
    p.add_argument("--log-requests", action="store_true")
    # Not SGLang's: how the stand-in behaves.
    p.add_argument("--startup-s", type=float, default=1.5, help="seconds of 'loading' before /health answers 200")
    p.add_argument("--step-ms", type=float, default=2.0, help="milliseconds per forward pass")
    p.add_argument("--every-other-step-ms", type=float, help="milliseconds per forward pass of every second request (a noisy bench)")
    p.add_argument("--diverge-after", type=int, help="change every token id past this many")
    p.add_argument("--stop-after", type=int, help="end every request with an EOS after this many tokens, ignore_eos or not")
    p.add_argument("--cut-after", type=int, help="end /generate streams after this many tokens, without the final out or [DONE]")
    p.add_argument("--repeat-token", action="store_true", help="every id the same")
    p.add_argument("--usage-extra", type=int, default=0, help="say this many more completion_tokens in the final out than ids streamed (a count that lies)")
    p.add_argument("--empty-data-lines", action="store_true", help="a `data:` line with nothing after it before every out")
    p.add_argument("--slow-reader-every", type=int, default=1, help="send 1 of every k outs (tokenizer_manager.py:1128)")
    opts = p.parse_args()
    args = ServerArgs(model_path=opts.model_path, tokenizer_path=opts.model_path,
                      served_model_name=opts.model_path, host=opts.host, port=opts.port,
                      tp_size=opts.tp_size, mem_fraction_static=opts.mem_fraction_static,
                      stream_interval=opts.stream_interval, stream_output=opts.stream_output,
                      random_seed=opts.random_seed, speculative_algorithm=opts.speculative_algorithm,
                      speculative_num_draft_tokens=opts.speculative_num_draft_tokens,
                      enable_torch_symm_mem=opts.enable_torch_symm_mem,
                      attention_backend=opts.attention_backend, log_requests=opts.log_requests)
    # server_args.py:853-854: without --random-seed, a new random one every launch.
    if args.random_seed is None:
        args.random_seed = random.randint(0, 1 << 30)
    state = State(opts, args)
    # As SGLang's launch: the resolved settings, one dataclass repr (server_args=ServerArgs(...)),
    # the only line that names the attention backend.
    log(f"server_args={args!r}")
    # As SGLang: the scheduler loads the weights before the HTTP port opens; the port answers
    # during the warm-up (its /health* with 503) until the warm-up request returns.
    log("Load weight begin. avail mem=0.50 GB", rank=0)
    time.sleep(opts.startup_s / 2)
    log("Load weight end. type=LlamaForCausalLM, dtype=torch.float32, avail mem=0.49 GB", rank=0)
    log("KV Cache is allocated. #tokens: 4096, K size: 0.01 GB, V size: 0.01 GB", rank=0)
    server = ThreadingHTTPServer((opts.host, opts.port), Handler)
    server.daemon_threads = True
    server.state = state
    threading.Thread(target=server.serve_forever, daemon=True).start()
    log(f"Uvicorn running on http://{opts.host}:{opts.port} (Press CTRL+C to quit)")
    time.sleep(opts.startup_s / 2)
    state.up = True
    log("The server is fired up and ready to roll!")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
