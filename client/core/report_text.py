"""A tool's rich report rendered to text first, then written to stdout in one go (client.core.human_out's
`write_report`): a stdout that cannot be written (`> /dev/full`, a closed pipe) is then one error with its
exit code, never a traceback from inside rich. Colours stay on a terminal, as rich gives them there."""

from __future__ import annotations

import io
import sys
from collections.abc import Callable

from rich.console import Console

from client.core.human_out import write_report


def print_report(draw: Callable[[Console], None], piped_width: int) -> None:
    """Render with `draw` onto a console as wide as the terminal (`piped_width` columns when stdout is not
    one) and write the text to stdout."""
    tty = sys.stdout.isatty()
    text = io.StringIO()
    console = Console(file=text, highlight=False, force_terminal=tty, width=None if tty else piped_width)
    draw(console)
    write_report(text.getvalue())
