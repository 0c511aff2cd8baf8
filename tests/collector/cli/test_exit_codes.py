"""One exit-status convention for every command, as grep's: 0 success (or ready), 1 a negative answer
only, 2 any error. Each command's cases, run as a user runs them; its --help and the README say the same."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from meritlens.collector.cli._group import ERRORS, NEGATIVE_ANSWERS, cli
from tests.cli_runner import run_cli
from tests.collector.dashboard_spans import TARGET, known_spans
from tests.conftest import CollectorProcess

ROOT = Path(__file__).resolve().parents[3]
PROFILE = ROOT / "examples" / "assessment" / "profile.toml"  # its target is TARGET
TOKENS_ONLY = """target = "support-bot/answer"

[metrics.input_tokens]
direction = "lower"
strategy = "representative_task_set"
cases = {min_samples}
repetitions = 1
aggregation = "sum"
min_samples = {min_samples}
rationale = "every task of the set"
"""


def _commands(group: click.Group, prefix: tuple[str, ...] = ()):
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from _commands(command, (*prefix, name))
        if not isinstance(command, click.Group) or command.invoke_without_command:  # a group that runs alone too
            yield " ".join((*prefix, name))


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A DuckDB file with the dashboard's known spans (five tasks of TARGET, two in assessment a1),
    written by a collector that has stopped; profiles beside it."""
    folder = tmp_path_factory.mktemp("exits")
    collector = CollectorProcess(folder / "meritlens.duckdb").start()
    try:
        known_spans(collector)
        collector.sql("select count(*) from windows")  # waits for the windows of every stored span
    finally:
        assert collector.stop() == 0  # a collector stopped with SIGTERM exits 0
    (folder / "ready.toml").write_text(TOKENS_ONLY.format(min_samples=5))
    (folder / "short.toml").write_text(TOKENS_ONLY.format(min_samples=50))
    (folder / "misspelt.toml").write_text(TOKENS_ONLY.format(min_samples=5).replace("input_tokens", "input_tokenz"))
    return folder


