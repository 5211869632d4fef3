"""How often an arc-kit command reads its model folder: calls into the folder modules, folder checks, tokenizer loads
and JSON files read, counted with a profiler hook around the command (nothing in the kit changes).

    OMP_NUM_THREADS=1 python scripts/folder_reads.py dry-run --tasks 1 --out /tmp/reads

The command runs as ``arc-kit`` would run it (its output as usual); the counts go to stderr at the end. A call
"into" a module is one from another file (calls inside the module are its own work).
"""

from __future__ import annotations

import collections
import sys
import threading

MODULES = ("arc_kit/model/folders.py", "arc_kit/model/loading.py", "arc_kit/model/description.py")
READS = {"checked_configs": "folder checks", "checked_model_folder": "folder checks",  # the latter: kits before 2026-12
         "load_tokenizer": "tokenizer loads", "read_json": "JSON files read"}


def main() -> int:
    entries, reads, files = collections.Counter(), collections.Counter(), collections.Counter()

    def profile(frame, event, _):
        if event != "call" or frame.f_code.co_name.startswith("<"):
            return
        file, name = frame.f_code.co_filename, frame.f_code.co_name
        if file.endswith("arc_kit/model/folders.py") and name in READS:
            reads[READS[name]] += 1
            if name == "read_json":
                files[str(frame.f_locals.get("path"))] += 1
        module = next((module for module in MODULES if file.endswith(module)), None)
        if module and (frame.f_back is None or frame.f_back.f_code.co_filename != file):
            entries[module] += 1

    from arc_kit.cli import main as arc_kit

    sys.setprofile(profile)
    threading.setprofile(profile)
    try:
        return arc_kit(sys.argv[1:])
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
        for module in MODULES:
            print(f"calls into {module} from other files: {entries[module]}", file=sys.stderr)
        for what in dict.fromkeys(READS.values()):
            print(f"{what}: {reads[what]}", file=sys.stderr)
        for path, count in sorted(files.items()):
            print(f"  {path}: {count}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
