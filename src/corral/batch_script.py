"""A batch script's #SBATCH directives, found as sbatch finds them: the lines that start with
`#SBATCH` after the #! line, up to the first line that is neither blank nor a comment (a directive
after a command is a comment to sbatch too). Each directive's words are split as a shell splits
them (quotes kept together, `#` after a space starting a comment) and grouped into options as a
command line gives them (`--mem=4G`, `--mem 4G`, `-c4`, `-c 4`), which `corral submit` then parses
as its own options (one parser for both: corral.cli)."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DIRECTIVE = "#SBATCH"


@dataclass(frozen=True, slots=True)
class Directive:
    """One option of a directive line: `words` as a command line would give it (`["--mem=4G"]`,
    `["-c", "4"]`); `spelling` the option as written (`--mem`, `-c`); `known` whether corral takes it."""

    line: int  # its line in the script, from 1
    text: str  # the line as written
    spelling: str
    words: tuple[str, ...]
    known: bool


class DirectiveError(ValueError):
    """A directive line that cannot be read (an unclosed quote); `line` is its number."""

    def __init__(self, line: int, text: str, problem: str) -> None:
        super().__init__(problem)
        self.line = line
        self.text = text


def directive_lines(script: str) -> list[tuple[int, str]]:
    """The #SBATCH lines, with their numbers, that sbatch reads as options."""
    found = []
    for number, line in enumerate(script.split("\n")[1:], start=2):
        stripped = line.strip()
        if not stripped:
            continue
        if not stripped.startswith("#"):
            break
        if line.startswith(DIRECTIVE) and (len(line) == len(DIRECTIVE) or line[len(DIRECTIVE)].isspace()):
            found.append((number, line))
    return found


def directives(script: str, takes_value: Mapping[str, bool]) -> list[Directive]:
    """The script's directives, option by option. `takes_value`: corral's spellings (`--mem`,
    `-c`) and whether each takes a value. An option corral does not take is still listed (known
    False), with the word after it when that word is no option (its value, most likely)."""
    found = []
    for number, line in directive_lines(script):
        try:
            words = shlex.split(line[len(DIRECTIVE) :], comments=True)
        except ValueError as exc:  # shlex's "No closing quotation"
            raise DirectiveError(number, line, str(exc).lower()) from None
        at = 0
        while at < len(words):
            word = words[at]
            if word.startswith("--"):
                spelling, given, _ = word.partition("=")
                attached = bool(given)
            elif word.startswith("-") and len(word) > 1:
                spelling, attached = word[:2], len(word) > 2
            else:
                # A word that is no option: sbatch would take it for one's value; nothing to apply.
                found.append(Directive(number, line, word, (word,), False))
                at += 1
                continue
            known = spelling in takes_value
            if known:
                wants_value = takes_value[spelling] and not attached
            else:
                following = words[at + 1] if at + 1 < len(words) else None
                wants_value = not attached and following is not None and not following.startswith("-")
            group = tuple(words[at : at + 2]) if wants_value else (word,)
            found.append(Directive(number, line, spelling, group, known))
            at += len(group)
    return found


def write_script(path: Path, text: str) -> None:
    """Write a batch script's copy where it runs from (an agent's attempt directory, or under
    slurm.work_dir): mode 0700, the job's user's alone, as slurmd keeps a job's script; never
    through a link left at `path`."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o700)
    with open(descriptor, "w", encoding="utf-8", newline="") as file:
        os.fchmod(descriptor, 0o700)  # (the mode given applies to a new file only, under the umask)
        file.write(text)