def _exit(*args: str) -> tuple[int, str, str]:
    proc = run_cli(*args, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def _error(*args: str, needle: str, lines: int = 1) -> None:
    """Exit status 2 with one line on stderr naming the cause (a profile's problems: one more line each)."""
    code, _, err = _exit(*args)
    said = err.strip().splitlines()
    assert code == 2 and len(said) == lines and said[0].startswith("Error: ") and needle in said[0], (args, code, err)


def test_every_help_states_the_exit_statuses_and_the_readme_says_the_same():
    commands = list(_commands(cli))
    assert set(NEGATIVE_ANSWERS) <= set(commands)
    for command in commands:
        text = " ".join(run_cli(*command.split(), "--help").stdout.split())
        statuses = text.split("Exit status: ", 1)[1]
        assert statuses.startswith("0 success; 1 "), (command, statuses)
        negative = NEGATIVE_ANSWERS.get(command, "never (it answers no yes/no question)")
        assert f"1 {negative}; {ERRORS}." in statuses, (command, statuses)
    overall = " ".join(run_cli("--help").stdout.split())
    assert "0 success (or ready), 1 a negative answer only" in overall and ERRORS in overall
    readme = " ".join((ROOT / "README.md").read_text().split())
    paragraph = readme.split("Exit status, the same for every command", 1)[1].split("\n\n", 1)[0]
    named = set(re.findall(r"`([a-z][a-z ]*)`", paragraph.split("**1**")[1].split("**2**")[0]))
    assert named == set(NEGATIVE_ANSWERS), paragraph
    assert "**0** success or ready" in paragraph and "**2** any error" in paragraph


def test_readiness_ready_not_ready_and_errors(work):
    db = str(work / "meritlens.duckdb")
    coverage = "select count(*) n from coverage_checks"
    before = run_cli("sql", coverage, "--db", db, "--format", "json").stdout
    code, out, err = _exit("readiness", "--profile", str(work / "ready.toml"), "--baseline", "--db", db)
    assert code == 0 and "verdict: READY (coverage and baseline judged)" in out, out + err
    # --baseline changes what is judged: covered, but 5 of 50 samples
    code, out, _ = _exit("readiness", "--profile", str(work / "short.toml"), "--db", db)
    assert code == 0 and "verdict: READY (coverage judged)" in out, out
    assert "baseline: NOT READY (not judged: add --baseline to judge it)" in out, out
    code, out, _ = _exit("readiness", "--profile", str(work / "short.toml"), "--baseline", "--db", db)
    assert code == 1 and "verdict: NOT READY (coverage and baseline judged)" in out and "5 of 50 samples" in out, out
    # a known scope without enough evidence is "not ready", not an error
    code, out, _ = _exit("readiness", "--profile", str(work / "short.toml"), "--scope", "a1", "--baseline", "--db", db)
    assert code == 1 and "2 of 50 samples" in out, out
    code, out, _ = _exit("readiness", "--profile", str(PROFILE), "--db", db)  # task_success has no window
    assert code == 1 and "coverage: NOT READY" in out, out
    recorded = run_cli("sql", coverage, "--db", db, "--format", "json").stdout
    assert recorded != before
    # errors: each one line, and nothing recorded for them
    _error("readiness", "--profile", str(PROFILE), "--scope", "baseline-2099", "--db", db,
           needle="unknown scope 'baseline-2099' of target 'support-bot/answer': no span or window of the target has "
                  "it; known scopes: a1, all")
    _error("readiness", "--profile", str(PROFILE), "--scope", "a11", "--db", db, needle="did you mean 'a1'?")
    _error("readiness", "--profile", str(PROFILE), "--target", "nobody/here", "--db", db,
           needle="unknown target 'nobody/here': no span or window has it; known targets:")
    _error("readiness", "--profile", str(PROFILE), "--target", "support-bot/answr", "--db", db,
           needle="did you mean 'support-bot/answer'?")
    assert run_cli("sql", coverage, "--db", db, "--format", "json").stdout == recorded
    _error("readiness", "--profile", str(work / "misspelt.toml"), "--db", db, needle="1 problem in the profile",
           lines=2)
    _error("readiness", "--profile", str(work / "nope.toml"), "--db", db, needle="nope.toml' does not exist")
    _error("readiness", "--profile", str(PROFILE), "--db", str(work / "nope.duckdb"), needle="no database at")
    _error("readiness", "--profile", str(PROFILE), "--url", "http://127.0.0.1:9", needle="no collector reachable")


def test_readiness_through_a_collector_refuses_an_unknown_scope_without_recording_it(tmp_path):
    with CollectorProcess(tmp_path / "meritlens.duckdb") as collector:
        known_spans(collector)
        _error("readiness", "--profile", str(PROFILE), "--scope", "baseline-2099", "--url", collector.url,
               needle="unknown scope 'baseline-2099'")
        assert collector.sql("select count(*) n from coverage_checks") == [{"n": 0}]
        code, _, _ = _exit("readiness", "--profile", str(PROFILE), "--scope", "a1", "--url", collector.url)
        assert code == 1 and collector.sql("select count(*) n from coverage_checks") == [{"n": 1}]


def test_profile_check_valid_problems_and_errors(work):
    assert _exit("profile", "check", str(PROFILE))[0] == 0
    code, _, err = _exit("profile", "check", str(work / "misspelt.toml"))
    assert code == 1 and "input_tokenz" in err  # the check's negative answer: the profile has problems
    _error("profile", "check", str(work / "nope.toml"), needle="does not exist")
    _error("profile", "check", str(PROFILE), "--db", str(work / "nope.duckdb"), needle="no database at")


@pytest.mark.parametrize("args, needle", [
    (("sql", "select count(*) from nowhere"), "nowhere"),
    (("sql", "delete from spans"), "query refused"),
    (("windows", "--db", "{work}/nope.duckdb"), "no database at"),
    (("windows", "--url", "http://127.0.0.1:9"), "no collector reachable"),
    (("export", "--parquet", "{work}/out", "--db", "{work}/nope.duckdb"), "no database at"),
    (("import", "{work}/nope.json", "--db", "{work}/copy.duckdb"), "does not exist"),
    (("evaluate", "--target", TARGET, "--metrics", "input_tokenz"), "unknown metric"),
    (("evaluate", "--target", "nobody/here", "--metrics", "consistency"), "no application spans"),
    (("observations", "nope"), "nope"),
    (("metrics", "--nope"), "No such option"),
    (("compare", "--experiment", "nope"), "no experiment"),
    (("frontier", "--experiment", "nope", "--x", "total_task_cost", "--y", "task_success"), "no experiment"),
    (("experiment", "show", "nope"), "no experiment"),
    (("experiment", "list", "--url", "http://127.0.0.1:9"), "no collector reachable"),
    (("experiment", "start", "nope", "arm"), "no experiment"),
    (("experiment", "finish", "nope", "arm"), "no experiment"),
    (("experiment", "arm", "nope", "arm", "--assessment", "a1"), "no experiment"),
    (("experiment", "create", "e1", "--target", TARGET, "--revision", "r1", "--seed", "1"), "--case"),
    (("lake", "status", "--lake", "{work}/no-lake"), "no span lake"),
    (("lake", "windows", "--lake", "{work}/no-lake"), "no span lake"),
    (("serve", "--db", "{work}/no-dir/x.duckdb", "--http-port", "0", "--grpc-port", "0"), "does not exist"),
    (("no-such-command",), "No such command"),
])
def test_every_error_exits_2_in_one_line(work, args, needle):
    where = ("--db", str(work / "meritlens.duckdb"))
    args = tuple(a.format(work=work) for a in args)
    needs_db = args[0] in ("sql", "evaluate", "compare", "frontier", "experiment")
    _error(*args, *(where if needs_db and "--db" not in args and "--url" not in args else ()), needle=needle)


def test_commands_without_a_negative_answer_exit_0(work, tmp_path):
    db = str(work / "meritlens.duckdb")
    for args in (("sql", "select count(*) from spans", "--db", db), ("windows", "--db", db), ("metrics",),
                 ("export", "--parquet", str(tmp_path / "out"), "--db", db),
                 ("import", str(tmp_path / "out" / "spans.parquet"), "--db", str(tmp_path / "copy.duckdb")),
                 ("experiment", "list", "--db", str(tmp_path / "copy.duckdb")), ("--help",), ("--version",)):
        code, out, err = _exit(*args)
        assert code == 0, (args, out, err)
