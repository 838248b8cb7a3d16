"""Start-up imports only what the path in hand needs: `rfteval run --help` and importing the run's library entry
point pull none of the heavy packages (the OpenAI SDK with its type modules, pandas, pyarrow, numpy, aiohttp, the
viewer's server, rich), and a run whose models are not behind the SDK never imports the SDK at all (grader configs
are validated by rfteval's own models, not the SDK's grader and eval types).

Each case runs in a fresh interpreter, since this process has long imported everything, and reads its
`sys.modules` at the end; each also checks that the path really ran, so an empty module list cannot pass.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support import REPO

ROOT = REPO

# What none of the light paths may import: the SDK (0.5 s and more of CPU, most of it its type modules), the frame
# and Parquet stack, the transports, the viewer's web server, the terminal renderer.
HEAVY = ("openai", "openai.types.graders", "openai.types.eval_create_params", "pandas", "pyarrow", "numpy", "scipy",
         "aiohttp", "httpx2", "httpcore2", "starlette", "uvicorn", "jinja2", "rich")


def modules_after(code: str, tmp_path: Path) -> tuple[set[str], str]:
    """The modules loaded once `code` has run in a fresh interpreter (this tree first on the path), and its stdout."""
    dump = tmp_path / "modules.json"
    probe = textwrap.dedent(code) + textwrap.dedent(f"""
        import json as _json, sys as _sys
        with open({str(dump)!r}, "w") as _fh:
            _json.dump(sorted(_sys.modules), _fh)
        """)
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return set(json.loads(dump.read_text())), done.stdout


def under(modules: set[str], *packages: str) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in packages))


def test_run_help_imports_only_the_cli(tmp_path: Path) -> None:
    modules, out = modules_after("""
        import sys
        from rfteval.cli.app import main
        sys.argv = ["rfteval", "run", "--help"]
        try:
            main()
        except SystemExit as exc:
            assert exc.code in (0, None), exc.code
        """, tmp_path)
    assert "--dataset" in out and "--concurrency" in out  # the run command's own help was printed
    assert "rfteval.cli.commands.run_cmd" in modules
    assert under(modules, *HEAVY) == []
    # the run itself (its pipeline, graders, providers, the finish) is imported when a run starts, not for its help;
    # the judge flags' defaults are the one JudgeEndpoint value (a dataclass; its package brings the stdlib-only
    # provider protocol with it), and nothing else of providers/
    assert under(modules, "rfteval.run", "rfteval.graders", "rfteval.compare", "rfteval.readiness",
                 "rfteval.stats", "rfteval.report", "rfteval.reward", "rfteval.view", "msgspec") == []
    assert under(modules, "rfteval.providers") == ["rfteval.providers", "rfteval.providers.base",
                                                   "rfteval.providers.endpoint"]


def test_run_library_import_is_light(tmp_path: Path) -> None:
    modules, _ = modules_after("""
        import rfteval.run
        from rfteval.run.runner import RunOptions, run_eval
        from rfteval.run.spec import build_spec, flag_overrides
        assert callable(run_eval) and callable(build_spec)
        """, tmp_path)
    assert {"rfteval.run.runner", "rfteval.run.spec", "rfteval.graders.string_check"} <= modules
    assert under(modules, *HEAVY) == []
    # what only some runs or only the finish use: the SDK's provider, batches, the sandbox (but its policy, a
    # value every GradeOptions holds), the summary's comparison and the readiness verdict, the terminal tables, the CLI
    assert under(modules, "rfteval.sandbox") == ["rfteval.sandbox", "rfteval.sandbox.policy"]
    assert under(modules, "rfteval.providers.openai_provider", "rfteval.run.batch", "rfteval.compare",
                 "rfteval.readiness", "rfteval.stats", "rfteval.report", "rfteval.cli", "rfteval.view") == []


@pytest.mark.slow
def test_run_without_the_sdk_never_imports_it(tmp_path: Path) -> None:
    (tmp_path / "items.jsonl").write_text(json.dumps({"id": "item-0", "messages": [
        {"role": "user", "content": "What is item 0?"}], "reference_answer": "0"}) + "\n")
    (tmp_path / "grader.json").write_text(json.dumps({
        "type": "string_check", "name": "number", "input": "{{ sample.output_text }}",
        "reference": "{{ item.reference_answer }}", "operation": "like"}))
    modules, out = modules_after("""
        import asyncio
        from rfteval.providers.base import Generation, ServerlessProvider
        from rfteval.run.runner import RunOptions, run_eval
        from rfteval.run.spec import build_spec, flag_overrides

        class Instant(ServerlessProvider):
            def identity(self):
                return {"provider": "instant"}

            def request_body(self, request):
                return {"model": request.model, "messages": request.messages}

            async def generate(self, request, timeout_s):
                await asyncio.sleep(0)
                return Generation(output_text="It is 0.", usage={"input_tokens": 5, "output_tokens": 3,
                                                                 "reasoning_tokens": 0})

            async def aclose(self):
                pass

        spec = build_spec(None, flag_overrides(models=["base=instant"], dataset="items.jsonl", grader="grader.json",
                                               epochs=1, out="run"))
        result = run_eval(spec, options=RunOptions(fresh=True), providers={"base": Instant()})
        print(result.summary.cells, result.summary.errors)
        """, tmp_path)
    assert out.split() == ["1", "0"]
    assert (tmp_path / "run" / "summary.json").exists() and (tmp_path / "run" / "results.parquet").exists()
    # the grader config was validated and graded, the result files written, without the SDK or its types
    assert under(modules, "openai", "aiohttp", "httpx2", "starlette", "uvicorn",
                 "rfteval.providers.openai_provider") == []
