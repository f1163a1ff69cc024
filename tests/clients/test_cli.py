"""The client CLI driven as a user would: separate processes, exit codes, stdout and stderr,
against the real API and real workers over the session's broker and Redis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from typing import Any

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from clients import Client
from clients.cli import app, register
from tests.clients._client_support import CLI_MODULE, cli, free_port
from tests.service.conftest import ROOT


def _id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _json(result: Any) -> Any:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


# --- no server needed: in-process, through typer's runner ----------------------------------------
runner = CliRunner()


def test_help_lists_the_commands() -> None:
    r = runner.invoke(app, ["--help"])
    assert r.exit_code == 0
    for command in ("models", "predict", "replay", "watch", "checkpoint"):
        assert command in r.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["models", "create", "m1"],  # no --kind / --dim
        ["replay", "trump-approval"],  # no --model
        ["replay", "trump-approval", "--model", "m", "--via", "pigeon"],
        ["models", "create", "m1", "--kind", "pa", "--dim", "3", "--param", "novalue"],
        ["replay", "trump-approval", "--model", "m", "--rate", "-5"],
        ["bogus-command"],
    ],
)
def test_usage_errors_exit_2(args: list[str]) -> None:
    r = runner.invoke(app, [*args, "--api-url", f"http://127.0.0.1:{free_port()}"])
    assert r.exit_code == 2, r.output


def test_unreachable_api_is_exit_1_with_a_message() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    r = runner.invoke(app, ["models", "list", "--api-url", url, "--timeout", "1"])
    assert r.exit_code == 1
    assert r.stdout == ""
    assert "Error" in r.stderr and "127.0.0.1" in r.stderr


def test_register_mounts_every_command_on_a_root_app() -> None:
    root = typer.Typer()

    @root.command()
    def up() -> None:
        """Stand-in for the service's own command."""

    register(root)
    r = runner.invoke(root, ["--help"])
    assert r.exit_code == 0
    for command in ("up", "models", "predict", "replay", "watch", "checkpoint"):
        assert command in r.stdout


def test_onlinepredict_command_has_the_client_commands() -> None:
    if CLI_MODULE != "service.cli":
        pytest.skip("service/cli.py (the onlinepredict command) is not in the repository")
    r = cli("--help")
    assert r.returncode == 0
    for command in ("up", "api", "worker", "models", "predict", "replay", "watch", "checkpoint"):
        assert command in r.stdout


def test_unknown_dataset_is_exit_1(cli_env: dict[str, str]) -> None:
    r = cli("replay", "no-such-set", "--model", "m", env=cli_env)
    assert r.returncode == 1 and "trump-approval" in r.stderr  # the built-in names


# --- against the real API ---------------------------------------------------------------------
def test_models_create_list_show_delete(cli_env: dict[str, str], tmp_path: Any) -> None:
    model = _id("cli-m")
    created = _json(
        cli("models", "create", model, "-k", "pa", "-d", "3", "-p", "C=0.25",
            "-p", "variant=pa2", "--json", env=cli_env)
    )  # fmt: skip
    assert created["kind"] == "pa" and created["params"] == {"C": 0.25, "variant": "pa2"}
    listed = _json(cli("models", "list", "--json", env=cli_env))
    assert model in [m["id"] for m in listed]
    shown = _json(cli("models", "show", model, "--json", env=cli_env))
    assert shown["model"]["dim"] == 3 and shown["metrics"]["events"] == 0
    human = cli("models", "show", model, env=cli_env)
    assert human.returncode == 0 and model in human.stdout
    deleted = cli("models", "delete", model, "--yes", env=cli_env)
    assert deleted.returncode == 0
    gone = cli("models", "show", model, env=cli_env)
    assert gone.returncode == 1 and "404" in gone.stderr and model in gone.stderr


