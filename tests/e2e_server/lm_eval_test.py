"""lm-evaluation-harness (pinned in tests/requirements-nodeps.txt) against the real
`longserve serve` on the bundled model: the multiple-choice task of lm_eval_task/ (a JSONL file
and its task YAML, read offline) through lm-eval's `local-completions` model, with the server's
own /tokenize and /tokenizer_info as lm-eval's "remote" tokenizer. Every per-choice
loglikelihood lm-eval logs must equal `longserve score` over the same text (the engine's logits
computed outside the server and scheduler), and lm-eval's accuracy must equal the accuracy
those references give.

Usage: lm_eval_test.py PATH_TO_longserve   (run from the repository root)
Without lm_eval it exits 77 (ctest's skip code), except under CI=true, where a missing tool is
a failure (scripts/setup.sh installs it into build/venv).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

_PROJECT_PYTHON = os.environ.get("LONGSERVE_PYTHON") or os.environ.get("LONGSERVE_TEST_PYTHON")
if _PROJECT_PYTHON and os.path.exists(_PROJECT_PYTHON) and not os.environ.get("LONGSERVE_TEST_REEXEC"):
    os.environ["LONGSERVE_TEST_REEXEC"] = "1"
    os.execv(_PROJECT_PYTHON, [_PROJECT_PYTHON, *sys.argv])

# Offline and hermetic: the task's data is the local JSONL file; datasets' cache goes to a
# temporary folder that is removed at the end.
_HF_HOME = tempfile.mkdtemp(prefix="longserve-lm-eval-")
os.environ.update({"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                   "HF_HOME": _HF_HOME, "HF_DATASETS_CACHE": os.path.join(_HF_HOME, "datasets"),
                   "TOKENIZERS_PARALLELISM": "false"})

try:
    import lm_eval
    from lm_eval.tasks import TaskManager
except ImportError as exc:  # pragma: no cover - depends on the machine
    if os.environ.get("CI") == "true":
        print(f"lm_eval cannot be imported by {sys.executable} ({exc}); CI=true: a missing tool fails")
        sys.exit(1)
    print(f"lm_eval cannot be imported by {sys.executable} ({exc}); skipping")
    sys.exit(77)

TASK_DIR = os.path.join("tests", "e2e_server", "lm_eval_task")
TASK = "longserve_tiny_mc"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def score(binary: str, text: str) -> dict:
    """`longserve score` of a text tokenized as lm-eval's remote tokenizer does (no BOS)."""
    out = subprocess.run([binary, "score", "--prompt", text, "--no-special-tokens"], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def reference_loglikelihood(binary: str, context: str, continuation: str) -> float:
    """log P(continuation | context): the continuation's tokens are those of context +
    continuation past the context's own token count (lm-eval's split of the pair)."""
    ctx = score(binary, context)
    whole = score(binary, context + continuation)
    n_ctx = ctx["num_tokens"]
    if whole["token_ids"][:n_ctx] != ctx["token_ids"]:
        raise AssertionError(f"the context's tokens change with the continuation: {context!r}")
    return sum(whole["next_token_logprobs"][n_ctx - 1:])


def start_server(binary: str, port: int) -> subprocess.Popen:
    proc = subprocess.Popen([binary, "serve", "--port", str(port), "--served-model-name", "tiny"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            pass
        if time.time() > deadline or proc.poll() is not None:
            proc.kill()
            raise RuntimeError("the server did not start")
        time.sleep(0.2)


def main() -> int:
    binary = os.path.abspath(sys.argv[1])
    with open(os.path.join(TASK_DIR, "tiny_mc.jsonl"), encoding="utf-8") as f:
        docs = [json.loads(line) for line in f if line.strip()]

    port = free_port()
    proc = start_server(binary, port)
    try:
        results = lm_eval.simple_evaluate(
            model="local-completions",
            model_args={"base_url": f"http://127.0.0.1:{port}/v1/completions", "model": "tiny",
                        "tokenizer_backend": "remote", "num_concurrent": 1, "max_retries": 1,
                        "timeout": 60},
            tasks=[TASK],
            # Only the local task: indexing lm-eval's thousands of built-in task files costs seconds.
            task_manager=TaskManager(include_path=TASK_DIR, include_defaults=False),
            log_samples=True, random_seed=0, numpy_random_seed=0, torch_random_seed=0,
            fewshot_random_seed=0)
    finally:
        proc.terminate()
        proc.wait(timeout=30)

    samples = sorted(results["samples"][TASK], key=lambda s: s["doc_id"])
    assert len(samples) == len(docs), (len(samples), len(docs))
    failures = []
    correct = 0
    for sample, doc in zip(samples, docs):
        assert sample["doc"]["question"] == doc["question"]
        got = [float(resp[0][0]) for resp in sample["resps"]]
        assert len(got) == len(doc["choices"]), sample["resps"]
        want = [reference_loglikelihood(binary, doc["question"], " " + c) for c in doc["choices"]]
        for choice, g, w in zip(doc["choices"], got, want):
            line = f"{doc['question'][-30:]!r} + {choice!r}: lm-eval {g:.5f}, score {w:.5f}"
            print(line)
            if abs(g - w) > 1e-3:
                failures.append(line)
        correct += int(max(range(len(want)), key=want.__getitem__) == doc["answer"])
    acc = results["results"][TASK]["acc,none"]
    print(f"lm-eval acc {acc}, from longserve score {correct / len(docs)}")
    if abs(acc - correct / len(docs)) > 1e-9:
        failures.append(f"acc {acc} != {correct / len(docs)}")
    if failures:
        print("FAILED:\n" + "\n".join(failures))
        return 1
    print(f"OK: {sum(len(d['choices']) for d in docs)} loglikelihoods match `longserve score`")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        import shutil
        shutil.rmtree(_HF_HOME, ignore_errors=True)
