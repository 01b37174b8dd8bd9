"""Every command, argument and flag of `gateway` says what it is for in --help."""

from __future__ import annotations

import argparse

from gateway.cli import build_parser


def undocumented(parser: argparse.ArgumentParser, path: str = "gateway") -> list[str]:
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            documented = {choice.dest: choice.help for choice in action._choices_actions}
            for name, child in action.choices.items():
                if not documented.get(name):
                    missing.append(f"{path} {name}")
                missing.extend(undocumented(child, f"{path} {name}"))
        elif not action.help:
            missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
    return missing


def test_every_flag_and_argument_has_help() -> None:
    assert undocumented(build_parser()) == []
