"""Progress bars of long passes (shown only when asked for), and library messages through logging."""

from __future__ import annotations

import logging
import re
import time

import pytest
import zarr
from distributed import Client, LocalCluster

import daskclust
from daskclust.cli import main
from daskclust.engine.events import TOPIC
from daskclust.transforms import LightweightCoreset, Sketch

from conftest import blobs

CHUNK = 100


@pytest.fixture(scope="module")
def fresh():
    """Two in-process workers on a scheduler of their own: the chunk events it holds are this module's."""
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False) as client:
        yield client


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    X = blobs(600, 3, 4, seed=1)[0]
    path = tmp_path_factory.mktemp("progress") / "X.zarr"
    z = zarr.create_array(str(path), shape=X.shape, chunks=(CHUNK, 3), dtype=X.dtype)
    z[:] = X
    return str(path)


def streamed(**params):
    """A KMeans whose data exceed its memory budget: every pass streams the store."""
    return daskclust.KMeans(4, random_state=0, max_iter=3, memory_budget=1000, chunk_rows=CHUNK, **params)


def n_events(client) -> int:
    return len(client.get_events(TOPIC))


def wait_for_events(client, expected: int) -> int:
    """The scheduler's count of chunk events once it reaches ``expected`` (they travel apart from
    the pass's result), or after 10 s."""
    deadline = time.monotonic() + 10
    while n_events(client) < expected and time.monotonic() < deadline:
        time.sleep(0.05)
    return n_events(client)


def bars(err: str) -> set[str]:
    """The passes that showed a bar: their names."""
    return set(re.findall(r"([a-z -]+ \(pass \d+\)):", err))


def test_a_quiet_fit_and_predict_print_nothing_and_send_no_events(fresh, store, tmp_path, capsys):
    before = n_events(fresh)
    model = streamed().fit(store, client=fresh)
    with fresh.as_current():
        model.predict(store, output=tmp_path / "labels.zarr")
    time.sleep(0.5)  # an event sent would have reached the scheduler by now
    assert n_events(fresh) == before
    assert capsys.readouterr() == ("", "")


def test_a_verbose_streamed_fit_shows_a_bar_per_pass_advanced_by_its_chunks(fresh, store, capsys):
    before = n_events(fresh)
    model = streamed(verbose=1).fit(store, client=fresh)
    out, err = capsys.readouterr()
    shown = bars(err)
    seeding = {name for name in shown if name.startswith("seeding")}
    passes = {name for name in shown if name.startswith("streamed pass")}
    assert seeding and len(passes) == len(model.history_) + 1  # every E-step pass, then the exact inertia's
    assert shown == seeding | passes
    assert err.count("| 6/6 [") >= len(shown)  # each bar shown complete (6 chunks)
    assert "Iteration 0, inertia" in out and "done:" in out  # the iteration lines (logging shows no INFO here)
    assert wait_for_events(fresh, before + 6 * len(shown)) == before + 6 * len(shown)  # one event per chunk


def test_a_persisted_fit_shows_bars_for_its_seeding_only(fresh, capsys):
    X = blobs(600, 3, 4, seed=1)[0]
    daskclust.KMeans(4, random_state=0, max_iter=3, chunk_rows=CHUNK, verbose=1).fit(X, client=fresh)
    shown = bars(capsys.readouterr().err)
    assert shown and all(name.startswith("seeding") for name in shown)


def test_the_cli_shows_bars_for_a_streamed_fit_and_a_predict_to_zarr(fresh, store, tmp_path, capsys):
    address = fresh.scheduler.address
    model, labels = str(tmp_path / "m.zarr"), str(tmp_path / "l.zarr")
    assert main(["fit", store, "--clusters", "4", "--max-iter", "2", "--memory-budget", "1000", "--chunk-rows",
                 str(CHUNK), "--output", model, "--scheduler", address]) == 0
    err = capsys.readouterr().err
    assert any(name.startswith("seeding") for name in bars(err))
    assert any(name.startswith("streamed pass") for name in bars(err))
    assert ("daskclust: KMeans: 600 x 3 in 6 chunks on 2 worker(s), streamed from the source every pass "
            "(data 0.0 MB exceed the memory budget of 0.0 MB)") in err  # logged
    assert "daskclust: seeding (k-means||)" in err
    assert main(["predict", model, store, "--output", labels, "--scheduler", address]) == 0
    assert re.search(r"writing labels: 100%.* (\d+)/\1 \[", capsys.readouterr().err)  # left complete
    assert main(["predict", model, store, "--output", labels, "--overwrite", "--quiet", "--scheduler", address]) == 0
    assert "writing labels" not in capsys.readouterr().err
    assert main(["--log-level", "WARNING", "fit", store, "--clusters", "4", "--max-iter", "1", "--output",
                 str(tmp_path / "m2.zarr"), "--scheduler", address]) == 0
    out, err = capsys.readouterr()  # the messages neither logged nor printed; the bars and lines still shown
    assert "seeding (k-means||)" not in out + err and "daskclust: " not in err
    assert "Iteration 0, inertia" in out and "seeding (pass 1)" in err


def test_sketch_and_coreset_passes_show_bars_when_verbose(fresh, capsys):
    X = blobs(600, 8, 4, seed=2)[0]
    Sketch(3, verbose=1).fit_transform(X, client=fresh, chunk_rows=CHUNK)
    LightweightCoreset(50, verbose=1).fit_transform(X, client=fresh, chunk_rows=CHUNK)
    shown = bars(capsys.readouterr().err)
    assert {name.split(" (")[0] for name in shown} == {"sketch", "coreset"}
    assert len([name for name in shown if name.startswith("coreset")]) == 3  # its three passes
    Sketch(3).fit_transform(X, client=fresh, chunk_rows=CHUNK)
    LightweightCoreset(50).fit_transform(X, client=fresh, chunk_rows=CHUNK)
    assert capsys.readouterr() == ("", "")


def test_library_messages_go_through_logging_at_info(fresh, store, tmp_path, caplog, capsys):
    with caplog.at_level(logging.INFO, logger="daskclust"):
        streamed().fit(store, client=fresh, checkpoint=tmp_path / "run", checkpoint_every=1)
    messages = [r.getMessage() for r in caplog.records if r.name == "daskclust" and r.levelno == logging.INFO]
    assert any("streamed from the source every pass (data 0.0 MB exceed the memory budget" in m for m in messages)
    assert any(m.startswith("seeding (k-means||): ") for m in messages)
    assert any(m.startswith("checkpoint of iteration 1 written: ") for m in messages)
    assert any(m.startswith("done: ") for m in messages)
    assert capsys.readouterr() == ("", "")  # verbose=0: logged, never printed
