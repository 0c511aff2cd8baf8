"""A synthetic experiment through the real collector, whose right answers are known by construction
(see ``decide_support.ARMS``): `meritlens compare` and `meritlens frontier` must find them, with
intervals that cover the true differences, and with evidence anyone can recompute."""

from __future__ import annotations

import datetime as dt
import json

import numpy as np
import pytest

from meritlens.analytics import Arm, ExperimentManifest, load_experiment, recompute_interval
from meritlens.collector import finish_arm, reader, save_experiment
from tests.decide.decide_support import (
    ARMS,
    CASES,
    PROFILE_TOML,
    REPETITIONS,
    SHUFFLE_SEED,
    TARGET,
    arm_tasks,
    arm_window,
    meritlens,
    running_collector,
    send_with_sdk,
)

EXPERIMENT = "bakeoff"


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    """The experiment created and run against a running collector: five arms, each added, run (spans
    through the OTel SDK) and finished in its own execution window; the first two arms with the
    CLI, the others from Python."""
    root = tmp_path_factory.mktemp("decide")
    db = root / "decide.duckdb"
    (root / "profile.toml").write_text(PROFILE_TOML)
    (root / "cases.txt").write_text("# the frozen ticket set\n" + "\n".join(reversed(CASES)) + "\n")
    with running_collector(db) as url:
        created = meritlens("experiment", "create", EXPERIMENT, "--db", str(db), "--target", TARGET,
                            "--revision", "git:4f2a9c1", "--cases-file", str(root / "cases.txt"),
                            "--seed", str(SHUFFLE_SEED), "--repetitions", str(REPETITIONS),
                            "--profile", str(root / "profile.toml"), "--format", "json")
        assert created.returncode == 0, created.stderr
        case_order = json.loads(created.stdout)["case_order"]
        finished = {}
        for index, arm in enumerate(ARMS):
            start, end = arm_window(index)
            if index < 2:
                args = ["experiment", "arm", EXPERIMENT, arm.name, "--db", str(db), "--assessment",
                        arm.assessment_id, "--request-model", arm.request_model, "--started-at", start.isoformat()]
                added = meritlens(*args, *(["--baseline"] if arm.name == "base" else []))
                assert added.returncode == 0, added.stderr
            else:
                with reader(db=str(db)) as query:
                    manifest = load_experiment(query, EXPERIMENT)
                save_experiment(manifest.with_arm(Arm(name=arm.name, assessment_id=arm.assessment_id,
                                                      request_model=arm.request_model, started_at=start)), db=str(db))
            send_with_sdk(url, arm_tasks(arm, index, case_order))
            if index < 2 or arm.name == "partial":
                finished[arm.name] = meritlens("experiment", "finish", EXPERIMENT, arm.name, "--db", str(db),
                                               "--at", end.isoformat())
            else:
                finish_arm(EXPERIMENT, arm.name, db=str(db), at=end)
        yield {"db": db, "url": url, "root": root, "case_order": case_order, "finished": finished}


@pytest.fixture(scope="module")
def comparison(experiment):
    out = experiment["root"] / "compare.json"
    result = meritlens("compare", "--experiment", EXPERIMENT, "--db", str(experiment["db"]), "--output", str(out))
    assert result.returncode == 0, result.stderr
    return {"text": result.stdout, "json": json.loads(out.read_text())}


def _metric(comparison_json, metric):
    return next(m for m in comparison_json["metrics"] if m["metric"] == metric)


def _challenger(comparison_json, metric, arm):
    return next(c for c in _metric(comparison_json, metric)["challengers"] if c["arm"] == arm)


def test_the_manifest_records_the_run(experiment):
    with reader(db=str(experiment["db"])) as query:
        manifest = load_experiment(query, EXPERIMENT)
    assert manifest.application_revision == "git:4f2a9c1"
    assert set(manifest.cases) == set(CASES) and manifest.repetitions == REPETITIONS
    assert list(manifest.case_order) == experiment["case_order"] != sorted(CASES)
    assert manifest.baseline == "base"
    assert list(manifest.profile["metrics"]) == ["task_quality", "total_task_cost", "end_to_end_latency"]
    for name, finished in experiment["finished"].items():
        assert finished.returncode == 0, (name, finished.stderr)
    for index, design in enumerate(ARMS):
        arm = manifest.arm(design.name)
        assert arm.assessment_id == design.assessment_id and arm.request_model == design.request_model
        assert arm.response_models == (design.response_model,)  # as the provider reported it in the spans
        assert (arm.started_at, arm.finished_at) == arm_window(index)
    assert "25 of 30 cases have no task yet" in experiment["finished"]["partial"].stdout


