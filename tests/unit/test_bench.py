"""The benchmark harness: rows and fields, the JSON file, the lockstep runner (no timing asserts)."""

from __future__ import annotations

import gc
import json
import math
import weakref

import pytest
import torch

from normlimits.experiments import bench
from normlimits.experiments.bench import BenchConfig, PeakMemory, run_bench
from normlimits.core.streaming import Lockstep

REQUIRED = ("workload", "seconds", "forward_seconds", "metric_seconds", "peak_rss_bytes",
            "paper_seconds")


def _windows(n=2, length=48, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, length), generator=g)


# ------------------------------------------------------------------------------------ the runner


def test_lockstep_feeds_every_item_to_every_consumer_in_order():
    seen = {"a": [], "b": []}

    def consumer(name):
        def fn(items):
            for x in items:
                seen[name].append(x)
            return sum(seen[name])
        return fn

    step = Lockstep({"a": consumer("a"), "b": consumer("b")})
    results = step.run(iter(range(5)))
    assert seen == {"a": list(range(5)), "b": list(range(5))}
    assert results == {"a": 10, "b": 10}
    assert step.items == 5
    assert set(step.metric_seconds) == {"a", "b"}
    assert all(v >= 0 for v in step.metric_seconds.values())
    assert all(len(step.item_seconds[k]) == 5 for k in "ab")
    assert len(step.produce_item_seconds) == 5
    for k in "ab":
        assert abs(sum(step.item_seconds[k]) + step.final_seconds[k] - step.metric_seconds[k]) < 1e-9


def test_lockstep_runs_one_consumer_at_a_time():
    active = []
    overlap = []

    def fn(items):
        for _ in items:
            active.append(1)
            overlap.append(len(active))
            torch.ones(200, 200) @ torch.ones(200, 200)
            active.pop()

    Lockstep({"x": fn, "y": fn, "z": fn}).run(iter(range(4)))
    assert overlap and max(overlap) == 1


def test_lockstep_final_step_and_early_return():
    def takes_two(items):
        out = []
        for x in items:
            out.append(x)
            if len(out) == 2:
                return out
        return out

    def whole(items):
        return list(items)

    results = Lockstep({"two": takes_two, "all": whole}).run(iter("abcd"))
    assert results == {"two": ["a", "b"], "all": list("abcd")}


def test_lockstep_reraises_a_consumer_error_and_stops():
    produced = []

    def source():
        for i in range(10):
            produced.append(i)
            yield i

    def bad(items):
        for x in items:
            if x == 2:
                raise ValueError("boom at 2")

    with pytest.raises(RuntimeError, match="boom at 2") as info:
        Lockstep({"ok": lambda items: list(items), "bad": bad}).run(source())
    assert isinstance(info.value.__cause__, ValueError)
    assert len(produced) == 3                      # stopped right after the failing item


def test_lockstep_reraises_a_producer_error():
    def source():
        yield 1
        raise KeyError("no window")

    with pytest.raises(KeyError):
        Lockstep({"ok": lambda items: list(items)}).run(source())


def test_lockstep_memory_is_flat_in_the_stream_length():
    """At most two items (current and previous) are alive at any time, whatever the length."""

    class Item:
        pass

    alive = weakref.WeakSet()
    most = []

    def source():
        for _ in range(12):
            gc.collect()
            most.append(len(alive))
            item = Item()
            alive.add(item)
            yield item

    def consumer(items):
        n = 0
        for _ in items:
            n += 1
        return n

    results = Lockstep({"a": consumer, "b": consumer}).run(source())
    assert results == {"a": 12, "b": 12}
    assert max(most) <= 2


def test_peak_memory_reads_a_positive_peak():
    import psutil

    mem = PeakMemory()
    mem.reset()
    block = torch.ones(4 * 2**20)                    # 16 MiB, touched
    now = psutil.Process().memory_info().rss
    peak = mem.peak()
    assert peak >= now - 2**20
    assert mem.overall() >= peak
    del block


# --------------------------------------------------------------------------------- the bench


