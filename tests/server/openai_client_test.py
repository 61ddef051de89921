"""openai-python (the client users already have) against the server, via fake_openai_server.

Usage: openai_client_test.py PATH_TO_fake_openai_server   (run from the repository root)
Without the openai package it exits 77 (ctest's skip code), except under CI=true, where a
missing tool is a failure (tests/requirements.txt installs it into build/venv).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import unittest

# Run by whatever Python ctest found; switch to the project's interpreter (LONGSERVE_PYTHON,
# default build/venv/bin/python), where tests/requirements.txt is installed.
_PROJECT_PYTHON = os.environ.get("LONGSERVE_PYTHON") or os.environ.get("LONGSERVE_TEST_PYTHON")
if _PROJECT_PYTHON and os.path.exists(_PROJECT_PYTHON) and not os.environ.get("LONGSERVE_TEST_REEXEC"):
    os.environ["LONGSERVE_TEST_REEXEC"] = "1"
    os.execv(_PROJECT_PYTHON, [_PROJECT_PYTHON, *sys.argv])

try:
    import openai
except ImportError:  # pragma: no cover - depends on the machine
    if os.environ.get("CI") == "true":
        print(f"openai is not installed for {sys.executable} (CI=true: a missing tool fails); "
              "scripts/setup.sh test installs tests/requirements.txt into build/venv")
        sys.exit(1)
    print(f"openai is not installed for {sys.executable}; skipping "
          "(scripts/setup.sh test installs tests/requirements.txt into build/venv)")
    sys.exit(77)

SERVER_BINARY = ""
with open("tests/fixtures/server/expected.json", encoding="utf-8") as f:
    EXPECTED = json.load(f)


class OpenAIClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.proc = subprocess.Popen([SERVER_BINARY], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    text=True)
        line = []
        while not line or line[0] != "PORT":
            text = cls.proc.stdout.readline()
            if not text:
                break
            line = text.split()
        if len(line) != 2 or line[0] != "PORT":
            cls.proc.kill()
            raise RuntimeError(f"server did not report its port: {line}")
        cls.client = openai.OpenAI(base_url=f"http://127.0.0.1:{line[1]}/v1", api_key="unused",
                                   max_retries=0, timeout=30)

    @classmethod
    def tearDownClass(cls) -> None:
        # Close the client's keep-alive connections first: the server's stop() waits for idle
        # connections to time out otherwise.
        cls.client.close()
        cls.proc.stdin.close()
        cls.proc.wait(timeout=30)

    def test_models(self) -> None:
        models = self.client.models.list()
        self.assertEqual([m.id for m in models.data], ["fake-model"])

    def test_completion(self) -> None:
        case = EXPECTED["completions"][0]
        out = self.client.completions.create(model="fake-model", prompt=case["prompt"],
                                             max_tokens=12, temperature=0)
        self.assertEqual(out.choices[0].text, case["choices"][0]["text"])
        self.assertEqual(out.choices[0].finish_reason, "length")
        self.assertEqual(out.usage.prompt_tokens, len(case["prompt_ids"]))
        self.assertEqual(out.usage.completion_tokens, 12)

    def test_completion_stream_with_usage(self) -> None:
        case = EXPECTED["completions"][1]
        stream = self.client.completions.create(
            model="fake-model", prompt=case["prompt"], max_tokens=12, stream=True,
            stream_options={"include_usage": True})
        text, usage, finish = "", None, None
        for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].text
                finish = chunk.choices[0].finish_reason or finish
            if chunk.usage:
                usage = chunk.usage
        self.assertEqual(text, case["choices"][0]["text"])
        self.assertEqual(finish, "length")
        self.assertEqual(usage.completion_tokens, 12)

    def test_chat_stream(self) -> None:
        case = EXPECTED["chat"][0]
        stream = self.client.chat.completions.create(
            model="fake-model", messages=case["messages"], max_tokens=5, stream=True,
            stream_options={"include_usage": True})
        roles, text, usage = [], "", None
        for chunk in stream:
            if chunk.choices:
                delta = chunk.choices[0].delta
                if delta.role:
                    roles.append(delta.role)
                text += delta.content or ""
            if chunk.usage:
                usage = chunk.usage
        expected = "".join(EXPECTED["token_texts"][str(t)] for t in case["ids"][:5])
        self.assertEqual(roles, ["assistant"])
        self.assertEqual(text, expected)
        self.assertEqual(usage.prompt_tokens, len(case["ids"]))

    def test_chat_logprobs(self) -> None:
        case = EXPECTED["chat"][1]
        out = self.client.chat.completions.create(
            model="fake-model", messages=case["messages"], max_tokens=3, logprobs=True,
            top_logprobs=2)
        content = out.choices[0].logprobs.content
        self.assertEqual([c.token for c in content],
                         [EXPECTED["token_strings"][str(t)] for t in case["ids"][:3]])
        self.assertEqual(len(content[0].top_logprobs), 2)

    def test_errors(self) -> None:
        with self.assertRaises(openai.NotFoundError):
            self.client.completions.create(model="other-model", prompt="Paris", max_tokens=2)
        with self.assertRaises(openai.BadRequestError) as ctx:
            self.client.completions.create(model="fake-model", prompt=[42] * 300, max_tokens=2)
        self.assertIn("This model's maximum context length is 256 tokens.", str(ctx.exception))
        # Still serving.
        out = self.client.completions.create(model="fake-model", prompt="Paris", max_tokens=2)
        self.assertEqual(out.usage.completion_tokens, 2)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    SERVER_BINARY = sys.argv.pop(1)
    unittest.main(verbosity=2)