def test_models_list_shows_long_ids_whole_and_show_says_each_field_once(
    cli_env: dict[str, str],
) -> None:
    """Into a pipe (80 columns by default) `models list` used to cut ids with an ellipsis,
    and `models show` printed the counts twice (as counts and again as figures)."""
    model = _id("cli-a-rather-long-model-id-that-is-wider-than-the-id-column-of-an-80-col-table")
    env = {k: v for k, v in cli_env.items() if k != "COLUMNS"}
    assert cli("models", "create", model, "-k", "pa", "-d", "2", env=env).returncode == 0
    try:
        listed = cli("models", "list", env=env)
        assert listed.returncode == 0, listed.stderr
        assert any(model in ln for ln in listed.stdout.splitlines()), listed.stdout
        shown = cli("models", "show", model, env=env)
        assert shown.returncode == 0, shown.stderr
        keys = [ln.split()[0] for ln in shown.stdout.splitlines() if ln.strip()]
        assert len(keys) == len(set(keys)), shown.stdout
        for counted in ("applied", "duplicate", "rejected"):
            assert counted in keys, shown.stdout
        assert "events" not in keys and "duplicates" not in keys, shown.stdout
    finally:
        cli("models", "delete", model, "--yes", env=env)


def test_models_create_from_a_yaml_file(cli_env: dict[str, str], tmp_path: Any) -> None:
    model = _id("cli-yaml")
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"id: {model}\nkind: pa\ndim: 2\nparams:\n  C: 2.0\n  epsilon: 0.1\n")
    created = _json(cli("models", "create", "-f", str(spec), "-p", "C=3", "--json", env=cli_env))
    assert created["id"] == model and created["params"] == {"C": 3, "epsilon": 0.1}
    from_stdin = _id("cli-stdin")
    body = json.dumps({"kind": "pa", "dim": 2})
    r = cli("models", "create", from_stdin, "-f", "-", env=cli_env, input=body)
    assert r.returncode == 0 and from_stdin in r.stdout


def test_a_spec_files_preprocess_is_sent(cli_env: dict[str, str]) -> None:
    body = json.dumps({"kind": "apas", "dim": 2, "preprocess": {"standardize": True}})
    r = cli("models", "create", _id("cli-pre"), "-f", "-", env=cli_env, input=body)
    assert r.returncode == 1 and "portfolio weights" in r.stderr
    body = json.dumps({"kind": "apas", "dim": 2, "preprocess": None})  # null: none
    r = cli("models", "create", _id("cli-pre"), "-f", "-", env=cli_env, input=body)
    assert r.returncode == 0, r.stderr


def test_server_errors_are_exit_1_with_the_servers_message(cli_env: dict[str, str]) -> None:
    r = cli("models", "create", _id("cli-bad"), "-k", "pa", "-d", "3", "-p", "C=-1", env=cli_env)
    assert r.returncode == 1
    assert "422" in r.stderr and "C" in r.stderr
    assert r.stdout == ""


def test_predict_from_args_and_stdin(cli_env: dict[str, str]) -> None:
    model = _id("cli-pred")
    assert cli("models", "create", model, "-k", "pa", "-d", "3", env=cli_env).returncode == 0
    one = _json(cli("predict", model, "1", "-2.5", "3e-1", "--json", env=cli_env))
    assert len(one["predictions"]) == 1 and one["predictions"][0]["prediction_id"]
    batch = _json(
        cli("predict", model, "--json", env=cli_env, input="1,2,3\n[0.5, -1, 2]\n\n4 5 6\n")
    )
    assert len(batch["predictions"]) == 3
    plain = cli("predict", model, "0", "0", "1", env=cli_env)
    assert plain.returncode == 0 and len(plain.stdout.split("\t")) == 2
    wrong = cli("predict", model, "1", "2", env=cli_env)
    assert wrong.returncode == 1 and "422" in wrong.stderr
    junk = cli("predict", model, "--json", env=cli_env, input="1,two,3\n")
    assert junk.returncode == 1 and "two" in junk.stderr


