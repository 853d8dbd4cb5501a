"""`plan --length-histogram FILE`: the text lengths of the training samples, read as the slowest
rank's padded batch needs them (estimate/length_spread.py).

The file: one `tokens count` pair per line (whitespace or a comma between; `#` starts a comment;
a first line of words, such as a CSV header `length,count`, is skipped), e.g. the histogram of a
dataset's tokenized text lengths. Bad input is one SpecError line naming the file, the line and
the fix: an unreadable file, a line that is not two numbers, a length that is not a positive
integer, a negative count, no samples at all.
"""

from __future__ import annotations

from pathlib import Path

from prism_strategy.specs.errors import SpecError

FORMAT = "one 'tokens count' pair per line, e.g. '128 5400'"


def read_length_histogram(path: str) -> tuple[tuple[int, float], ...]:
    p = Path(path)
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"--length-histogram {path}: cannot read it ({e.__class__.__name__}); give {FORMAT}") from None
    out: list[tuple[int, float]] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].replace(",", " ").split()
        if not line:
            continue
        if n == 1 and not any(c.isdigit() for c in "".join(line)):
            continue  # a header
        if len(line) != 2:
            raise SpecError(f"--length-histogram {path}:{n}: {raw.strip()!r} is not two numbers; give {FORMAT}")
        try:
            length, count = float(line[0]), float(line[1])
        except ValueError:
            raise SpecError(
                f"--length-histogram {path}:{n}: {raw.strip()!r} is not two numbers; give {FORMAT}"
            ) from None
        if length != int(length) or length < 1:
            raise SpecError(
                f"--length-histogram {path}:{n}: length {line[0]} must be a positive whole number of tokens"
            )
        if count < 0:
            raise SpecError(f"--length-histogram {path}:{n}: count {line[1]} must be >= 0")
        out.append((int(length), count))
    if not out or sum(c for _, c in out) <= 0:
        raise SpecError(f"--length-histogram {path}: holds no samples; give {FORMAT} with counts > 0")
    return tuple(out)
