"""The benchmark runner's bookkeeping (the suites themselves are run by `daskclust bench`)."""

from __future__ import annotations

from daskclust.bench.runner import Table, machine, page_for, update_docs


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


def test_a_suite_is_written_in_the_page_holding_its_markers(tmp_path):
    default = tmp_path / "benchmarks.md"
    default.write_text("# Benchmarks\n")
    (tmp_path / "guide").mkdir()
    other = tmp_path / "guide" / "scaling.md"
    other.write_text("# Scaling\n\n<!-- bench:model -->\nold\n<!-- /bench:model -->\n\nkept after\n")
    assert page_for(default, "model") == other
    assert page_for(default, "overhead") == default  # no page holds its markers: the benchmarks page
    update_docs(page_for(default, "model"), "model", Table("new", ["x"], [[1]]), "cmd", machine())
    text = other.read_text()
    assert "new" in text and "old" not in text and text.endswith("kept after\n")
    assert "model" not in default.read_text()
