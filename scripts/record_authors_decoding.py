"""Record what the authors' answer decoder makes of a list of strings: the test data of ``decoding: authors``.

The decoder is ``ArcDataset.decode`` in the authors' ``arc_loader.py`` (da-fr/Product-of-Experts-ARC-Paper,
commit 82619f6, lines 371-394; the same function is in da-fr/arc-prize-2024's ``training_code/arc_loader.py``).
This script imports that file from where you have it (it is not part of the kit and is not copied into it),
calls the function on each string of ``STRINGS`` and writes the strings with the grids it returned (or null)
as JSON. The file needs numpy and tqdm only. With ``key=None`` the function never touches ``self``.

    python scripts/record_authors_decoding.py PATH/TO/arc_loader.py > tests/data/authors_decoding.json

A string is what the authors decode: the generated tokens up to and including the first eos (spelled
``<eos>`` here, as the kit's vocabulary spells it), or all of them when there is none. Not run in CI.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import sys

# Strings the kit's 64-symbol vocabulary can spell (the test feeds them in as token ids), then a few it
# cannot (the test feeds those to the text-level reader only).
STRINGS = [
    "12\n34\n<eos>", "12\n34<eos>", "12\n34\n", "7<eos>", "0\n<eos>", "9876543210\n<eos>",
    "1A2\n3B4\n<eos>", "12\n3I\n<eos>", "12\n\n34\n<eos>", "\n56\n<eos>", "12\n\n<eos>",
    "<eos>", "", "\n<eos>", "\n\n\n<eos>", "12\n345\n<eos>", "12\n3<eos>", "12\n\n345\n<eos>",
    "1" * 31 + "\n<eos>", "1\n" * 31 + "<eos>", "1\n" * 30 + "<eos>", ("1" * 30 + "\n") * 30 + "<eos>",
    "\n".join(["2" * 30] * 30) + "<eos>",
    "+/-=O12\n34\n<eos>", "I12\n+/-=O34\n<eos>", "1<bos>2\n<eos>", "ABC\n12\n<eos>", "12<pad>\n34\n<eos>",
    "1A\n<eos>", "AB\nCD\n<eos>", "12\n34\nI56\n<eos>",
    "1\u00b2\n<eos>", "\u06634\n<eos>", "12 \n 34\n", "12\r\n34\r\n", "1.5\n2,6\n", "-1\n<eos>",
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("arc_loader", help="the authors' arc_loader.py")
    args = parser.parse_args()
    spec = importlib.util.spec_from_file_location("authors_arc_loader", args.arc_loader)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    import numpy

    cases = []
    for text in STRINGS:
        grid, _, _ = module.ArcDataset.decode(None, text, "\n")
        cases.append({"text": text, "grid": None if grid is None else grid.tolist()})
    head = {"source": "ArcDataset.decode, da-fr/Product-of-Experts-ARC-Paper@82619f6 arc_loader.py lines 371-394",
            "run": f"python {platform.python_version()}, numpy {numpy.__version__}"}
    lines = [json.dumps(case, ensure_ascii=True) for case in cases]  # one case a line
    sys.stdout.write(json.dumps(head)[:-1] + ', "cases": [\n ' + ",\n ".join(lines) + "\n]}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