# --- replay, watch: need the workers ----------------------------------------------------------
def test_replay_via_kafka_ends_with_the_models_figures(
    cli_env: dict[str, str], api_url: str, workers: Any
) -> None:
    model = _id("cli-trump")
    r = cli("replay", "trump-approval", "--model", model, "--via", "kafka", "--json",
            "--wait-timeout", "90", env=cli_env)  # fmt: skip
    summary = _json(r)
    assert "created model" in r.stderr  # the data set's default kind, since none was given
    assert summary["sent"] == 1001 and summary["events"] == 1001
    assert summary["rejected"] == 0 and summary["duplicates"] == 0
    assert summary["rmse"] > 0 and summary["cumulative_regret"] is not None
    # the same figures are on /metrics
    with Client(api_url, api_key="") as api:
        figures = api.model_metrics(model)
        info = api.get_model(model)
    assert info.kind == "dvaw-ensemble" and info.applied == 1001
    assert figures["rmse"] == pytest.approx(summary["rmse"])
    assert figures["cumulative_regret"] == pytest.approx(summary["cumulative_regret"])


def test_replay_frames_and_json_teach_the_same(
    cli_env: dict[str, str], api_url: str, workers: Any, tmp_path: Any
) -> None:
    """``replay --via kafka`` sends frames by default, ``--format json`` one record per
    event: the two models end with the same figures and learner diagnostics, bit for bit."""
    path = tmp_path / "stream.csv"
    rows = ["a,b,c,y"] + [
        f"{np.sin(i)},{np.cos(3 * i)},{(i % 11) / 10},{np.sin(i) - 2 * np.cos(3 * i)}"
        for i in range(400)
    ]
    path.write_text("\n".join(rows) + "\n")
    summaries = {}
    for fmt in ("frame", "json"):
        model = _id(f"cli-{fmt}")
        summaries[fmt] = (model, _json(
            cli("replay", str(path), "--model", model, "--kind", "pa", "--via", "kafka",
                "--format", fmt, "--batch", "150", "--json", "--wait-timeout", "90",
                env=cli_env)
        ))  # fmt: skip
    with Client(api_url, api_key="") as api:
        snaps = {fmt: api.model_snapshot(model) for fmt, (model, _) in summaries.items()}
    assert summaries["frame"][1]["events"] == summaries["json"][1]["events"] == 400
    for part in ("counters", "figures", "diagnostics"):
        assert snaps["frame"][part] and snaps["frame"][part] == snaps["json"][part], part


def test_replay_csv_via_http_creates_the_model(
    cli_env: dict[str, str], workers: Any, tmp_path: Any
) -> None:
    path = tmp_path / "stream.csv"
    rows = ["a,b,y"] + [
        f"{i % 7},{(i * 3) % 5},{(i % 7) - 0.5 * ((i * 3) % 5)}" for i in range(300)
    ]
    path.write_text("\n".join(rows) + "\n")
    model = _id("cli-csv")
    missing = cli("replay", str(path), "--model", model, env=cli_env)
    assert missing.returncode == 1 and "--kind" in missing.stderr
    summary = _json(
        cli("replay", str(path), "--model", model, "--kind", "pa", "--via", "http", "--limit",
            "250", "--rate", "5000", "--batch", "40", "--json", "--wait-timeout", "90",
            env=cli_env)
    )  # fmt: skip
    assert summary["sent"] == 250 and summary["events"] == 250
    again = _json(
        cli("replay", str(path), "--model", model, "--via", "http", "--limit", "50", "--json",
            "--wait-timeout", "90", env=cli_env)
    )  # fmt: skip
    assert again["events"] == 300  # the model's running total


def test_replay_classifier_reports_mistakes(cli_env: dict[str, str], workers: Any) -> None:
    model = _id("cli-phish")
    summary = _json(
        cli("replay", "phishing", "--model", model, "--limit", "400", "--json",
            "--wait-timeout", "90", env=cli_env)
    )  # fmt: skip
    assert summary["events"] == 400
    assert 0 < summary["mistakes"] < 400
    assert summary["error_rate"] == pytest.approx(summary["mistakes"] / 400)


def test_watch_snapshot(cli_env: dict[str, str], workers: Any) -> None:
    model = _id("cli-watch")
    X = np.random.default_rng(3).standard_normal((300, 4))
    with Client(cli_env["ONLINEPREDICT_API_URL"], api_key="") as api:
        api.create_model(model, "dvaw-ensemble", 4)
        api.send_events(model, X, X @ np.array([1.0, -0.5, 0.25, 2.0]))
        api.wait_processed(model, 300, timeout=90)
    snap = _json(cli("watch", model, "--json", env=cli_env))
    assert snap["model"] == model and snap["summary"]["events"] == 300
    assert "cumulative_loss" in snap["metrics"]
    frame = cli("watch", model, "--once", env=cli_env)
    assert frame.returncode == 0 and model in frame.stdout and "cumulative_regret" in frame.stdout
    unknown = cli("watch", _id("nope"), "--once", env=cli_env)
    assert unknown.returncode == 1 and "404" in unknown.stderr


