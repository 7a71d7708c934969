"""The whole loop (`rag_loop_job`) on 14 days of generated traffic at two sizes, per asset.

    python bench/loop.py [--sizes 100000,1000000] [--incremental] [--workdir bench/out/loop]
                         [--data ../shared/data]

Traffic: native JSONL, one file per UTC day (2026-11-01 ... 14, and a 15th day for
`--incremental`), written once per size into the workdir and reused. Queries come from the real
intent sets (Banking77, HWU64: English) and the demo world's Vietnamese queries (grouped into
intents by the chunk that answered them), with seeded paraphrase noise (case, fillers, typos,
word drops); traffic per intent is Zipf-like (s = 1 over intents, 0.8 over an intent's
phrasings) and three intents appear only from day 9, 11 and 12 on (for the novelty stream).
Sessions of 1-3 turns per `service` (a rephrase within 90 s half the time), five tenants, query
types and risk levels per intent, 5 chunks per trace from a 202-document knowledge base (written
beside the traffic; 10 % of the documents get a new version on day 6, indexed on day 8), chunk
text on half the traces (id-only otherwise), answers citing a chunk, thumbs-down mostly on
wrong retrievals, 2 % timeouts, 0.5 % errors, 2 % fallbacks, latency and cost; half the traces
carry no `language` (identified at ingestion; RAG_LOOP_LANGUAGES=en,vi as the README advises).

Each run is one child process (`rag_loop_job` executed in process as `rag-loop run` does, in a
fresh home per size, the offline judge and bundled embedders). Per asset (Dagster step): wall
and CPU seconds (the child's own and its waited-for children's, user + system) read by an event
listener at STEP_START and STEP_SUCCESS; the run's wall, CPU and peak RSS (the process and its
children); then, in the same process after the run, the baseline: a bare DuckDB `read_json` of
the same trace files into a table. The exponent between two sizes is log(t2/t1)/log(n2/n1)
(1 = linear). `--incremental`: after the 14-day run, one more day (1/14 of the size) is added
and the next run is timed the same way (goal: under 1 minute at 1,000,000 traces).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import math
import os
import random
import resource
import shutil
import subprocess
import sys
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from itertools import accumulate
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
START, DAYS = datetime(2026, 11, 1, tzinfo=UTC), 14
SHARES = {"bank-assistant": 0.55, "home-assistant": 0.20, "hr-helpdesk": 0.25}  # traffic per service
NEW_INTENTS = {"bank-assistant": (7, 8), "home-assistant": (4, 10), "hr-helpdesk": (5, 11)}  # rank, first day
TENANTS, TENANT_WEIGHTS = ["acme", "globex", "initech", "umbrella", "hooli"], [40, 25, 15, 12, 8]
FILLERS = {"en": (["hi ", "hey ", "pls ", ""], ["", " thanks", " please"]),
           "vi": (["cho mình hỏi ", "ad ơi ", ""], ["", " ạ", " nhé"])}
KINDS = {"security": ("pin", "passcode", "compromised", "stolen", "lost", "verify", "identity"),
         "payment": ("transfer", "payment", "top_up", "withdrawal", "exchange", "refund", "debit")}
CATEGORIES = ["incorrect", "outdated_source", "missing_info", "hallucination"]


# ---------------------------------------------------------------- traffic

def load_intents(data: Path) -> dict[str, list[dict]]:
    """Per service, intents {key, language, queries, query_type, risk_level} in Zipf rank order."""
    by_service: dict[str, dict[str, dict]] = {s: {} for s in SHARES}
    for service, name in (("bank-assistant", "banking77.csv"), ("home-assistant", "hwu64.csv")):
        with open(data / name, newline="") as handle:
            for row in csv.DictReader(handle):
                intent = by_service[service].setdefault(row["intent"], {"language": "en", "queries": []})
                intent["queries"].append(row["query"])
    types: dict[str, Counter] = defaultdict(Counter)
    for path in sorted((ROOT / "data/demo/traces/native").glob("*.jsonl.gz")):
        for line in gzip.open(path, "rt", encoding="utf-8"):
            trace = json.loads(line)
            if trace.get("language") == "vi" and trace.get("chunks"):
                chunk = trace["chunks"][0]["chunk_id"]  # doc@version#section-vi: its intent
                key = chunk.split("@")[0] + "-" + chunk.split("#")[1].removesuffix("-vi")
                intent = by_service["hr-helpdesk"].setdefault(key, {"language": "vi", "queries": []})
                intent["queries"].append(trace["original_query"])
                types[key][(trace["query_type"], trace["risk_level"])] += 1
    rng, ranked = random.Random(42), {}
    for service, intents in by_service.items():
        for key, intent in intents.items():
            intent["key"], intent["queries"] = key, sorted(set(intent["queries"]))
            rng.shuffle(intent["queries"])  # the first phrasings are the most asked
            intent["cum"] = list(accumulate(1 / (k + 1) ** 0.8 for k in range(len(intent["queries"]))))
            kind = next((kind for kind, words in KINDS.items() if any(w in key for w in words)),
                        "account" if service == "bank-assistant" else "assistant")
            risk = {"security": "high", "payment": "medium"}.get(kind, "low")
            slices = types[key].most_common(1)[0][0] if key in types else (kind, risk)
            intent["query_type"], intent["risk_level"] = slices
        ranked[service] = sorted(intents.values(), key=lambda i: i["key"])
        rng.shuffle(ranked[service])
    return ranked


def noisy(query: str, language: str, rng: random.Random) -> str:
    """What a user types: mostly the phrasing as is, else lower case, a filler, a typo, a dropped word."""
    r, words = rng.random(), query.split()
    if r < 0.94:
        return query if r < 0.87 else query.lower().rstrip("?.! ")
    if r < 0.985:
        return rng.choice(FILLERS[language][0]) + query + rng.choice(FILLERS[language][1])
    if r < 0.995 and len(query) > 3:
        i = rng.randrange(len(query) - 1)
        return query[:i] + query[i + 1] + query[i] + query[i + 2:]
    if len(words) > 3:
        del words[rng.randrange(len(words))]
    return " ".join(words)


def knowledge_base(intents: dict[str, list[dict]], path: Path) -> dict[str, dict]:
    """One document of three chunks per intent (a KB export at `path`); every tenth gets version v2
    on day 6, indexed on day 8."""
    docs, lines = {}, []
    for service, ranked in intents.items():
        for n, intent in enumerate(sorted(ranked, key=lambda i: i["key"])):
            title, doc_id = intent["key"].replace("_", " ").replace("-", " "), f"{service}/{intent['key']}"
            texts = ([f"{title}: {intent['queries'][0]}", "Vui lòng liên hệ bộ phận nhân sự nếu cần thêm thông tin.",
                      "Quy định này áp dụng cho nhân viên toàn thời gian từ ngày ký hợp đồng."]
                     if intent["language"] == "vi" else
                     [f"{title.capitalize()}: for questions like \"{intent['queries'][0]}\" open the app, go to Help, "
                      f"then {title}, and follow the steps shown.",
                      f"{title.capitalize()} requests are usually processed within {2 + n % 5} business days.",
                      f"If the {title} problem persists after {3 + n % 4} days, contact support from the app."])
            docs[doc_id] = {"texts": texts, "v2": n % 10 == 0}
            for version, day in (("v1", -60), ("v2", 5))[:1 + docs[doc_id]["v2"]]:
                when = START + timedelta(days=day)
                lines.append(json.dumps({
                    "doc_id": doc_id, "version": version, "title": title, "source_updated_at": when.isoformat(),
                    "indexed_at": (when + timedelta(days=2)).isoformat(), "chunks": [
                        {"chunk_id": f"{doc_id}@{version}#{k + 1}", "text": text} for k, text in enumerate(texts)]},
                    ensure_ascii=False))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return docs


def day_traces(day: int, count: int, intents: dict[str, list[dict]], docs: dict[str, dict], seed: int):
    """`count` traces of day `day` (0-based), in sessions, sorted by time."""
    rng, traces = random.Random(f"{seed}-{day}"), []
    services = list(SHARES)
    weights = {s: list(accumulate(0.0 if (r == NEW_INTENTS[s][0] and day < NEW_INTENTS[s][1]) else 1 / (r + 1)
                                  for r in range(len(ranked)))) for s, ranked in intents.items()}
    doc_ids = {s: [d for d in docs if d.startswith(s + "/")] for s in services}
    session = 0
    while len(traces) < count:
        session += 1
        service = rng.choices(services, [SHARES[s] for s in services])[0]
        tenant = rng.choices(TENANTS, TENANT_WEIGHTS)[0]
        when = START + timedelta(days=day, seconds=rng.uniform(0, 86_000))
        intent = rng.choices(intents[service], cum_weights=weights[service])[0]
        for turn in range(rng.choices([1, 2, 3], [60, 25, 15])[0]):
            if turn:  # a rephrase of the same intent within seconds, or another question later
                rephrase = rng.random() < 0.5
                when += timedelta(seconds=rng.uniform(15, 80) if rephrase else rng.uniform(120, 600))
                intent = intent if rephrase else rng.choices(intents[service], cum_weights=weights[service])[0]
            query = rng.choices(intent["queries"], cum_weights=intent["cum"])[0]
            traces.append(make_trace(rng, day, len(traces), session, turn, when, service, tenant, intent,
                                     noisy(query, intent["language"], rng), docs, doc_ids[service]))
    traces.sort(key=lambda t: t["timestamp"])
    return traces


def make_trace(rng, day, index, session, turn, when, service, tenant, intent, query, docs, doc_ids) -> dict:
    right = rng.random() < 0.85
    ids = ([f"{service}/{intent['key']}"] if right else []) + rng.sample(doc_ids, 5 if not right else 4)
    chunks, with_text = [], rng.random() < 0.5
    reranks = [rng.uniform(0.4, 0.95) if right and k == 0 else rng.uniform(0.02, 0.4) if right
               else rng.uniform(0.01, 0.25) for k in range(5)]
    order = sorted(range(5), key=lambda k: -reranks[k])
    for k, doc_id in enumerate(ids[:5]):
        doc, part = docs[doc_id], rng.randrange(3)
        version = "v2" if doc["v2"] and day >= 7 else "v1"
        chunk = {"doc_id": doc_id, "chunk_id": f"{doc_id}@{version}#{part + 1}", "doc_version": version,
                 "score": round((0.85 if right else 0.5) - 0.08 * k - rng.random() * 0.05, 4), "rank": k + 1,
                 "rerank_score": round(reranks[k], 4), "rerank_rank": order.index(k) + 1,
                 "selected": order.index(k) < 3}
        if with_text:
            chunk["text"] = doc["texts"][part]
        chunks.append(chunk)
    top = chunks[order[0]]
    r = rng.random()
    status = "timeout" if r < 0.02 else "error" if r < 0.025 else "ok"
    fallback = status == "ok" and r < 0.045
    cited = status == "ok" and not fallback and rng.random() > 0.03
    text = docs[top["doc_id"]]["texts"][int(top["chunk_id"][-1]) - 1] + (f" [{top['chunk_id']}]" if cited else "")
    answer = None if status != "ok" else "Sorry, I could not find this in the documents." if fallback else text
    latency = 30_000.0 if status == "timeout" else round(rng.lognormvariate(7.2, 0.5), 1)
    tokens_in, tokens_out = 150 + rng.randrange(400), 20 + rng.randrange(120)
    trace = {
        "trace_id": f"tr-{day:02d}-{index:07d}", "request_id": f"req-{day:02d}-{index:07d}",
        "session_id": (sid := f"s-{day:02d}-{session:06d}"), "conversation_id": sid,
        "service": service, "user_id": f"u-{session % 5000}", "turn_id": turn + 1,
        "timestamp": when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z",
        "environment": "production", "rag_version": "rag-v12", "prompt_version": "qa-v4" if day >= 8 else "qa-v3",
        "model_name": "gpt-4o-mini", "response_model": "gpt-4o-mini-2024-07-18", "provider": "openai",
        "embedding_model": "e5-small", "reranker_model": "bge-reranker-base",
        "index_version": "kb-2026-11-08" if day >= 7 else "kb-2026-10-01", "chunking_version": "chunk-v2",
        "retrieval_config_version": "ret-v3", "original_query": query, "rewritten_query": None,
        "chunks": chunks, "answer": answer, "citations": [top["chunk_id"]] if cited else [],
        "temperature": 0.0, "input_tokens": tokens_in, "output_tokens": tokens_out,
        "finish_reason": "stop" if status == "ok" else None, "status": status,
        "error": {"timeout": "generation timed out after 30 s", "error": "upstream 503"}.get(status),
        "is_fallback": fallback, "latency_ms": latency,
        "cost_usd": round((tokens_in * 0.15 + tokens_out * 0.6) / 1e6, 7),
        "spans": [{"name": name, "kind": name, "duration_ms": round(latency * share, 1), "status": "ok"}
                  for name, share in (("retrieval", 0.15), ("rerank", 0.1), ("generation", 0.75))],
        "tenant": tenant, "query_type": intent["query_type"], "risk_level": intent["risk_level"]}
    if rng.random() < (0.15 if not right else 0.02):
        trace["feedback"] = {"rating": "negative", "category": rng.choice(CATEGORIES)}
    elif rng.random() < 0.02:
        trace["feedback"] = {"rating": "positive"}
    if rng.random() < 0.5:  # the other half: identified at ingestion
        trace["language"] = intent["language"]
    return trace


def ensure_traffic(workdir: Path, size: int, data: Path) -> tuple[Path, dict]:
    """Days 1..15 of `size`/14 traces each under workdir/traces-SIZE (written once), the KB under workdir/kb."""
    folder = workdir / f"traces-{size}"
    manifest = folder / "manifest.json"
    if manifest.exists():
        return folder, json.loads(manifest.read_text())
    intents = load_intents(data)
    docs = knowledge_base(intents, workdir / "kb" / "documents.jsonl")
    folder.mkdir(parents=True, exist_ok=True)
    started, seen, counts = time.perf_counter(), defaultdict(set), []
    for day in range(DAYS + 1):
        traces = day_traces(day, size // DAYS, intents, docs, seed=size)
        with open(folder / f"{(START + timedelta(days=day)):%Y-%m-%d}.jsonl", "w", encoding="utf-8") as out:
            for trace in traces:
                seen[day].add(trace["original_query"])
                out.write(json.dumps(trace, ensure_ascii=False, separators=(",", ":")) + "\n")
        counts.append(len(traces))
    fourteen = set().union(*(seen[d] for d in range(DAYS)))
    info = {"traces": sum(counts[:DAYS]), "day_15": counts[DAYS], "distinct_queries": len(fourteen),
            "distinct_with_day_15": len(fourteen | seen[DAYS]), "new_on_day_15": len(seen[DAYS] - fourteen),
            "written_seconds": round(time.perf_counter() - started, 1)}
    manifest.write_text(json.dumps(info))
    return folder, info


# ---------------------------------------------------------------- one run, in a child process

def cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def child(home: Path, baseline_glob: str) -> None:
    """Run rag_loop_job in this process, then the bare read_json; write the figures to home."""
    sys.path.insert(0, str(ROOT))
    import duckdb
    from dagster import DagsterEventType, DagsterInstance
    from dagster._core.utils import make_new_run_id

    from rag_loop_dagster.definitions import defs
    job, instance, marks = defs.resolve_job_def("rag_loop_job"), DagsterInstance.get(), {}
    kinds = {DagsterEventType.STEP_START: 0, DagsterEventType.STEP_SUCCESS: 1, DagsterEventType.STEP_FAILURE: 1}

    def listen(event) -> None:
        if event.is_dagster_event and event.dagster_event_type in kinds:
            marks.setdefault(event.step_key, [None, None])[kinds[event.dagster_event_type]] = (
                time.perf_counter(), cpu_seconds())
    instance.add_event_listener(run_id := make_new_run_id(), listen)
    started, cpu0 = time.perf_counter(), cpu_seconds()
    result = job.execute_in_process(instance=instance, run_id=run_id, raise_on_error=False)
    wall, cpu = time.perf_counter() - started, cpu_seconds() - cpu0
    rss = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    steps = [(key, end[0] - begin[0], end[1] - begin[1]) for key, (begin, end) in marks.items() if begin and end]
    with duckdb.connect(str(home / "bare.duckdb")) as con:  # the baseline, after the run
        begin, begin_cpu = time.perf_counter(), cpu_seconds()
        con.execute(f"CREATE OR REPLACE TABLE bare AS SELECT * FROM read_json('{baseline_glob}')")
        bare, bare_cpu = time.perf_counter() - begin, cpu_seconds() - begin_cpu
    (home / "figures.json").write_text(json.dumps({
        "success": result.success, "steps": steps, "wall": wall, "cpu": cpu, "rss_mb": rss / 1024,
        "startup": started - START_CLOCK, "bare": bare, "bare_cpu": bare_cpu}))


def run_child(home: Path, traces: Path, kb: Path, baseline_glob: str) -> dict:
    env = {**os.environ, "RAG_LOOP_HOME": str(home), "DAGSTER_HOME": str(home / "dagster"),
           "RAG_LOOP_TRACES_DIR": str(traces), "RAG_LOOP_KB_DIR": str(kb), "RAG_LOOP_LANGUAGES": "en,vi",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "DEEPEVAL_TELEMETRY_OPT_OUT": "1",
           "DEEPEVAL_DISABLE_DOTENV": "1"}
    (home / "dagster").mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "deploy/dagster.yaml", home / "dagster")
    load, started = os.getloadavg(), time.perf_counter()
    with open(home / "run.log", "ab") as log:
        proc = subprocess.Popen([sys.executable, __file__, "--child", str(home), baseline_glob],
                                env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
    if proc.returncode:
        sys.exit(f"the run failed ({proc.returncode}): see {home / 'run.log'}")
    figures = json.loads((home / "figures.json").read_text())
    return {**figures, "process_wall": time.perf_counter() - started, "load": (load, os.getloadavg()),
            "process_cpu": usage.ru_utime + usage.ru_stime, "process_rss_mb": usage.ru_maxrss / 1024}


# ---------------------------------------------------------------- report

def report(title: str, run: dict) -> None:
    (l1, *_), (l2, *_) = run["load"]
    print(f"\n### {title}: {'SUCCESS' if run['success'] else 'FAILURE'}; load average (1 min) {l1:.2f} -> {l2:.2f}")
    print("| step | wall s | CPU s |\n|:--|--:|--:|")
    for key, wall, cpu in run["steps"]:
        print(f"| {key} | {wall:.2f} | {cpu:.2f} |")
    print(f"| **run** (execute_in_process) | **{run['wall']:.2f}** | **{run['cpu']:.2f}** |")
    print(f"\nrun: peak RSS {run['rss_mb']:,.0f} MB (the process and its children); whole child process "
          f"(imports {run['startup']:.1f} s, run, baseline): {run['process_wall']:.1f} s wall, "
          f"{run['process_cpu']:.1f} s CPU, peak RSS {run['process_rss_mb']:,.0f} MB")
    print(f"baseline, bare read_json of the same files in the same process: {run['bare']:.2f} s wall, "
          f"{run['bare_cpu']:.2f} s CPU; the run is {run['wall'] / run['bare']:.0f}x the baseline")


def exponents(sizes: list[int], runs: list[dict]) -> None:
    (n1, n2), (a, b) = sizes, runs
    slope = lambda t1, t2: math.log(t2 / t1) / math.log(n2 / n1) if min(t1, t2) > 0 else float("nan")  # noqa: E731
    second = {key: (wall, cpu) for key, wall, cpu in b["steps"]}
    print(f"\n### scaling {n1:,} -> {n2:,} traces (exponent: log(t2/t1)/log(n2/n1); 1 = linear)")
    print(f"| step | wall s @{n1:,} | wall s @{n2:,} | wall exp. | CPU s @{n1:,} | CPU s @{n2:,} | CPU exp. |")
    print("|:--|--:|--:|--:|--:|--:|--:|")
    rows = [(key, wall, cpu, *second[key]) for key, wall, cpu in a["steps"] if key in second]
    rows += [("**run**", a["wall"], a["cpu"], b["wall"], b["cpu"]), ("baseline read_json", a["bare"],
             a["bare_cpu"], b["bare"], b["bare_cpu"])]
    for key, w1, c1, w2, c2 in rows:
        print(f"| {key} | {w1:.2f} | {w2:.2f} | {slope(w1, w2):.2f} | {c1:.2f} | {c2:.2f} | {slope(c1, c2):.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000", help="Two trace counts (14 days each).")
    parser.add_argument("--incremental", action="store_true", help="Then time one more day's run.")
    parser.add_argument("--workdir", type=Path, default=ROOT / "bench/out/loop")
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared/data")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(Path(args.child[0]), args.child[1])
    sizes, runs = [int(s) for s in args.sizes.split(",")], []
    workdir = args.workdir.resolve()
    for size in sizes:
        source, info = ensure_traffic(workdir, size, args.data)
        home = workdir / f"home-{size}"
        shutil.rmtree(home, ignore_errors=True)
        (home / "traces").mkdir(parents=True)
        days = sorted(source.glob("*.jsonl"))
        for path in days[:DAYS]:
            os.link(path, home / "traces" / path.name)
        print(f"\n## {info['traces']:,} traces over {DAYS} days, {info['distinct_queries']:,} distinct queries "
              f"(files written in {info['written_seconds']} s, reused afterwards)")
        runs.append(run_child(home, home / "traces", workdir / "kb", str(home / "traces" / "*.jsonl")))
        report(f"rag_loop_job, {info['traces']:,} traces, fresh home", runs[-1])
        if args.incremental:
            os.link(days[DAYS], home / "traces" / days[DAYS].name)
            more = run_child(home, home / "traces", workdir / "kb", str(home / "traces" / days[DAYS].name))
            report(f"incremental day: +{info['day_15']:,} traces ({info['new_on_day_15']:,} queries never seen "
                   f"before; {info['distinct_with_day_15']:,} distinct over 15 days)", more)
    if len(runs) == 2:
        exponents(sizes, runs)


START_CLOCK = time.perf_counter()
if __name__ == "__main__":
    main()
