"""README.md, followed literally: every fenced `sh` and `sql` block runs, in the README's order, against
a real collector, and what the text says about the results holds.

Conventions of the README's code blocks (so that later edits stay checked):
- ```` ```sh ````: shell commands, run one by one (a command may span lines inside quotes); each must exit 0.
- ```` ```sql ````: one query, run with `meritlens sql`.
- an info string containing ``not-run`` (```` ```sh not-run ````): shown, not run (e.g. `make run`,
  which this test stands in for by starting the collector itself).
- a block with no info string is a diagram or text and must not hold a command.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cli_runner import clean_env
from tests.collector.collector_proc import CollectorProcess

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
RUN_LANGUAGES = {"sh", "sql"}
SHOWN_LANGUAGES = {"python", "toml", "json", "text"}
_FENCE = re.compile(r"^( *)```(.*)$")
_COMMAND_LIKE = re.compile(r"^\s{0,4}(\.venv/bin/|meritlens |make |OTEL_|MERITLENS_|pip |python)")


@dataclass
class Block:
    info: str
    text: str
    line: int
    before: str  # the README's prose since the previous block

    @property
    def language(self) -> str:
        return self.info.split()[0] if self.info.split() else ""

    @property
    def runs(self) -> bool:
        return self.language in RUN_LANGUAGES and "not-run" not in self.info.split()


def readme_blocks(text: str) -> list[Block]:
    blocks, prose, current, start, info, indent = [], [], None, 0, "", ""
    for number, line in enumerate(text.splitlines(), 1):
        fence = _FENCE.match(line)
        if current is None:
            if fence:
                current, start, info, indent = [], number, fence.group(2).strip(), fence.group(1)
            else:
                prose.append(line)
        elif fence and fence.group(2).strip() == "":
            body = "\n".join(row[len(indent):] if row.startswith(indent) else row for row in current)
            blocks.append(Block(info, body, start, "\n".join(prose)))
            current, prose = None, []
        else:
            current.append(line)
    assert current is None, f"README.md:{start}: a code block is not closed"
    return blocks


def shell_commands(block: str) -> list[str]:
    """The commands of a shell block: comment lines dropped, a command continued while a quote is open."""
    commands, pending = [], ""
    for line in block.splitlines():
        if not pending and (not line.strip() or line.strip().startswith("#")):
            continue
        pending = f"{pending}\n{line}" if pending else line
        try:
            shlex.split(pending, comments=True)
        except ValueError:  # an open quote: the command goes on
            continue
        commands.append(pending.strip())
        pending = ""
    assert not pending, f"unterminated command: {pending}"
    return commands


def test_every_block_is_either_run_or_visibly_marked():
    for block in readme_blocks(README.read_text()):
        where = f"README.md:{block.line}"
        if block.runs or "not-run" in block.info.split():
            continue
        if block.language == "":
            commands = [text for text in block.text.splitlines() if _COMMAND_LIKE.match(text)]
            assert not commands, (f"{where}: a command in a plain block ({commands[0].strip()!r}); fence it as ```sh "
                                  "(run by tests/test_readme.py) or ```sh not-run")
        else:
            assert block.language in SHOWN_LANGUAGES, f"{where}: unknown block language {block.language!r}"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """What a user's clone looks like after `make install`: the venv and the examples, in a directory
    of its own (so that its ./meritlens.duckdb is the collector's)."""
    work = tmp_path_factory.mktemp("clone")
    (work / ".venv").symlink_to(ROOT / ".venv")
    (work / "examples").symlink_to(ROOT / "examples")
    return work


def _localized(command: str, proc: CollectorProcess) -> str:
    """The README's default ports, as this test's collector got free ones instead."""
    return (command.replace("127.0.0.1:4318", f"127.0.0.1:{proc.http_port}")
                   .replace("127.0.0.1:4317", f"127.0.0.1:{proc.grpc_port}"))


def _rows(output: str) -> int:
    """Rows printed by `meritlens sql` in any format."""
    text = output.strip()
    if text.startswith("["):
        return len(json.loads(text))
    last = text.splitlines()[-1] if text else ""
    found = re.fullmatch(r"(\d+) rows?", last)
    return int(found.group(1)) if found else len(text.splitlines()) - 1  # CSV: minus the header


@pytest.mark.slow
def test_the_readme_runs_in_order_and_says_what_happens(workdir):
    blocks = readme_blocks(README.read_text())
    assert [b for b in blocks if b.runs], "no runnable block found in README.md"
    # `make run` in the README: `meritlens serve` on ./meritlens.duckdb (the test's ports are free ones).
    with CollectorProcess(workdir / "meritlens.duckdb") as proc:
        env = clean_env()
        ran: list[tuple[str, subprocess.CompletedProcess, Block]] = []
        for block in (b for b in blocks if b.runs):
            if block.language == "sql":
                commands = [shlex.join([".venv/bin/meritlens", "sql", block.text.strip(), "--format", "json"])]
            else:
                commands = [_localized(c, proc) for c in shell_commands(block.text)]
            for command in commands:
                result = subprocess.run(["bash", "-c", command], cwd=workdir, env=env, capture_output=True,
                                        text=True, timeout=180)
                assert result.returncode == 0, (f"README.md:{block.line}: `{command}` exited {result.returncode}:\n"
                                                f"{result.stdout}\n{result.stderr}")
                ran.append((command, result, block))

        # Every query shown in the README gives rows: the text presents each one as answering something.
        for command, result, block in ran:
            if " sql " in command:
                assert _rows(result.stdout) >= 1, f"README.md:{block.line}: `{command}` printed no row"

        # The evidence-digest query reproduces the digest of the window its paragraph names.
        digests = [(b, json.loads(r.stdout)) for c, r, b in ran if b.language == "sql" and "sha256" in b.text]
        assert digests, "the README's evidence-digest query was not found"
        for block, rows in digests:
            metric = re.findall(r"`(\w+)` window of `([^`]+)` in scope `([^`]+)`", block.before)
            assert metric, f"README.md:{block.line}: the text before the query does not name its window"
            name, target, scope = metric[-1]
            stored = proc.sql(f"select evidence_digest from windows where target_id = '{target}' and "
                              f"metric = '{name}' and scope = '{scope}'")["rows"]
            assert stored and rows[0]["digest"] == stored[0][0], (rows, stored)

        # Readiness: as the text says, READY on the assessment's own scope, counting only its tasks.
        readiness = [(c, r) for c, r, _ in ran if "meritlens readiness" in c]
        assert readiness, "the README shows no readiness check"
        for command, result in readiness:
            assert "coverage: READY" in result.stdout and "baseline: READY" in result.stdout, result.stdout
            # Rounded to four significant digits, with units: the cost in $, a sub-second latency in ms.
            assert re.search(r"total_task_cost .* measured\s+\$0\.0*[1-9]\d{0,3}\s", result.stdout), result.stdout
            assert re.search(r"end_to_end_latency .* measured\s+\d{1,3}(\.\d{1,3})? ms\s", result.stdout), result.stdout
            assert re.search(r"task_success .* measured\s+\d{1,3}(\.\d{1,2})?%\s", result.stdout), result.stdout
            # --baseline: the verdict judges the baseline too, and says so
            assert "verdict: READY (coverage and baseline judged)" in result.stdout, result.stdout
            scope = re.search(r"--scope (\S+)", command)
            assert scope, f"`{command}`: the README's readiness check must name the assessment's scope"
            samples = re.findall(r"(\d+)/\d+\s+\w+\s*$", result.stdout, re.M)
            assessment_tasks = proc.sql(f"select count(distinct task_id) from spans where assessment_id = "
                                        f"'{scope.group(1)}'")["rows"][0][0]
            assert samples and {int(s) for s in samples} == {assessment_tasks}, result.stdout
        # What the text says the scope `all` would count instead: every task of the target.
        readiness_blocks = [b for _, _, b in ran if "meritlens readiness" in b.text]
        after = README.read_text().split(readiness_blocks[0].text.strip().splitlines()[-1], 1)[1]
        claimed = re.search(r"\((\d+) samples\)", after.split("```")[1])  # the prose after the block
        assert claimed, "the README should say how many samples the scope `all` counts"
        target = re.search(r"--profile (\S+)", readiness[0][0]).group(1)
        target_id = re.search(r'^target = "([^"]+)"', (workdir / target).read_text(), re.M).group(1)
        every_task = proc.sql(f"select count(distinct coalesce(task_id, trace_id)) from spans where target_id = "
                              f"'{target_id}' and role = 'application'")["rows"][0][0]
        assert int(claimed.group(1)) == every_task, (claimed.group(0), every_task)
        prose = README.read_text()
        assert "run_assessment.py" in prose.split("meritlens readiness --profile")[0], \
            "the README must say to run the assessment before the readiness check"

        # Units: the first query's table shows each window's value with its unit, as the text says.
        table = next(r.stdout for c, r, _ in ran if "select target_id, metric, value, sample_count from windows" in c)
        lines = {metric: next(line for line in table.splitlines() if re.search(rf"\b{metric}\b", line))
                 for metric in ("total_task_cost", "end_to_end_latency", "input_tokens", "task_success")}
        distribution = next(r.stdout for c, r, _ in ran if "select metric, p50, p90" in c)
        assert len(re.findall(r"\d m?s\b", distribution)) == 4, distribution  # p50 to p99, each in ms or s
        assert re.search(r"\$0\.0*[1-9]", lines["total_task_cost"]), table
        assert re.search(r"\d m?s\b", lines["end_to_end_latency"]), table
        assert re.search(r"\d tokens\b", lines["input_tokens"]), table
        assert re.search(r"\d%", lines["task_success"]), table

        # The SDK examples and the plugin: their windows, and the plugin's figure as the text gives it.
        for target in ("order-bot/agent", "refund-bot/answer"):
            measured = proc.sql(f"select count(*) from windows where target_id = '{target}' and state = 'measured'")
            assert measured["rows"][0][0] > 0, target
        listed = next(r.stdout for c, r, _ in ran if c.endswith("meritlens metrics"))
        assert re.search(r"^calls_per_task\s+plugin", listed, re.M), listed
        claimed = re.search(r"measures (\d+) LLM calls per task", " ".join(prose.split()))
        window = proc.sql("select value, sample_count, state from windows where target_id = 'order-bot/agent' "
                          "and metric = 'calls_per_task'")["rows"]
        assert claimed and window == [[float(claimed.group(1)), 3, "measured"]], (claimed, window)
        # installed in a place of its own: the clone's ./plugins, never the .venv the test workers share
        assert (workdir / "plugins" / "calls_per_task").is_dir()
        shared = subprocess.run([str(ROOT / ".venv/bin/python"), "-c", "import calls_per_task"], capture_output=True)
        assert shared.returncode != 0, "the plugin example was installed into the shared .venv"
