"""The run directory of a torchrun job: agreed through a real TCP store, as torchrun's agent
serves it to its workers; without a store, named after the run id or refused in one line."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from torch.distributed import TCPStore

from gradsync.cluster import host_checks
from gradsync.cluster.env import TORCHRUN_VARS
from gradsync.cluster.run_name import agree, run_name_problem, torchrun_run_name

FRESH_NAME = re.compile(r"^\d{4}-\d\d-\d\d/\d\d-\d\d-\d\d-[0-9a-f]{8}$")


@pytest.fixture
def agent_store() -> Iterator[dict[str, str]]:
    """What torchrun tells a worker when its agent serves the store (static, c10d)."""
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    yield {
        "TORCHELASTIC_RUN_ID": "none",
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(store.port),
    }
    del store


def test_the_first_proposal_in_the_store_is_everyones(agent_store):
    port = int(agent_store["MASTER_PORT"])
    assert agree("127.0.0.1", port, "first") == "first"
    assert agree("127.0.0.1", port, "second") == "first"


def test_without_a_run_id_a_job_gets_a_fresh_dated_name(agent_store):
    name = torchrun_run_name(agent_store)
    assert FRESH_NAME.match(name), name
    # Another process of the same job (its own proposal) gets the same name.
    assert agree(agent_store["MASTER_ADDR"], int(agent_store["MASTER_PORT"]), "other") == name


def test_two_jobs_never_get_one_name():
    stores = [TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False) for _ in range(2)]
    names = {
        torchrun_run_name(
            {"TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_USE_AGENT_STORE": "True",
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(store.port)}
        )
        for store in stores
    }  # fmt: skip
    assert len(names) == 2


def test_a_real_run_id_tags_the_name(agent_store):
    name = torchrun_run_name({**agent_store, "TORCHELASTIC_RUN_ID": "job-42"})
    assert re.match(r"^\d{4}-\d\d-\d\d/\d\d-\d\d-\d\d-job-42$", name), name


def test_without_a_store_the_run_id_names_the_directory():
    env = {"TORCHELASTIC_RUN_ID": "job-42", "TORCHELASTIC_USE_AGENT_STORE": "False"}
    assert run_name_problem(env) is None
    assert torchrun_run_name(env) == "job-42"


def test_without_a_store_or_a_run_id_torchrun_is_refused_in_one_line(monkeypatch):
    for var in TORCHRUN_VARS:
        monkeypatch.setenv(var, "0" if var != "MASTER_ADDR" else "127.0.0.1")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "False")
    problem = host_checks.missing_torchrun_env()
    assert problem is not None and "\n" not in problem
    assert "--rdzv-id=" in problem


def test_outside_torchrun_nothing_is_asked():
    assert run_name_problem({}) is None
    assert FRESH_NAME.match(torchrun_run_name({}))
