"""Reference for `flipside bench llm`: prompt and decode speed of llama-cpp-python on the same
GGUF, token ids and thread count. Reads a JSON request on stdin, prints one JSON result."""
import json
import sys
import time

import llama_cpp

request = json.load(sys.stdin)
llm = llama_cpp.Llama(
    model_path=request["model"],
    n_ctx=request["context"],
    n_batch=request["batch"],
    n_ubatch=request["batch"],
    n_threads=request["threads"],
    n_threads_batch=request["threads"],
    verbose=False,
)
prompt = request["prompt_tokens"]
runs = []
for _ in range(request["warmup"] + request["repeats"]):
    llm.reset()  # n_tokens = 0: eval removes the cached tokens, every run reads the whole prompt
    started = time.perf_counter()
    llm.eval(prompt)
    prompt_seconds = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(request["decode_tokens"]):
        token = llm.sample(temp=0.0)
        llm.eval([token])
    decode_seconds = time.perf_counter() - started
    runs.append({"prompt_ms": prompt_seconds * 1e3, "decode_ms": decode_seconds * 1e3})
print(json.dumps({
    "version": llama_cpp.__version__,
    "runs": runs[request["warmup"]:],
}))
