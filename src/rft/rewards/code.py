"""Code rewards: a response's program run on the row's test cases, scored by the share it passes (verl's
``codecontests`` / ``apps`` / ``codeforces`` / ``taco`` data sources).

The program is the response's last ```python block (else its first ``` block without a language line, else the
whole response: `extract_code`); the test cases are the row's ground truth, ``{"inputs": [...], "outputs": [...]}``
(a mapping or its JSON text), each input given on stdin and the output compared with stdout, trailing newlines
dropped. The score is the share of the first `CONTINUOUS_CASES` cases passed (verl's ``continuous=True``, which its
default scorer uses for these sources). Where the program runs:

* `SandboxRunner`: verl's ``reward_model.sandbox_fusion.url``, a SandboxFusion service (its ``run_code`` API: code,
  stdin, run and compile time limits, ``memory_limit_MB``), at most ``max_concurrent`` requests at once over the
  run; a 504 is retried twice (after 1 s, then 2 s), as verl does.
* `LocalRunner`: without a URL (verl's prime_code fallback), a fresh isolated Python process per case on this
  machine, limited to the same time and ``memory_limit_mb`` of address space, in an empty temporary folder. It runs
  what the model wrote with your user's rights: use a sandbox for models you do not trust.

A case the sandbox cannot run (its error, a refused request) fails like a wrong answer and is counted in
``code_sandbox_error``; the parts logged per row are ``code_pass_rate`` and ``code_cases``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CODE_SOURCES = ("codecontests", "apps", "codeforces", "taco")
"""verl's data sources scored by running the response's code (its default_compute_score)."""
CONTINUOUS_CASES = 10
"""The score is the share of the first this many cases passed (verl's continuous score)."""
CASE_SECONDS = 10
"""The time limit of one case, to compile and to run (verl's default)."""
SANDBOX_RETRIES, SANDBOX_API_SECONDS = 3, 10


def extract_code(completion: str) -> str:
    """The program in `completion`: the text of its last ```python block, else of its first ``` block (without a
    language name on its first line), else the whole completion (verl's rule)."""
    if "```python" in completion:
        return completion.split("```python")[-1].split("```")[0]
    if "```" in completion:
        block = completion.split("```")[1]
        first, _, rest = block.partition("\n")
        return rest if rest and first.strip().isalpha() else block
    return completion


def code_cases(ground_truth: Any) -> tuple[list, list]:
    """(inputs, outputs) of a row's ground truth, ``{"inputs": [...], "outputs": [...]}`` or its JSON text; a
    ValueError saying what is wrong with any other."""
    cases = ground_truth
    if isinstance(cases, (str, bytes)):
        try:
            cases = json.loads(cases)
        except json.JSONDecodeError as e:
            raise ValueError(f"a code row's ground truth is JSON test cases ({{\"inputs\": [...], \"outputs\": "
                             f"[...]}}); this one does not parse: {e}") from None
    if not isinstance(cases, dict) or not isinstance(cases.get("inputs"), list) \
            or not isinstance(cases.get("outputs"), list):
        raise ValueError("a code row's ground truth holds its test cases as {\"inputs\": [...], \"outputs\": [...]} "
                         f"(stdin and expected stdout), got {str(ground_truth)[:80]!r}")
    if cases.get("fn_name"):
        raise ValueError(f"test cases that call a function (fn_name={cases['fn_name']!r}) are not run by rft's code "
                         "scorer, only stdin / stdout ones; score them in a custom_reward_function")
    if len(cases["inputs"]) != len(cases["outputs"]):
        raise ValueError(f"a code row's test cases have {len(cases['inputs'])} inputs and {len(cases['outputs'])} "
                         "outputs; they pair one to one")
    return cases["inputs"], cases["outputs"]


@dataclass(frozen=True)
class CaseResult:
    """One case: `passed`, or why not (`status`: wrong_answer, runtime_error, timeout, compile_error,
    sandbox_error)."""

    passed: bool
    status: str
    stdout: str = ""


def judged(stdout: str | None, expected: Any) -> CaseResult:
    """A finished run's verdict: its stdout against the expected output, trailing newlines dropped (verl's)."""
    out = stdout or ""
    same = out.rstrip("\n") == str(expected).rstrip("\n")
    return CaseResult(same, "passed" if same else "wrong_answer", out)


@dataclass
class LocalRunner:
    """Each case in a fresh isolated Python process (`python -I`) in an empty temporary folder, its address space
    limited to `memory_limit_mb` and its time to `seconds`."""

    memory_limit_mb: int = 1024
    seconds: float = CASE_SECONDS

    def run(self, code: str, stdin: str) -> CaseResult:
        limit = self.memory_limit_mb * 1024 * 1024
        # the limit set by the child itself before it runs the program (no preexec_fn: cases run in threads)
        start = (f"import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit})); "
                 "sys.argv = ['main.py']; runpy.run_path('main.py', run_name='__main__')")
        with tempfile.TemporaryDirectory(prefix="rft-code-") as folder:
            Path(folder, "main.py").write_text(code)
            try:
                proc = subprocess.run([sys.executable, "-I", "-c", start], input=stdin, capture_output=True,
                                      text=True, timeout=self.seconds, cwd=folder,
                                      env={"PATH": os.environ.get("PATH", ""), "LANG": "C.UTF-8"})
            except subprocess.TimeoutExpired:
                return CaseResult(False, "timeout")
        if proc.returncode != 0:
            return CaseResult(False, "runtime_error", proc.stdout)
        return CaseResult(True, "finished", proc.stdout)


@dataclass
class SandboxRunner:
    """Each case through a SandboxFusion service's run_code API at `url`; at most `max_concurrent` requests at
    once (over every row of the run: one semaphore per runner)."""

    url: str
    max_concurrent: int = 64
    memory_limit_mb: int = 1024
    seconds: float = CASE_SECONDS
    _slots: threading.Semaphore = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._slots = threading.Semaphore(self.max_concurrent)

    def request(self, code: str, stdin: str) -> dict:
        """The service's JSON answer for one run; RuntimeError where there is none (after the 504 retries)."""
        payload = json.dumps({"compile_timeout": self.seconds, "run_timeout": self.seconds, "code": code,
                              "stdin": stdin, "language": "python", "files": {}, "fetch_files": [],
                              "memory_limit_MB": self.memory_limit_mb}).encode()
        for attempt in range(SANDBOX_RETRIES):
            req = urllib.request.Request(self.url, data=payload, method="POST",
                                         headers={"Content-Type": "application/json", "Accept": "application/json"})
            try:
                with self._slots, urllib.request.urlopen(req, timeout=2 * self.seconds + SANDBOX_API_SECONDS) as r:
                    return json.loads(r.read())
            except urllib.error.HTTPError as e:
                if e.code != 504 or attempt == SANDBOX_RETRIES - 1:
                    raise RuntimeError(f"the sandbox at {self.url} answered HTTP {e.code}") from None
                time.sleep(attempt + 1)  # a gateway timeout: again after 1 s, then 2 s
            except (urllib.error.URLError, OSError, ValueError) as e:
                raise RuntimeError(f"the sandbox at {self.url} could not be asked: {e}") from None
        raise AssertionError("unreachable")

    def run(self, code: str, stdin: str) -> CaseResult:
        try:
            answer = self.request(code, stdin)
        except RuntimeError:
            return CaseResult(False, "sandbox_error")
        status, run = answer.get("status"), answer.get("run_result") or {}
        compiled = answer.get("compile_result") or {}
        if status == "Success" and run.get("status") == "Finished":
            return CaseResult(True, "finished", run.get("stdout") or "")
        if status == "Failed":
            if compiled.get("status") in ("Error", "TimeLimitExceeded") or (
                    compiled.get("status") == "Finished" and compiled.get("return_code") not in (0, None)):
                return CaseResult(False, "compile_error")
            if run.get("status") == "TimeLimitExceeded":
                return CaseResult(False, "timeout")
            if run.get("status") == "Error" or (run.get("status") == "Finished" and run.get("return_code") != 0):
                return CaseResult(False, "runtime_error", run.get("stdout") or "")
        return CaseResult(False, "sandbox_error")  # SandboxError, or a state the API does not document


def run_cases(runner, code: str, inputs: list, outputs: list) -> list[CaseResult]:
    """Every case's result, in order: run side by side (the runner bounds its own concurrency), each finished run
    judged against its expected output."""
    def one(i: int) -> CaseResult:
        result = runner.run(code, str(inputs[i]))
        return judged(result.stdout, outputs[i]) if result.status == "finished" else result

    with ThreadPoolExecutor(max_workers=max(1, min(len(inputs), 8))) as pool:
        return list(pool.map(one, range(len(inputs))))


def code_score(solution_str: str, ground_truth: Any, runner=None) -> dict[str, float]:
    """The share of the first `CONTINUOUS_CASES` test cases the response's program passes, with `runner`
    (default: `LocalRunner`). Returns {"score", "code_pass_rate", "code_cases", "code_sandbox_error"}."""
    inputs, outputs = code_cases(ground_truth)
    inputs, outputs = inputs[:CONTINUOUS_CASES], outputs[:CONTINUOUS_CASES]
    if not inputs:
        return {"score": 0.0, "code_pass_rate": 0.0, "code_cases": 0.0, "code_sandbox_error": 0.0}
    results = run_cases(runner or LocalRunner(), extract_code(solution_str), inputs, outputs)
    rate = sum(r.passed for r in results) / len(results)
    return {"score": rate, "code_pass_rate": rate, "code_cases": float(len(results)),
            "code_sandbox_error": float(sum(r.status == "sandbox_error" for r in results))}


def runner_from_config(sandbox) -> LocalRunner | SandboxRunner:
    """The runner of ``reward_model.sandbox_fusion`` (url, max_concurrent, memory_limit_mb): the service where a
    URL is given, else this machine."""
    if sandbox.url:
        return SandboxRunner(sandbox.url, sandbox.max_concurrent, sandbox.memory_limit_mb)
    return LocalRunner(sandbox.memory_limit_mb)
