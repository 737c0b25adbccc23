"""A core on a thread makes its address (a private directory) and its lifeline (a pipe) when it
starts and releases them when joined: an app whose lifespan never runs (a test client used without
``with``) leaves neither behind, and closing its client does not fail."""
from __future__ import annotations

import asyncio
import os
import tempfile

import pytest

from anydev.core import EngineConfig, InferEngine
from anydev.core.loading.checkpoint import demo_checkpoint
from anydev.serving import create_app
from anydev.serving.async_engine import AsyncEngine
from anydev.serving.engine_core import EngineCoreThread


@pytest.fixture(scope="module")
def engine():
    with InferEngine(demo_checkpoint(), EngineConfig(max_model_len=128, use_graphs=False)) as engine:
        yield engine


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """The addresses' directories go under ``tmp_path`` (tempfile's default directory), empty at first."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_core_never_started_makes_nothing_and_joins_at_once(engine, private_tmp):
    core = EngineCoreThread(engine)
    assert core.address is None and list(private_tmp.iterdir()) == []
    core.join(timeout=0.1)                 # nothing to wait for, nothing to release


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts open files through /proc (Linux)")
def test_an_app_never_started_leaves_no_directory_or_pipe(engine, private_tmp):
    before = open_fds()
    for _ in range(3):
        create_app(engine, "anydev-demo")
    assert list(private_tmp.iterdir()) == []
    assert open_fds() == before


def test_a_started_core_releases_its_directory_when_closed(engine, private_tmp):
    async def run():
        client = AsyncEngine.unstarted_over(engine)
        await client.close(timeout=10)         # never connected: nothing to stop
        client = AsyncEngine.unstarted_over(engine)
        await client.connect()
        assert len(list(private_tmp.iterdir())) == 1          # the started core's address
        await client.close(timeout=10)

    asyncio.run(run())
    assert list(private_tmp.iterdir()) == []