def test_compare_finds_the_cheaper_arm_at_equal_quality(comparison):
    quality = _challenger(comparison["json"], "task_quality", "cheap")
    assert quality["state"] == "compared" and quality["pairing"] == "paired" and quality["matched_cases"] == 30
    assert quality["difference"] == 0 and quality["difference_ci"] == [0, 0]
    assert quality["verdict"] == "equivalent" and quality["meets_tolerance"] is True
    cost = _challenger(comparison["json"], "total_task_cost", "cheap")
    assert cost["verdict"] == "better" and cost["difference_ci"][1] < 0 and cost["meets_constraint"] is True
    latency = _challenger(comparison["json"], "end_to_end_latency", "cheap")
    assert latency["verdict"] == "better"


def test_compare_finds_the_better_arm_at_higher_cost_and_the_dominated_one(comparison):
    premium_quality = _challenger(comparison["json"], "task_quality", "premium")
    premium_cost = _challenger(comparison["json"], "total_task_cost", "premium")
    assert premium_quality["verdict"] == "better"
    assert premium_cost["verdict"] == "worse" and premium_cost["meets_tolerance"] is False
    assert premium_cost["meets_constraint"] is False  # its total over the plan exceeds the $1 ceiling
    for metric in ("task_quality", "total_task_cost", "end_to_end_latency"):
        assert _challenger(comparison["json"], metric, "dominated")["verdict"] == "worse"


def test_intervals_cover_the_true_differences(comparison):
    world = np.random.default_rng(5)  # the shared world of decide_support.arm_tasks
    [world.uniform(0.45, 0.75) for _ in CASES]
    [world.normal(0, 0.04) for _ in CASES for _ in range(REPETITIONS)]
    size = np.array([world.uniform(0.7, 1.3) for _ in CASES])
    true_total = {arm.name: arm.cost_per_task * size.sum() * REPETITIONS for arm in ARMS}
    for arm in ("cheap", "premium", "dominated"):
        low, high = _challenger(comparison["json"], "total_task_cost", arm)["difference_ci"]
        assert low <= true_total[arm] - true_total["base"] <= high
    for arm, shift in (("premium", 0.10), ("dominated", -0.10)):
        low, high = _challenger(comparison["json"], "task_quality", arm)["difference_ci"]
        assert low <= shift <= high and high - low < 0.05


def test_no_verdict_on_too_few_samples(comparison):
    for metric in ("task_quality", "total_task_cost", "end_to_end_latency"):
        partial = _challenger(comparison["json"], metric, "partial")
        assert partial["state"] == "insufficient_evidence"
        assert partial["verdict"] is None and partial["difference"] is None and partial["difference_ci"] is None
        assert "partial has 10 of 40 samples" in partial["reason"]
        assert partial["samples"] == {"baseline": 10, "challenger": 10}
    assert "insufficient_evidence" in comparison["text"] and "why some results have no verdict" in comparison["text"]


def test_results_carry_their_evidence_and_can_be_recomputed(experiment, comparison):
    document = comparison["json"]
    assert document["experiment"]["experiment_id"] == EXPERIMENT
    with reader(db=str(experiment["db"])) as query:
        manifest = load_experiment(query, EXPERIMENT)
        windows = {(r[0], r[1], r[2]): r[3] for r in query(
            "SELECT target_id, metric, scope, evidence_digest FROM windows").rows}
    assert document["experiment"]["manifest_digest"] == manifest.digest
    assert document["method"]["seed"] == SHUFFLE_SEED and document["method"]["resamples"] == 2000
    result = _challenger(document, "task_quality", "premium")
    assert result["certified"] is True
    evidence = result["evidence"]
    for window in evidence["windows"]:
        assert window["matches"] is True
        assert window["evidence_digest"] == windows[(TARGET, "task_quality", window["scope"])]
    assert {w["scope"] for w in evidence["windows"]} == {"exp-base", "exp-premium"}
    assert len(evidence["inputs"]["baseline"]) == len(evidence["inputs"]["challenger"]) == 60
    recomputed = recompute_interval(evidence)
    assert [recomputed.low, recomputed.high] == result["difference_ci"]
    assert recomputed.estimate == pytest.approx(result["difference"])
    tampered = json.loads(json.dumps(evidence))
    tampered["inputs"]["challenger"][0][2] += 0.5
    with pytest.raises(ValueError, match="inputs_digest"):
        recompute_interval(tampered)
    # a sum is compared as the total over the plan: here every case ran twice, so it is the window's sum
    with reader(db=str(experiment["db"])) as query:
        window_sum = query(f"SELECT value FROM windows WHERE target_id = '{TARGET}' AND metric = 'total_task_cost' "
                           "AND scope = 'exp-base'").rows[0][0]
    assert _metric(document, "total_task_cost")["baseline"]["value"] == pytest.approx(window_sum)


