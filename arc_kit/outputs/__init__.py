"""Where the kit may write, and how: into a folder that is new, empty or its own, never through a link, and
deleting only what its layout names.

Claiming a folder. Every command that writes an output folder claims it first (``claim_folder``, or
``run.locking.hold_folder`` with a kind). The kit writes into a folder that does not exist yet, is empty, or
holds the marker ``.arc-kit.json`` that the kit wrote when it made the folder, naming the command and the
folder's kind; anything else is refused in one line (``OutputRefused``) before a byte is written: a
marker or nothing. A symbolic link given as the folder is judged as the folder it points to, a dangling one
refused. A single output file (a picture, a CSV) is written where nothing is, or over a file the caller
recognises as the kit's own (``claim_file``). ``is_made_folder`` tells readers (a folder of task files) which folders hold the
kit's outputs, to skip them.

Deleting by exact name. A kind's layout (``FolderKind.owned``) names every entry the kit writes, as paths
inside the folder: exact names (``run.json``), ``{n}`` for a number (``checkpoints/step-{n}``), ``*``
inside a name for any text (only in names no user would give: the kit's temporary files, Ray's log files in
a session's folder) and ``**`` for everything below a folder that is wholly the kit's (a checkpoint).
``remove_owned`` deletes exactly those (a link at such a name: the link itself, never what it points to)
and returns what it kept; a resumable kind's folder (a run, a training run) is continued and, with
``clear`` (``--restart``), first cleared so; any other kind's is replaced only with ``overwrite``, and then
only by the command that made it. Whatever else a kit folder holds is kept, and said in one warning line.

Writing into the kit's folders. Every file the kit writes there goes through one of ``appending`` (a link or no
regular file at the name refused; a file with a second name, a hard link, first replaced by its copy),
``replacing`` with its one-call forms ``replace_file`` and ``copy_file`` (written aside and renamed over the
name: a link there is replaced itself, never followed; a reader sees the old file or the new one),
``staged_into`` (for a library that writes a whole folder: ``save_pretrained``, accelerate's checkpoints),
``kit_subfolder`` and ``remove_entry``; other modules, the worker pool's logs included, call nothing else to
write, and ``refuse_links`` checks a folder's layout for links before a run's work starts. Each takes
``within``, the kit folder the path lies in: every folder between it and the file must be a real folder (a link
there is refused: a sub-folder linked to a user's folder never receives a file; missing ones are made). Left
out, it is the innermost folder this process claimed that holds the path, else the path's own folder (only the
file itself is guarded then: a process that claims nothing, a worker on another node, passes its folder). Every
refusal is an ``OutputRefused`` in one line.

The folders claimed in this process are remembered (``claimed``), so that a command stopped by a signal,
or by an error of the operating system that names no file, can say which folder it was writing
(``describe_os_error``). ``folders`` claims and deletes, ``files`` writes; this package knows files and folders,
nothing of what the kit writes in them: each kind is declared by its owner (runs, training, models, the Kaggle
dataset).
"""
from arc_kit.outputs.files import (
    FIXES,
    Claim,
    OutputRefused,
    appending,
    claimed,
    copy_file,
    describe_os_error,
    kit_subfolder,
    remove_entry,
    replace_file,
    replacing,
    staged_into,
)
from arc_kit.outputs.folders import (
    MARKER,
    MARKER_BYTES,
    TEMPORARY,
    FolderKind,
    check_folder,
    claim_file,
    claim_folder,
    inside,
    is_made_folder,
    read_marker,
    refuse_links,
    remove_owned,
    small_json,
)

__all__ = ["FIXES", "MARKER", "MARKER_BYTES", "TEMPORARY", "Claim", "FolderKind", "OutputRefused", "appending",
           "check_folder", "claim_file", "claim_folder", "claimed", "copy_file", "describe_os_error", "inside",
           "is_made_folder", "kit_subfolder", "read_marker", "refuse_links", "remove_entry", "remove_owned",
           "replace_file", "replacing", "small_json", "staged_into"]
