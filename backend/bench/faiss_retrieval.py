"""Reference for `flipside bench retrieval`: faiss-cpu IndexIVFFlat (CORE's setting) and
IndexHNSWFlat on the same vectors and queries, inner-product metric.

Reads a JSON request on stdin: {"vectors", "queries" (raw little-endian float32 files),
"dim", "k", "threads", "ivf": {"nlist", "nprobes"}, "hnsw": {"m", "ef_construction",
"ef_searches"}}, and prints a JSON list of runs: index, parameter, build seconds, memory growth
(bytes of anonymous resident memory: the index's own, not the mapped vectors file), search
seconds and the ids found for every query. The vectors are mapped, not read, so that 8M of
them (12 GB) need not fit in memory beside an index's copy, and added a million rows at a time
from memory: IndexHNSWFlat reads each new vector while it inserts it, in random order, which
from a mapped file larger than the page cache left the build waiting on the disk.
"""

import json
import sys
import time

import faiss
import numpy as np


def resident_bytes():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


def timed_searches(index, queries, k, name, parameter, values, set_value, build):
    runs = []
    for value in values:
        set_value(value)
        index.search(queries[:16], k)  # warm-up
        start = time.perf_counter()
        _, ids = index.search(queries, k)
        seconds = time.perf_counter() - start
        runs.append({
            "index": name, "parameter": parameter, "value": value,
            "build_seconds": build[0], "memory_bytes": build[1],
            "search_seconds": seconds, "ids": ids.tolist(),
        })
    return runs


def add_in_chunks(index, vectors, rows=1_000_000):
    for start in range(0, len(vectors), rows):
        index.add(np.ascontiguousarray(vectors[start:start + rows]))


def build(make):
    before = resident_bytes()
    start = time.perf_counter()
    index = make()
    return index, (time.perf_counter() - start, resident_bytes() - before)


def main():
    request = json.load(sys.stdin)
    faiss.omp_set_num_threads(request["threads"])
    dim, k = request["dim"], request["k"]
    vectors = np.memmap(request["vectors"], dtype="<f4", mode="r").reshape(-1, dim)
    queries = np.fromfile(request["queries"], dtype="<f4").reshape(-1, dim)
    runs = []

    ivf_request = request["ivf"]

    def make_ivf():
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFFlat(quantizer, dim, ivf_request["nlist"], faiss.METRIC_INNER_PRODUCT)
        index.train(vectors)
        add_in_chunks(index, vectors)
        return index

    ivf, ivf_build = build(make_ivf)
    runs += timed_searches(ivf, queries, k, "faiss IndexIVFFlat", "nprobe", ivf_request["nprobes"],
                           lambda v: setattr(ivf, "nprobe", v), ivf_build)
    del ivf

    hnsw_request = request["hnsw"]

    def make_hnsw():
        index = faiss.IndexHNSWFlat(dim, hnsw_request["m"], faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = hnsw_request["ef_construction"]
        add_in_chunks(index, vectors)
        return index

    hnsw, hnsw_build = build(make_hnsw)
    runs += timed_searches(hnsw, queries, k, "faiss IndexHNSWFlat", "efSearch",
                           hnsw_request["ef_searches"],
                           lambda v: setattr(hnsw.hnsw, "efSearch", v), hnsw_build)
    print(json.dumps({"faiss": faiss.__version__, "threads": request["threads"], "runs": runs}))


if __name__ == "__main__":
    main()