def test_the_same_command_gives_the_same_result(experiment, comparison):
    again = meritlens("compare", "--experiment", EXPERIMENT, "--db", str(experiment["db"]), "--format", "json")
    assert again.returncode == 0, again.stderr
    document = json.loads(again.stdout)
    assert document["metrics"] == comparison["json"]["metrics"]
    other_seed = json.loads(meritlens("compare", "--experiment", EXPERIMENT, "--db", str(experiment["db"]),
                                      "--format", "json", "--seed", "12", "--baseline", "cheap").stdout)
    assert other_seed["baseline"] == "cheap" and other_seed["method"]["seed"] == 12
    assert _challenger(other_seed, "total_task_cost", "base")["verdict"] == "worse"


def test_frontier_finds_the_optimal_and_the_dominated_arms(experiment):
    root = experiment["root"]
    result = meritlens("frontier", "--experiment", EXPERIMENT, "--db", str(experiment["db"]),
                       "--x", "total_task_cost", "--y", "task_quality", "--z", "end_to_end_latency",
                       "--plot", str(root / "frontier.png"), "--json", str(root / "frontier.json"))
    assert result.returncode == 0, result.stderr
    document = json.loads((root / "frontier.json").read_text())
    assert document["frontier"] == ["cheap", "premium"]
    assert document["dominated"] == {"base": ["cheap"], "dominated": ["base", "cheap"]}
    assert list(document["excluded"]) == ["partial"] and "10 of 40 samples" in document["excluded"]["partial"]
    arms = {a["arm"]: a for a in document["arms"]}
    for name in ("cheap", "premium"):
        for metric, value in arms[name]["values"].items():
            assert value["ci"][0] <= value["value"] <= value["ci"][1], (name, metric)
    assert all(d["confident"] for a in ("base", "dominated") for d in arms[a]["dominated_by"])
    base_by_cheap = arms["base"]["dominated_by"][0]["differences"]
    assert base_by_cheap["task_quality"]["ci"] == [0, 0]  # equal quality, by construction
    assert base_by_cheap["total_task_cost"]["ci"][1] < 0
    certificate = document["certificate"]
    assert certificate["certified"] is True
    keys = {(c["arm"], c["metric"]) for c in certificate["calculations"]}
    assert keys == {(a, m) for a in ("base", "cheap", "premium", "dominated")
                    for m in ("total_task_cost", "task_quality", "end_to_end_latency")}
    assert all(len(c["inputs_digest"]) == 64 and c["windows"][0]["matches"] for c in certificate["calculations"])
    assert (root / "frontier.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert document["plot"] == str(root / "frontier.png")
    assert "cheap" in result.stdout and "dominated by" in result.stdout


def test_frontier_svg_over_two_metrics(experiment):
    svg = experiment["root"] / "frontier.svg"
    result = meritlens("frontier", "--experiment", EXPERIMENT, "--db", str(experiment["db"]),
                       "--x", "total_task_cost", "--y", "task_quality", "--plot", str(svg), "--format", "json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    # over cost and quality alone, dominated is still beaten by base and cheap, and base by cheap
    assert document["frontier"] == ["cheap", "premium"]
    text = svg.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text and "Pareto frontier" in text


def test_frontier_and_compare_refuse_bad_requests(experiment):
    db = str(experiment["db"])
    unknown = meritlens("frontier", "--experiment", EXPERIMENT, "--db", db, "--x", "total_cost", "--y", "task_quality")
    assert unknown.returncode == 2 and "did you mean 'total_task_cost'" in unknown.stderr
    plugin_only = meritlens("frontier", "--experiment", EXPERIMENT, "--db", db, "--x", "total_task_cost",
                            "--y", "consistency")
    assert plugin_only.returncode == 2 and "plugin or evaluator" in plugin_only.stderr
    bad_plot = meritlens("frontier", "--experiment", EXPERIMENT, "--db", db, "--x", "total_task_cost",
                         "--y", "task_quality", "--plot", "out.pdf")
    assert bad_plot.returncode == 2 and ".png or .svg" in bad_plot.stderr
    missing = meritlens("compare", "--experiment", "nope", "--db", db)
    assert missing.returncode == 2 and "no experiment 'nope'" in missing.stderr
    no_arm = meritlens("compare", "--experiment", EXPERIMENT, "--db", db, "--baseline", "gold")
    assert no_arm.returncode == 2 and "has no arm 'gold'" in no_arm.stderr


def test_arms_whose_spans_break_the_manifest_are_refused(experiment):
    """A second experiment, written from Python through the running collector: it reuses the baseline's
    assessment, adds an arm with spans outside its execution window and one whose provider reported
    another model than the manifest records."""
    db, url = str(experiment["db"]), experiment["url"]
    order = experiment["case_order"]
    base_start, base_end = arm_window(0)
    manifest = ExperimentManifest.new(
        "audit", target_id=TARGET, application_revision="git:4f2a9c1", cases=CASES, shuffle_seed=SHUFFLE_SEED,
        repetitions=REPETITIONS,
        arms=[Arm(name="base", assessment_id="exp-base", request_model="gpt-4o", started_at=base_start,
                  finished_at=base_end, response_models=("gpt-4o-2024-08-06",))],
        baseline="base",
    )
    save_experiment(manifest, db=db, url=url, create=True)
    leaky, swapped = ARMS[1], ARMS[2]
    leaky = type(leaky)(**{**leaky.__dict__, "name": "leaky", "assessment_id": "audit-leaky"})
    swapped = type(swapped)(**{**swapped.__dict__, "name": "swapped", "assessment_id": "audit-swapped"})
    leaky_tasks = arm_tasks(leaky, 10, order)
    late = leaky_tasks[-1]
    leaky_tasks[-1] = type(late)(**{**late.__dict__, "start": arm_window(10)[1] + dt.timedelta(minutes=5)})
    stored = load_experiment_from(db)
    stored = stored.with_arm(Arm(name="leaky", assessment_id="audit-leaky", request_model=leaky.request_model,
                                 started_at=arm_window(10)[0]))
    stored = stored.with_arm(Arm(name="swapped", assessment_id="audit-swapped", request_model=swapped.request_model,
                                 started_at=arm_window(11)[0], response_models=("o3-mini-2025-01-31",)))
    save_experiment(stored, db=db, url=url)
    send_with_sdk(url, leaky_tasks + arm_tasks(swapped, 11, order))
    # `experiment finish`'s negative answer (exit 1): the arm is finished, and its spans break the manifest
    finished = meritlens("experiment", "finish", "audit", "leaky", "--db", db, "--at", arm_window(10)[1].isoformat())
    said = finished.stdout + finished.stderr
    assert finished.returncode == 1 and "REFUSED" in said, said
    finish_arm("audit", "swapped", db=db, url=url, at=arm_window(11)[1])

    result = meritlens("compare", "--experiment", "audit", "--db", db, "--format", "json")
    assert result.returncode == 1
    assert "refused: arm(s) leaky, swapped" in result.stderr
    document = json.loads(result.stdout)
    checks = {c["arm"]: c for c in document["arms"]}
    assert checks["base"]["refused"] is False
    assert "1 of its 60 spans fall outside its execution window" in checks["leaky"]["problems"][0]
    assert any("windows ('support-bot/answer', {" in p and "outside the execution window" in p
               for p in checks["leaky"]["problems"])
    assert "spans report response model(s) ['o3-2025-04-16'] but the manifest records ['o3-mini-2025-01-31']" \
        in checks["swapped"]["problems"][0]
    for metric in document["metrics"]:
        for challenger in metric["challengers"]:
            assert challenger["state"] == "refused" and challenger["verdict"] is None
            assert challenger["certified"] is False
    frontier = meritlens("frontier", "--experiment", "audit", "--db", db, "--x", "total_task_cost",
                         "--y", "task_quality", "--format", "json")
    assert frontier.returncode == 1
    placed = json.loads(frontier.stdout)
    assert placed["frontier"] == ["base"] and set(placed["excluded"]) == {"leaky", "swapped"}
    assert placed["excluded"]["leaky"].startswith("refused: ")


def load_experiment_from(db: str) -> ExperimentManifest:
    with reader(db=db) as query:
        return load_experiment(query, "audit")
