"""What every command prints through: the console, and a refusal of its own arguments."""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape

console = Console(width=None if Console().is_terminal else 140)


def refuse(what: str, fix: str, code: int = 2) -> NoReturn:
    """A mistake in the command's own arguments: one line on stderr, as main() prints the
    others (`engram: what; fix`), and a non-zero exit."""
    Console(stderr=True, width=console.width).print(
        f"[red]engram: {escape(what)}; {escape(fix)}[/red]", soft_wrap=True
    )
    raise typer.Exit(code)
