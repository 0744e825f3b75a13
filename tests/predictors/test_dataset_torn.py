"""A torn last row (a killed write) never swallows the next row."""

from __future__ import annotations

from nnmeter.predictors.dataset import KernelDataset


def test_a_row_after_a_torn_tail_starts_its_own_line(tmp_path):
    ds = KernelDataset(tmp_path, "ort-cpu")
    ds.append("relu", {"config": {"cin": 1}, "latency_ms": 0.1})
    with open(ds.path("relu"), "a") as fh:
        fh.write('{"config": {"cin": 2}, "laten')  # killed mid-write
    ds.append("relu", {"config": {"cin": 3}, "latency_ms": 0.3})
    rows = ds.rows("relu")
    assert [r["config"]["cin"] for r in rows] == [1, 3]
    ds.append_raw("builds.jsonl", {"minutes": 1})
    with open(tmp_path / "builds.jsonl", "a") as fh:
        fh.write('{"minu')
    ds.append_raw("builds.jsonl", {"minutes": 2})
    lines = (tmp_path / "builds.jsonl").read_text().splitlines()
    assert lines[0] == '{"minutes": 1}' and lines[-1] == '{"minutes": 2}'


def test_a_second_writer_is_refused_naming_the_holder(tmp_path):
    import subprocess
    import sys
    import textwrap

    import pytest

    from nnmeter.errors import DatasetError

    ds = KernelDataset(tmp_path, "ort-cpu")
    with ds.writer_lock("build"):
        code = textwrap.dedent(f"""
            from nnmeter.predictors.dataset import KernelDataset
            from nnmeter.errors import DatasetError
            try:
                with KernelDataset({str(tmp_path)!r}, "ort-cpu").writer_lock():
                    print("got it")
            except DatasetError as err:
                print("refused:", err)
        """)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=120).stdout
        assert out.startswith("refused:") and "build pid" in out and "--dataset" in out
    with ds.writer_lock():  # released: a later build goes ahead
        pass
    with pytest.raises(DatasetError):
        with ds.writer_lock():
            with KernelDataset(tmp_path, "ort-cpu").writer_lock():
                pass
