"""The benchmark runner's bookkeeping (the suites themselves are run by `daskclust bench`)."""

from __future__ import annotations

from daskclust.bench.runner import Table, machine, update_docs


def test_table_markdown_escapes_pipes_and_formats_numbers():
    table = Table("t", ["a", "b"], [["k-means||", 1.23456789]], ["a note"])
    text = table.markdown()
    assert "| k-means\\|\\| | 1.235 |" in text and "- a note" in text
    assert table.records() == [{"a": "k-means||", "b": 1.23456789}]


def test_update_docs_replaces_its_section_only(tmp_path):
    page = tmp_path / "benchmarks.md"
    page.write_text("# Benchmarks\n\nintro kept\n")
    info = machine()
    update_docs(page, "demo", Table("first", ["x"], [[1]]), "daskclust bench --suite demo", info)
    update_docs(page, "other", Table("other", ["y"], [[2]]), "cmd", info)
    update_docs(page, "demo", Table("second", ["x"], [[3]]), "daskclust bench --suite demo", info)
    text = page.read_text()
    assert "intro kept" in text and text.count("<!-- bench:demo -->") == 1
    assert "second" in text and "first" not in text and "| 3 |" in text and "| 2 |" in text
    assert f"{info['cpu_count']} cores" in text