def test_config_grids_follow_the_window_length():
    cfg = BenchConfig()
    assert cfg.lengths == [32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024]
    assert cfg.top_n_grid == [1, 5, 10, 20, 100]
    assert cfg.separability_grid == [1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128]
    assert len(cfg.separability_rows) == 128 and cfg.separability_rows[-1] == 1023
    assert cfg.separability_rows == sorted(set(cfg.separability_rows))
    assert BenchConfig(separability_row_count=None).separability_rows is None
    assert len(cfg.query_rows) == 64 and cfg.query_rows[-1] == 1023
    assert len(cfg.temperatures) == 21
    small = BenchConfig(length=48)
    assert small.lengths == [32, 48]
    assert small.top_n_grid == [1, 5, 10, 20]
    assert small.separability_grid[-1] == 32
    assert BenchConfig(length=48, separability_row_count=64).separability_rows == small.query_rows
    assert max(small.query_rows) == 47
    with pytest.raises(ValueError):
        BenchConfig(length=1)


def test_paper_table_matches_the_spec():
    seconds = {k: v[1] for k, v in bench.PAPER_TABLE1.items()}
    assert seconds == {"distance_vs_length": 1440.0, "distance_vs_top_n": 2220.0,
                       "critical_n": 61440.0, "separability": 420.0, "gradient": 60.0}
    assert abs(sum(seconds.values()) / 3600 - 18.2) < 0.1      # "about 18.3 hours"
    assert [w.name for w in bench.WORKLOADS] == list(bench.PAPER_TABLE1)


@pytest.fixture(scope="module")
def small_run():
    from conftest import make_tiny_gpt2
    from normlimits.model.pretrained import LoadedModel, byte_encode

    loaded = LoadedModel(model=make_tiny_gpt2(), name="tiny", source="test", encode=byte_encode,
                         tokenizer_kind="bytes", is_paper_model=False)
    windows = _windows(2, 48)
    return loaded, windows, run_bench(loaded, windows, setup_seconds=0.5)


def test_rows_and_fields(small_run):
    _, _, result = small_run
    rows = result.rows
    assert [r["workload"] for r in rows] == [w.name for w in bench.WORKLOADS] + ["total"]
    for r in rows:
        for key in REQUIRED:
            assert key in r, (r["workload"], key)
        assert r["seconds"] > 0 and r["forward_seconds"] > 0 and r["metric_seconds"] > 0
        assert r["peak_rss_bytes"] > 0 and r["paper_seconds"] > 0
        assert math.isclose(r["speedup"], r["paper_seconds"] / r["seconds"])
        assert r["windows"] == 2 and r["length"] == 48 and r["model"] == "tiny"
    for r in rows[:-1]:
        assert len(r["metric_seconds_by_window"]) == 2
        assert r["metric_seconds"] >= sum(r["metric_seconds_by_window"]) - 1e-9
    assert len(rows[-1]["forward_seconds_by_window"]) == 2
    total = result.total
    work = rows[:-1]
    assert math.isclose(total["metric_seconds"], sum(r["metric_seconds"] for r in work))
    assert all(math.isclose(r["forward_seconds"], total["forward_seconds"]) for r in work)
    assert all(math.isclose(r["seconds"], r["forward_seconds"] + r["metric_seconds"]) for r in work)
    assert math.isclose(sum(r["shared_seconds"] for r in work), total["shared_seconds"])
    assert total["seconds"] >= total["forward_seconds"] + total["metric_seconds"] - 1e-6
    assert total["setup_seconds"] == 0.5
    assert total["paper_seconds"] == sum(v[1] for v in bench.PAPER_TABLE1.values())
    json.dumps(rows)                                     # JSON-able as they are


