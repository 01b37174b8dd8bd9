"""`gateway completion`: the script, run by a real bash, completes commands and flags that
exist, read from the parser itself."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from gateway.cli import build_parser, main
from gateway.cli.completion_cmd import command_table


def complete(script: str, *words: str) -> list[str]:
    program = (
        script
        + f"COMP_WORDS=({' '.join(repr(w) for w in ('gateway', *words))}); "
        + f"COMP_CWORD={len(words)}; _gateway_complete; printf '%s\\n' \"${{COMPREPLY[@]}}\"\n"
    )
    done = subprocess.run(
        ["bash", "--norc", "-c", program], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completes_commands_subcommands_and_flags(capsys) -> None:
    assert main(["completion", "bash"]) == 0
    script = capsys.readouterr().out
    assert complete(script, "pol") == ["policy"]
    assert complete(script, "config", "") == ["check"]
    assert "--resolve" in complete(script, "policy", "explain", "--")
    assert complete(script, "serve", "--config", "x", "--log") == ["--log-level"]
    assert complete(script, "completion", "") == ["bash", "zsh"]


def test_zsh_uses_bash_completion_support(capsys, tmp_path) -> None:
    assert main(["completion", "zsh"]) == 0
    script = capsys.readouterr().out
    assert script.startswith("autoload -U +X bashcompinit && bashcompinit\n")
    assert script.rstrip().endswith("complete -o default -F _gateway_complete gateway")
    if shutil.which("zsh") is None:
        pytest.skip("zsh is not installed (.ci/run installs it)")
    path = tmp_path / "gateway.zsh"
    path.write_text(script)
    # zsh runs a bash completion function under `emulate sh` (0-based arrays); compsys then
    # filters the candidates by the word typed, so all of a position's words come back.
    program = (
        f"autoload -U compinit && compinit -u -D; source {path}; print -r -- $_comps[gateway]; "
        "emulate sh; COMP_WORDS=(gateway policy explain --); COMP_CWORD=3; "
        '_gateway_complete; echo "${COMPREPLY[@]}"'
    )
    done = subprocess.run(
        ["zsh", "-f", "-c", program],
        capture_output=True,
        text=True,
        timeout=30,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    registered, flags = done.stdout.splitlines()
    assert registered.endswith("-F _gateway_complete")
    assert "--resolve" in flags.split()


def test_the_table_is_the_parser() -> None:
    table = command_table(build_parser())
    assert set(table[""][0]) >= {"serve", "init", "config", "token", "completion", "audit"}
    assert "--key" in table["audit verify"][1]
