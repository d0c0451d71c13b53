"""MkDocs hook: the CLI reference page is generated from ``daskclust``'s own argument parser.

The marker ``<!-- cli-reference -->`` in ``docs/cli.md`` is replaced by one section per
sub-command: its help, usage and a table of its arguments (flags, default, help), so the page
cannot drift from the parser the command line runs.
"""

from __future__ import annotations

import argparse

MARKER = "<!-- cli-reference -->"


def on_page_markdown(markdown: str, page, config, files, **kwargs) -> str:
    if page.file.src_uri != "cli.md":
        return markdown
    from daskclust.cli.main import build_parser

    return markdown.replace(MARKER, reference(build_parser()))


def reference(parser: argparse.ArgumentParser) -> str:
    """Markdown for every sub-command of ``parser``."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help for choice in sub._choices_actions}
    out = []
    for name, command in sub.choices.items():
        out += [f"## `daskclust {name}`", "", helps.get(name) or command.description or "", "",
                "```text", command.format_usage().strip(), "```", "",
                "| argument | default | description |", "|---|---|---|"]
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            flags = ", ".join(f"`{s}`" for s in action.option_strings) or f"`{action.dest.upper()}`"
            if action.choices:
                flags += "<br>one of " + ", ".join(f"`{c}`" for c in action.choices)
            default = "" if action.default in (None, False, argparse.SUPPRESS) or not action.option_strings \
                else f"`{action.default}`"
            text = (action.help or "") % {"default": action.default, "prog": command.prog}
            out.append(f"| {flags} | {default} | {text.replace('|', '&#124;')} |")
        out.append("")
    return "\n".join(out)