def test_results_equal_the_functions_called_directly(small_run):
    """Lockstep streaming gives exactly what the chapters' functions give on the same windows."""
    from normlimits.metrics import distances, jacobian
    from normlimits.model.capture import iter_captures
    from normlimits.metrics.critical_n import critical_n_search

    loaded, windows, result = small_run
    cfg = BenchConfig(length=windows.shape[1])
    direct_l = distances.sweep_length(iter_captures(loaded, windows), cfg.lengths, n=cfg.fixed_n)
    got = result.results["distance_vs_length"]
    for name, value in direct_l.fields.items():
        assert torch.equal(value, got.fields[name]), name
    direct_c = critical_n_search(iter_captures(loaded, windows), cfg.lengths, protocol="last_row",
                                 alphas=cfg.alphas)
    assert direct_c.critical == result.results["critical_n"].critical
    rows = torch.tensor(cfg.query_rows)
    direct_g = jacobian.sensitivity_profile((c.logits(rows) for c in iter_captures(loaded, windows)),
                                            cfg.temperatures, cfg.epsilons, seed=0)
    assert torch.equal(direct_g.g, result.results["gradient"].g)
    from normlimits.experiments.separability_sweep import separability_sweep

    direct_s = separability_sweep(iter_captures(loaded, windows), cfg.separability_grid,
                                  kinds=("values",), rows=None, bounds=True)
    got_s = result.results["separability"]
    assert torch.equal(direct_s.fraction["values"], got_s.fraction["values"])
    assert torch.equal(direct_s.upper["values"], got_s.upper["values"])


def test_write_rows_is_atomic(tmp_path, monkeypatch):
    rows = [{"workload": "total", "seconds": 1.0}]
    path = bench.write_rows(rows, tmp_path / "out" / "bench.json")
    assert json.loads(path.read_text()) == rows
    assert bench.read_rows(path) == rows
    assert bench.read_rows(tmp_path / "missing.json") is None

    import normlimits.core.cache as cache

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(cache.os, "replace", broken_replace)
    with pytest.raises(OSError):
        bench.write_rows([{"workload": "total", "seconds": 2.0}], path)
    assert json.loads(path.read_text()) == rows           # the old file is intact
    assert [p.name for p in path.parent.iterdir()] == ["bench.json"]   # no temporary left


def test_format_table_and_frame(small_run):
    _, _, result = small_run
    text = bench.format_table(result.rows)
    assert "Alg. 3 (critical N)" in text and "17 h 4 min" in text and "total" in text
    frame = bench.table_frame(result.rows)
    assert list(frame["workload"]) == [r["workload"] for r in result.rows]


def test_unknown_workload_and_bad_windows(small_run):
    loaded, windows, _ = small_run
    with pytest.raises(ValueError, match="unknown workload"):
        run_bench(loaded, windows, workloads=["nope"])
    with pytest.raises(ValueError, match="W, L"):
        run_bench(loaded, windows[0])
    with pytest.raises(ValueError, match="config is for"):
        run_bench(loaded, windows, BenchConfig(length=64))


def test_subset_of_workloads(small_run):
    loaded, windows, _ = small_run
    result = run_bench(loaded, windows[:1], workloads=["gradient"])
    assert [r["workload"] for r in result.rows] == ["gradient", "total"]
    assert result.total["paper_seconds"] == 60.0


def test_command_line_end_to_end(tmp_path, monkeypatch, capsys):
    """``python -m normlimits.experiments.bench`` on a saved tiny byte-level model: table printed, JSON written."""
    from conftest import make_tiny_gpt2
    from normlimits.model.pretrained import BYTE_TOKENIZER_FILE

    folder = tmp_path / "tiny-model"
    make_tiny_gpt2().save_pretrained(folder)
    (folder / BYTE_TOKENIZER_FILE).write_text(json.dumps({"kind": "bytes"}))
    out = tmp_path / "bench.json"
    code = bench.main(["--model", str(folder), "--windows", "1", "--length", "40",
                       "--output", str(out), "--quiet"])
    assert code == 0
    rows = json.loads(out.read_text())
    assert rows[-1]["workload"] == "total" and rows[-1]["windows"] == 1
    assert rows[-1]["length"] == 40
    printed = capsys.readouterr().out
    assert "speed-up" in printed and str(out) in printed


def test_separability_rows_option_parses_counts_and_every():
    parser = bench._parser()
    assert parser.parse_args([]).separability_rows == BenchConfig.separability_row_count
    assert parser.parse_args(["--separability-rows", "every"]).separability_rows is None
    assert parser.parse_args(["--separability-rows", "32"]).separability_rows == 32
    for bad in ("0", "-3", "some"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--separability-rows", bad])