def test_checkpoint_commands(cli_env: dict[str, str], api_url: str, workers: Any) -> None:
    model = _id("cli-ckpt")
    _json(cli("replay", "synth-drift-static", "--model", model, "--limit", "600", "--batch",
              "100", "--rate", "3000", "--json", "--wait-timeout", "90", env=cli_env))  # fmt: skip
    listed = _json(cli("checkpoint", "list", model, "--json", env=cli_env))
    assert listed and all("version" in c for c in listed)
    oldest = min(c["version"] for c in listed)
    # `models list` shows each model's version, applied count and last update
    wide = {**cli_env, "COLUMNS": "250"}
    row = next(ln for ln in cli("models", "list", env=wide).stdout.splitlines() if model in ln)
    newest = max(listed, key=lambda c: c["version"])
    cells = [c.strip() for c in row.split("│")]
    assert str(newest["version"]) in cells and "600" in cells, row
    assert time.strftime("%Y-%m-%d", time.localtime(newest["ts"])) in row, row
    r = cli("checkpoint", "rollback", model, str(oldest), "--yes", env=cli_env)
    assert r.returncode == 0, r.stderr
    # the undoing options go through as the API takes them (docs/checkpoints.md)
    undo = _json(cli("checkpoint", "rollback", model, str(newest["version"]), "--discard-after",
                     "--skip", "e-1", "--skip", "e-2", "--yes", "--json", env=cli_env))  # fmt: skip
    assert undo["discard_after"] is True and undo["skip_ids"] == ["e-1", "e-2"], undo


def _in_a_terminal(args: list[str], env: dict[str, str], answer: str) -> tuple[int, str]:
    """Run the CLI with a pseudo-terminal as stdin, typing ``answer``."""
    import pty

    master, slave = pty.openpty()
    try:
        os.write(master, answer.encode())
        proc = subprocess.run(
            [sys.executable, "-m", CLI_MODULE, *args],
            cwd=ROOT, env=env, stdin=slave, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        os.close(slave)
        os.close(master)
    return proc.returncode, proc.stdout + proc.stderr


def test_destructive_commands_need_yes_without_a_terminal(cli_env: dict[str, str]) -> None:
    model = _id("cli-yes")
    assert cli("models", "create", model, "-k", "pa", "-d", "2", env=cli_env).returncode == 0
    listed = cli("models", "list", env={**cli_env, "COLUMNS": "250"})
    row = next(ln for ln in listed.stdout.splitlines() if model in ln)
    assert "last update" in listed.stdout and row.rstrip(" │").endswith("-"), row
    for args in (["models", "delete", model], ["checkpoint", "rollback", model, "0"]):
        r = cli(*args, env=cli_env, input="y\n")  # a pipe: nobody is there to answer
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert "--yes" in r.stderr and "not a terminal" in r.stderr
    assert cli("models", "show", model, env=cli_env).returncode == 0  # still there
    # on a terminal it asks: "n" keeps the model, "y" deletes it
    code, text = _in_a_terminal(["models", "delete", model], cli_env, "n\n")
    assert code == 1 and "Delete model" in text and "Aborted" in text, text
    assert cli("models", "show", model, env=cli_env).returncode == 0
    code, text = _in_a_terminal(["models", "delete", model], cli_env, "y\n")
    assert code == 0 and f"deleted model {model}" in text, text
    assert cli("models", "show", model, env=cli_env).returncode == 1


def test_unreachable_broker_is_exit_1(cli_env: dict[str, str]) -> None:
    r = cli("replay", "synth-index", "--model", _id("cli-nokafka"), "--limit", "5",
            "--bootstrap", f"127.0.0.1:{free_port()}", env=cli_env)  # fmt: skip
    assert r.returncode == 1 and "Kafka at 127.0.0.1" in r.stderr
