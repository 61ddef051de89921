"""openai-python against the real `longserve serve` on the bundled model: the API past plain
text (issue 25): prompt logprobs, vLLM's message handling, the parameters, the routes, the
Responses API and the metrics. References are independent of the server: `longserve score`
(the engine's logits computed outside the scheduler) for every logprob, and the server's own
greedy answers to equivalent plain requests for the behaviour of each parameter.

Usage: openai_api_test.py PATH_TO_longserve   (run from the repository root)
Without the openai package it exits 77 (ctest's skip code), except under CI=true, where a
missing tool is a failure (tests/requirements.txt installs it into build/venv).
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import subprocess
import sys
import time
import unittest
import urllib.request

_PROJECT_PYTHON = os.environ.get("LONGSERVE_PYTHON") or os.environ.get("LONGSERVE_TEST_PYTHON")
if _PROJECT_PYTHON and os.path.exists(_PROJECT_PYTHON) and not os.environ.get("LONGSERVE_TEST_REEXEC"):
    os.environ["LONGSERVE_TEST_REEXEC"] = "1"
    os.execv(_PROJECT_PYTHON, [_PROJECT_PYTHON, *sys.argv])

try:
    import openai
except ImportError:  # pragma: no cover - depends on the machine
    if os.environ.get("CI") == "true":
        print(f"openai is not installed for {sys.executable} (CI=true: a missing tool fails)")
        sys.exit(1)
    print(f"openai is not installed for {sys.executable}; skipping")
    sys.exit(77)

BINARY = ""
PROMPT = "The special magic number for bright-lantern is 4829137. The special magic number for"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def score(text: str | None = None, ids: list[int] | None = None) -> dict:
    """`longserve score`: the engine's logprob of every token given the ones before it."""
    # f32 K/V on both sides (the CPU default is bf16 pages): the logprobs are compared at 1e-4,
    # and a batch's last-bit difference in K can round to another bf16 value.
    args = [BINARY, "score", "--kv-cache-dtype", "f32"]
    args += ["--prompt", text] if text is not None else ["--ids", ",".join(map(str, ids))]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


class ApiTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.port = free_port()
        cls.proc = subprocess.Popen([BINARY, "serve", "--port", str(cls.port),
                                     "--served-model-name", "tiny", "--kv-cache-dtype", "f32"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        cls.base = f"http://127.0.0.1:{cls.port}"
        deadline = time.time() + 60
        while True:
            try:
                with urllib.request.urlopen(cls.base + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.time() > deadline or cls.proc.poll() is not None:
                cls.proc.kill()
                raise RuntimeError("the server did not start")
            time.sleep(0.2)
        cls.client = openai.OpenAI(base_url=cls.base + "/v1", api_key="unused", max_retries=0,
                                   timeout=60)
        cls.tokenizer_info = cls.get_json("/tokenizer_info")
        vocab = cls.tokenizer_info["tokenizer_json"]["added_tokens"]
        cls.eos_text = cls.tokenizer_info.get("eos_token")
        cls.special_ids = {t["content"]: t["id"] for t in vocab if t.get("special")}

    @classmethod
    def tearDownClass(cls) -> None:
        cls.client.close()
        cls.proc.terminate()
        cls.proc.wait(timeout=30)

    @classmethod
    def get_json(cls, path: str) -> dict:
        with urllib.request.urlopen(cls.base + path, timeout=30) as r:
            return json.loads(r.read())

    def post_json(self, path: str, body: dict) -> tuple[int, dict]:
        req = urllib.request.Request(self.base + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def tokenize(self, **body) -> list[int]:
        status, out = self.post_json("/tokenize", {"model": "tiny", **body})
        self.assertEqual(status, 200, out)
        return out["tokens"]

    def greedy_ids(self, prompt, n_tokens: int, **extra) -> list[int]:
        out = self.client.completions.create(model="tiny", prompt=prompt, max_tokens=n_tokens,
                                             temperature=0, logprobs=0, extra_body=extra)
        return out

    # ---- item 1: prompt logprobs --------------------------------------------------------
    def test_echo_logprobs_max_tokens_zero_equals_score(self) -> None:
        # lm-eval's loglikelihood request shape.
        ref = score(PROMPT)
        out = self.client.completions.create(model="tiny", prompt=PROMPT, max_tokens=0,
                                             echo=True, logprobs=1, temperature=0)
        choice = out.choices[0]
        self.assertEqual(choice.text, PROMPT)
        lp = choice.logprobs
        self.assertEqual(len(lp.tokens), ref["num_tokens"])
        self.assertIsNone(lp.token_logprobs[0])
        self.assertIsNone(lp.top_logprobs[0])
        for got, want in zip(lp.token_logprobs[1:], ref["next_token_logprobs"]):
            self.assertAlmostEqual(got, want, delta=1e-4)
        # text_offset: cumulative lengths of the token strings, as vLLM computes it.
        offsets = [0]
        for tok in lp.tokens[:-1]:
            offsets.append(offsets[-1] + len(tok))
        self.assertEqual(lp.text_offset, offsets)
        self.assertEqual(choice.finish_reason, "length")

    def test_echo_logprobs_with_generation(self) -> None:
        ref = score(PROMPT)
        plain = self.greedy_ids(PROMPT, 3)
        out = self.client.completions.create(model="tiny", prompt=PROMPT, max_tokens=3,
                                             echo=True, logprobs=2, temperature=0)
        lp = out.choices[0].logprobs
        n = ref["num_tokens"]
        self.assertEqual(out.choices[0].text, PROMPT + plain.choices[0].text)
        self.assertEqual(len(lp.tokens), n + 3)
        self.assertEqual(lp.tokens[n:], plain.choices[0].logprobs.tokens)
        for got, want in zip(lp.token_logprobs[1:n], ref["next_token_logprobs"]):
            self.assertAlmostEqual(got, want, delta=1e-4)
        # Each prompt position lists its token and at most 2 alternatives.
        for step in lp.top_logprobs[1:n]:
            self.assertTrue(1 <= len(step) <= 3)

    def test_echo_logprobs_stream(self) -> None:
        ref = score(PROMPT)
        stream = self.client.completions.create(model="tiny", prompt=PROMPT, max_tokens=2,
                                                echo=True, logprobs=1, temperature=0, stream=True)
        text, token_logprobs = "", []
        for chunk in stream:
            text += chunk.choices[0].text
            if chunk.choices[0].logprobs is not None:
                token_logprobs += chunk.choices[0].logprobs.token_logprobs
        self.assertTrue(text.startswith(PROMPT))
        self.assertIsNone(token_logprobs[0])
        n = ref["num_tokens"]
        self.assertEqual(len(token_logprobs), n + 2)
        for got, want in zip(token_logprobs[1:n], ref["next_token_logprobs"]):
            self.assertAlmostEqual(got, want, delta=1e-4)

    def test_prompt_logprobs_field(self) -> None:
        ref = score(PROMPT)
        ids = ref["token_ids"]
        out = self.client.completions.create(model="tiny", prompt=PROMPT, max_tokens=1,
                                             temperature=0, extra_body={"prompt_logprobs": 2})
        plp = out.model_extra.get("prompt_logprobs") or out.choices[0].model_extra["prompt_logprobs"]
        self.assertIsNone(plp[0])
        self.assertEqual(len(plp), len(ids))
        for i, entry in enumerate(plp[1:], start=1):
            own = entry[str(ids[i])]
            self.assertAlmostEqual(own["logprob"], ref["next_token_logprobs"][i - 1], delta=1e-4)
            ranked = sorted(entry.values(), key=lambda e: e["rank"])
            best = max(e["logprob"] for e in entry.values())
            self.assertEqual(ranked[0]["rank"], 1)
            self.assertAlmostEqual(ranked[0]["logprob"], best, delta=1e-6)
            self.assertEqual(own["rank"] == 1, own["logprob"] >= best - 1e-6)
            self.assertLessEqual(len(entry), 3)

    def test_chat_prompt_logprobs(self) -> None:
        messages = [{"role": "user", "content": "Hello there"}]
        ids = self.tokenize(messages=messages)
        ref = score(ids=ids)
        out = self.client.chat.completions.create(model="tiny", messages=messages, max_tokens=1,
                                                  temperature=0,
                                                  extra_body={"prompt_logprobs": 0})
        plp = out.model_extra["prompt_logprobs"]
        self.assertEqual(len(plp), len(ids))
        for i, entry in enumerate(plp[1:], start=1):
            self.assertAlmostEqual(entry[str(ids[i])]["logprob"],
                                   ref["next_token_logprobs"][i - 1], delta=1e-4)

    def test_prompt_logprobs_refused_when_streaming(self) -> None:
        with self.assertRaises(openai.BadRequestError):
            self.client.completions.create(model="tiny", prompt=PROMPT, max_tokens=1,
                                           stream=True, extra_body={"prompt_logprobs": 1})

    def test_long_prompt_logprobs_in_chunks(self) -> None:
        # Longer than one step's logit rows: prefill runs in capped chunks and still gives every
        # position, equal to score's.
        text = " ".join(f"word{i}" for i in range(500))
        ref = score(text)
        out = self.client.completions.create(model="tiny", prompt=text, max_tokens=0, echo=True,
                                             logprobs=0, temperature=0)
        got = out.choices[0].logprobs.token_logprobs
        self.assertEqual(len(got), ref["num_tokens"])
        for g, w in zip(got[1:], ref["next_token_logprobs"]):
            self.assertAlmostEqual(g, w, delta=1e-3)

    def test_lm_eval_loglikelihood_request_shape(self) -> None:
        # lm-evaluation-harness 0.4.x local-completions: contexts and continuations are encoded
        # as one string and split at the context's length (_encode_pair), a batch of token-id
        # prompts is sent with echo, max_tokens 1, logprobs 1, temperature 0 and seed 1234, and
        # each choice's token_logprobs[ctxlen:-1] are summed (parse_logprobs). The sums must
        # equal `longserve score` over the same ids.
        with open("tests/fixtures/server/mc_tiny.jsonl", encoding="utf-8") as f:
            docs = [json.loads(line) for line in f if line.strip()]
        prompts, ctxlens = [], []
        for doc in docs:
            context_ids = self.tokenize(prompt=doc["context"])
            for choice in doc["choices"]:
                whole = self.tokenize(prompt=doc["context"] + choice)
                self.assertEqual(whole[:len(context_ids)], context_ids)
                prompts.append(whole)
                ctxlens.append(len(context_ids))
        status, out = self.post_json("/v1/completions", {
            "model": "tiny", "prompt": prompts, "temperature": 0, "max_tokens": 1,
            "logprobs": 1, "seed": 1234, "echo": True})
        self.assertEqual(status, 200, out)
        choices = sorted(out["choices"], key=lambda c: c["index"])
        self.assertEqual(len(choices), len(prompts))
        for ids, ctxlen, choice in zip(prompts, ctxlens, choices):
            token_logprobs = choice["logprobs"]["token_logprobs"]
            self.assertEqual(len(token_logprobs), len(ids) + 1)
            got = sum(token_logprobs[ctxlen:-1])
            ref = score(ids=ids)["next_token_logprobs"]
            self.assertAlmostEqual(got, sum(ref[ctxlen - 1:]), delta=1e-3)
            # is_greedy as lm-eval computes it: every continuation token is its top-1.
            tokens = choice["logprobs"]["tokens"][ctxlen:-1]
            tops = choice["logprobs"]["top_logprobs"][ctxlen:-1]
            for tok, top in zip(tokens, tops):
                self.assertIn(tok, top)

    # ---- item 5: parameters -------------------------------------------------------------
    def test_logit_bias(self) -> None:
        base = self.greedy_ids(PROMPT, 1)
        first = base.choices[0].logprobs.tokens[0]
        first_id = self.tokenize(prompt=first, add_special_tokens=False)
        self.assertEqual(len(first_id), 1)
        banned = self.client.completions.create(model="tiny", prompt=PROMPT, max_tokens=1,
                                                temperature=0, logprobs=0,
                                                logit_bias={str(first_id[0]): -100})
        self.assertNotEqual(banned.choices[0].logprobs.tokens[0], first)
        forced_id = self.tokenize(prompt=" banana", add_special_tokens=False)[0]
        forced = self.client.completions.create(model="tiny", prompt=PROMPT, max_tokens=3,
                                                temperature=0.9, seed=3,
                                                logit_bias={str(forced_id): 100})
        self.assertEqual(self.tokenize(prompt=forced.choices[0].text, add_special_tokens=False),
                         [forced_id] * 3)
        with self.assertRaises(openai.BadRequestError):
            self.client.completions.create(model="tiny", prompt=PROMPT, max_tokens=1,
                                           logit_bias={"99999999": 5})

    def test_min_tokens_and_ignore_eos(self) -> None:
        eos_id = self.tokenize(prompt=self.eos_text, add_special_tokens=False)[0]
        bias = {str(eos_id): 100}
        stop_now = self.client.completions.create(model="tiny", prompt=PROMPT, max_tokens=8,
                                                  temperature=0, logit_bias=bias)
        self.assertEqual(stop_now.choices[0].finish_reason, "stop")
        self.assertEqual(stop_now.usage.completion_tokens, 1)
        later = self.client.completions.create(model="tiny", prompt=PROMPT, max_tokens=8,
                                               temperature=0, logit_bias=bias,
                                               extra_body={"min_tokens": 3})
        self.assertEqual(later.choices[0].finish_reason, "stop")
        self.assertEqual(later.usage.completion_tokens, 4)
        never = self.client.completions.create(model="tiny", prompt=PROMPT, max_tokens=5,
                                               temperature=0, logit_bias=bias,
                                               extra_body={"ignore_eos": True})
        self.assertEqual(never.choices[0].finish_reason, "length")
        self.assertEqual(never.usage.completion_tokens, 5)

    def test_skip_special_tokens(self) -> None:
        name, special = next((n, i) for n, i in self.special_ids.items() if n != self.eos_text)
        bias = {str(special): 100}
        shown = self.client.completions.create(model="tiny", prompt=PROMPT, max_tokens=2,
                                               temperature=0, logit_bias=bias,
                                               extra_body={"skip_special_tokens": False})
        self.assertEqual(shown.choices[0].text, name * 2)
        hidden = self.client.completions.create(model="tiny", prompt=PROMPT, max_tokens=2,
                                                temperature=0, logit_bias=bias)
        self.assertEqual(hidden.choices[0].text, "")
        # spaces_between_special_tokens: true is what the decode does; false is refused while
        # special tokens are shown.
        with self.assertRaises(openai.BadRequestError):
            self.client.completions.create(
                model="tiny", prompt=PROMPT, max_tokens=2,
                extra_body={"skip_special_tokens": False, "spaces_between_special_tokens": False})

    def test_best_of_refused_unless_n(self) -> None:
        with self.assertRaises(openai.BadRequestError):
            self.client.completions.create(model="tiny", prompt=PROMPT, max_tokens=1, best_of=2)
        ok = self.client.completions.create(model="tiny", prompt=PROMPT, max_tokens=1, n=2,
                                            best_of=2)
        self.assertEqual(len(ok.choices), 2)

    def test_truncate_prompt_tokens(self) -> None:
        ids = self.tokenize(prompt=PROMPT)
        out = self.client.completions.create(model="tiny", prompt=PROMPT, max_tokens=4,
                                             temperature=0,
                                             extra_body={"truncate_prompt_tokens": 5})
        self.assertEqual(out.usage.prompt_tokens, 5)
        same = self.client.completions.create(model="tiny", prompt=ids[-5:], max_tokens=4,
                                              temperature=0)
        self.assertEqual(out.choices[0].text, same.choices[0].text)
        with self.assertRaises(openai.BadRequestError):
            self.client.completions.create(model="tiny", prompt=PROMPT, max_tokens=1,
                                           extra_body={"truncate_prompt_tokens": 10**9})

    # ---- items 2 (message history) and 4: messages as vLLM prepares them ----------------
    def test_developer_role_is_system_for_this_template(self) -> None:
        sys_ids = self.tokenize(messages=[{"role": "system", "content": "Be brief."},
                                          {"role": "user", "content": "Hi"}])
        dev_ids = self.tokenize(messages=[{"role": "developer", "content": "Be brief."},
                                          {"role": "user", "content": "Hi"}])
        self.assertEqual(dev_ids, sys_ids)

    def test_content_parts_join_for_a_string_template(self) -> None:
        parts = self.tokenize(messages=[{"role": "user", "content": [
            {"type": "text", "text": "Hello"}, {"type": "text", "text": "world"}]}])
        joined = self.tokenize(messages=[{"role": "user", "content": "Hello\nworld"}])
        self.assertEqual(parts, joined)

    def test_tool_call_history(self) -> None:
        messages = [
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"},
        ]
        out = self.client.chat.completions.create(model="tiny", messages=messages, max_tokens=2)
        self.assertEqual(out.choices[0].finish_reason, "length")
        with self.assertRaises(openai.BadRequestError):
            bad = [dict(m) for m in messages]
            bad[1] = {**bad[1], "tool_calls": [{"id": "c", "type": "function", "function": {
                "name": "f", "arguments": "{not json"}}]}
            self.client.chat.completions.create(model="tiny", messages=bad, max_tokens=1)

    def test_continue_final_message(self) -> None:
        messages = [{"role": "user", "content": "Name a colour."},
                    {"role": "assistant", "content": "My favourite colour is"}]
        cont = self.tokenize(messages=messages, add_generation_prompt=False,
                             continue_final_message=True)
        full = self.tokenize(messages=messages, add_generation_prompt=False)
        tail = self.tokenize(prompt="My favourite colour is", add_special_tokens=False)
        self.assertEqual(cont[-len(tail):], tail)
        self.assertEqual(full[:len(cont)], cont)
        self.assertLess(len(cont), len(full))  # the end-of-turn tokens are cut
        status, _ = self.post_json("/v1/chat/completions", {
            "messages": messages, "continue_final_message": True, "max_tokens": 1})
        self.assertEqual(status, 400)  # add_generation_prompt defaults to true

    # ---- item 6: routes -----------------------------------------------------------------
    def test_small_routes(self) -> None:
        self.assertRegex(self.get_json("/version")["version"], r"^\d+\.\d+\.\d+")
        with urllib.request.urlopen(self.base + "/ping") as r:
            self.assertEqual(r.status, 200)
        with urllib.request.urlopen(urllib.request.Request(self.base + "/ping", data=b"",
                                                           method="POST")) as r:
            self.assertEqual(r.status, 200)
        self.assertEqual(self.get_json("/load")["server_load"], 0)
        info = self.tokenizer_info
        self.assertEqual(info["tokenizer_class"], "PreTrainedTokenizerFast")
        self.assertIn("model", info["tokenizer_json"])

    def test_responses_api(self) -> None:
        chat = self.client.chat.completions.create(
            model="tiny", messages=[{"role": "system", "content": "Be brief."},
                                    {"role": "user", "content": "Say hello"}],
            max_tokens=6, temperature=0)
        resp = self.client.responses.create(model="tiny", instructions="Be brief.",
                                            input="Say hello", max_output_tokens=6,
                                            temperature=0)
        self.assertEqual(resp.output_text, chat.choices[0].message.content)
        self.assertEqual(resp.usage.input_tokens, chat.usage.prompt_tokens)
        self.assertEqual(resp.usage.output_tokens, chat.usage.completion_tokens)
        expected_status = "incomplete" if chat.choices[0].finish_reason == "length" else "completed"
        self.assertEqual(resp.status, expected_status)

        events = list(self.client.responses.create(model="tiny", instructions="Be brief.",
                                                   input=[{"role": "user", "content": [
                                                       {"type": "input_text",
                                                        "text": "Say hello"}]}],
                                                   max_output_tokens=6, temperature=0,
                                                   stream=True))
        types = [e.type for e in events]
        self.assertEqual(types[:4], ["response.created", "response.in_progress",
                                     "response.output_item.added",
                                     "response.content_part.added"])
        self.assertEqual(types[-4:], ["response.output_text.done", "response.content_part.done",
                                      "response.output_item.done",
                                      "response." + expected_status])
        deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        self.assertEqual(deltas, chat.choices[0].message.content)
        self.assertEqual([e.sequence_number for e in events], list(range(len(events))))
        self.assertEqual(events[-1].response.output_text, deltas)

    # ---- item 7: metrics ----------------------------------------------------------------
    def test_metrics_families(self) -> None:
        self.client.completions.create(model="tiny", prompt=PROMPT, max_tokens=3, n=2)
        with urllib.request.urlopen(self.base + "/metrics") as r:
            text = r.read().decode()
        for family in ["request_queue_time_seconds", "request_prefill_time_seconds",
                       "request_decode_time_seconds", "request_inference_time_seconds",
                       "iteration_tokens_total", "request_params_n", "request_params_max_tokens",
                       "request_max_num_generation_tokens", "request_prefill_kv_computed_tokens"]:
            self.assertIn(f"# TYPE vllm:{family} histogram", text)
        self.assertIn("# TYPE vllm:num_requests_waiting_by_reason gauge", text)
        for counter in ["prefix_cache_queries_total", "prefix_cache_hits_total"]:
            self.assertIn(f"# TYPE vllm:{counter} counter", text)
        for reason in ["stop", "length", "abort", "error", "repetition"]:
            self.assertIn(f'finished_reason="{reason}"', text)

        def value(pattern: str) -> float:
            m = re.search(pattern + r"\S* (\S+)\n", text)
            self.assertIsNotNone(m, pattern)
            return float(m.group(1))
        self.assertGreater(value(r"vllm:iteration_tokens_total_count"), 0)
        # The n=2 request falls in the le=2 bucket and not in le=1.
        self.assertGreater(value(r'vllm:request_params_n_bucket\{[^}]*le="2\.0"'),
                           value(r'vllm:request_params_n_bucket\{[^}]*le="1\.0"'))
        self.assertEqual(value(r"vllm:request_queue_time_seconds_count"),
                         value(r"vllm:e2e_request_latency_seconds_count"))


if __name__ == "__main__":
    BINARY = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
