"""The CLI's argument checks and its error contract, shared by every subcommand.

* Argument types (:func:`positive_int`, :func:`seed`, :func:`budget`, :func:`finite_float`,
  :func:`method`, ...) refuse a bad value while the command line is parsed, naming it.
* :class:`UniqueList` refuses a repeated item of a list argument (``--seeds 0 0 1``; ``--methods heft
  heft``, compared as normalised specs), since each item would run and count twice.
* :class:`OneLineParser` turns argparse's usage-plus-error into one line; :func:`run_command` runs a
  command and turns every user error (a :class:`~placement_gym.errors.PlacementGymError`, a Gymnasium
  error, a refused allocation) into one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import errno
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

#: Exit status for errors in what the user asked for (argparse uses the same).
USER_ERROR = 2
#: Seeds go to NumPy, Python's random and torch: NumPy's legacy seeding takes 0 <= seed < 2**32.
MAX_SEED = 2**32 - 1
_PREFIX = "placement-gym: error: "


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None


def positive_int(text: str) -> int:
    """An integer >= 1."""
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """An integer >= 0."""
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def seed(text: str) -> int:
    """A seed: an integer in ``[0, 2**32 - 1]``."""
    value = non_negative_int(text)
    if value > MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be at most 2**32 - 1 = {MAX_SEED}, got {value}")
    return value


def budget(text: str) -> int:
    """An evaluation budget: >= 1, and small enough that its per-evaluation history fits in memory."""
    from placement_gym.limits import BYTES_PER_EVALUATION, require_memory

    value = positive_int(text)
    checked(require_memory)(value * BYTES_PER_EVALUATION, f"a budget of {value} evaluations (its history)")
    return value


def finite_float(text: str) -> float:
    """A finite number (no NaN or infinity)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def json_object(text: str) -> dict[str, Any]:
    """A JSON object (``'{"k": 64}'``); NaN and infinities (``NaN``, ``Infinity``, ``1e999``) are refused."""

    def refuse(constant: str) -> NoReturn:
        raise argparse.ArgumentTypeError(f"must be finite JSON numbers, got {constant}")

    def finite(number: str) -> float:
        value = float(number)
        return value if math.isfinite(value) else refuse(number)

    try:
        value = json.loads(text, parse_constant=refuse, parse_float=finite)
    except (ValueError, RecursionError) as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({' '.join(str(exc).split())[:200]})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object, got {type(value).__name__}")
    return value


# ---------------------------------------------------------------------- file arguments
# Every file or folder a command line names goes through one of these types, so a path that cannot be
# used is refused while the arguments are parsed, with one line naming it (a name too long for the file
# system, a file where a folder belongs or the reverse, a folder that cannot be written); an OSError on a
# named file later on (a race, a full disk) is turned into one line by run_command.

def _usable_name(path: Path, text: str) -> None:
    """Refuse a path with a component longer than the file system allows (or a NUL byte)."""
    if "\0" in text:
        raise argparse.ArgumentTypeError(f"{text!r} has a NUL byte; give a file name")
    anchor = _existing_ancestor(path)
    try:
        name_max = os.pathconf(anchor, "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    for part in path.parts:
        if len(os.fsencode(part)) > name_max:
            raise argparse.ArgumentTypeError(
                f"{quote_path(text)}: the name {quote_path(part)} has {len(os.fsencode(part))} bytes; the file "
                f"system allows at most {name_max}"
            )


def _existing_ancestor(path: Path) -> Path:
    """The nearest part of ``path`` (itself included) that exists."""
    here = path if path.is_absolute() else Path.cwd() / path
    while True:
        try:
            if here.exists() or here == here.parent:
                return here
        except OSError:
            pass
        here = here.parent


def _writable_place(path: Path, text: str) -> None:
    """Refuse ``path`` (to be made or written) if its nearest existing ancestor is a file or cannot be written."""
    anchor = _existing_ancestor(path)
    target = path if path.is_absolute() else Path.cwd() / path
    if anchor != target and not anchor.is_dir():
        raise argparse.ArgumentTypeError(f"{quote_path(text)}: {quote_path(str(anchor))} is a file, not a folder")
    # A folder is written into (write and search permission); an existing file is overwritten (write only:
    # a file's execute bit is irrelevant, and root's os.access(X_OK) fails on a file without one).
    if not os.access(anchor, os.W_OK | os.X_OK if anchor.is_dir() else os.W_OK):
        raise argparse.ArgumentTypeError(
            f"{quote_path(text)}: {quote_path(str(anchor))} cannot be written (read-only or not yours)"
        )


def quote_path(text: str) -> str:
    """A path as messages show it: at most 120 characters (a 300-character name is shortened)."""
    return text if len(text) <= 120 else f"{text[:58]}...{text[-58:]}"


def out_folder(text: str) -> Path:
    """An output folder: a folder, or a path that can be made one; refused if a file, too long or not writable."""
    path = Path(text)
    _usable_name(path, text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{quote_path(text)} is a file; give a folder (it is made if missing)")
    _writable_place(path, text)
    return path


def out_file(text: str) -> Path:
    """An output file: a path that is a file or can be made one; refused if a folder, too long or not writable."""
    path = Path(text)
    _usable_name(path, text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{quote_path(text)} is a folder; give the path of a file")
    _writable_place(path, text)
    return path


def in_file(text: str) -> Path:
    """An existing, readable regular file (not a folder)."""
    path = in_path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{quote_path(text)} is a folder; give a file")
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{quote_path(text)} is not a regular file")
    return path


def in_path(text: str) -> Path:
    """An existing, readable file or folder."""
    path = Path(text)
    _usable_name(path, text)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{quote_path(text)} does not exist")
    if not os.access(path, os.R_OK):
        raise argparse.ArgumentTypeError(f"{quote_path(text)} cannot be read (permissions)")
    return path


#: errno values of an OSError on a named file that are a problem of the file, not a bug.
_FILE_ERRNOS = {
    errno.ENOENT, errno.EEXIST, errno.EACCES, errno.EPERM, errno.EROFS, errno.EISDIR, errno.ENOTDIR,
    errno.ENAMETOOLONG, errno.ENOSPC, errno.EDQUOT, errno.ELOOP, errno.ENOTEMPTY,
}  # fmt: skip


def file_error(exc: BaseException) -> str | None:
    """The one line of an OSError on a named file (``cannot use PATH: Permission denied``), else ``None``."""
    if isinstance(exc, OSError) and exc.filename is not None and exc.errno in _FILE_ERRNOS:
        names = " -> ".join(quote_path(os.fsdecode(n)) for n in (exc.filename, exc.filename2) if n is not None)
        return f"cannot use {names}: {exc.strerror or exc}"
    return None


def method(text: str) -> str:
    """A method spec (``milp:time_limit=30``, ``pkg.module:Agent``), checked; returns its normalised text."""
    from agents.specs import parse_spec

    return checked(parse_spec)(text).text


def input_shapes(pairs: list[tuple[str, list[int]]] | None) -> dict[str, list[int]] | None:
    """The ``--input-shape NAME=...`` pairs as a dict, refusing a name given twice (the later would win silently).

    Raises:
        ConfigError: Naming the repeated input.
    """
    from placement_gym.errors import ConfigError

    if not pairs:
        return None
    shapes: dict[str, list[int]] = {}
    for name, shape in pairs:
        if name in shapes:
            raise ConfigError(f"--input-shape gives input {name!r} twice ({shapes[name]} and {shape}); give it once")
        shapes[name] = shape
    return shapes


def parse_input_shape(text: str) -> tuple[str, list[int]]:
    """``"name=1,3,224,224"`` -> ``("name", [1, 3, 224, 224])`` (one ``--input-shape``).

    Raises:
        ConfigError: If the text is not ``name=d1,d2,...`` with positive integer dimensions.
    """
    from placement_gym.errors import ConfigError

    name, sep, dims = text.rpartition("=")
    try:
        shape = [int(d) for d in dims.split(",")] if dims.strip() else []
    except ValueError:
        shape = []
    if not sep or not name or not shape or min(shape) < 1:
        raise ConfigError(
            f"input shape {text!r} is not NAME=D1,D2,... with positive integers (e.g. x=1,3,224,224)"
        )
    return name, shape


def input_shape(text: str) -> tuple[str, list[int]]:
    """One ``--input-shape NAME=D1,D2,...``: ``(name, shape)`` (see :func:`parse_input_shape`)."""
    from placement_gym.errors import ConfigError

    try:
        return parse_input_shape(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_input_shape_argument(parser: argparse.ArgumentParser) -> None:
    """``--input-shape NAME=D1,D2,...`` (repeatable; ``train``, ``bench`` and ``place``)."""
    parser.add_argument(
        "--input-shape",
        dest="input_shapes",
        type=input_shape,
        action="append",
        metavar="NAME=D1,D2,...",
        help="static shape of a dynamic model input, e.g. x=1,3,224,224 (repeat per input; a dynamic "
        "batch dimension alone defaults to 1)",
    )


def checked(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with a :class:`PlacementGymError` turned into argparse's type error (its message kept:
    argparse would otherwise print only "invalid value", or a traceback for a KeyError)."""
    from placement_gym.errors import PlacementGymError

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except PlacementGymError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return wrapper


class UniqueList(argparse.Action):
    """Store a list argument (``nargs="+"``), refusing an item given twice (after its type normalised it)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:  # fmt: skip
        seen: set[Any] = set()
        for value in values:
            key = str(value)
            if key in seen:
                parser.error(f"argument {option_string or self.dest}: {value} is given twice; give each once")
            seen.add(key)
        setattr(namespace, self.dest, list(values))


class OneLineParser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line on stderr (no usage block), exit status 2."""

    def error(self, message: str) -> NoReturn:
        one_line(f"{self.prog.split()[-1]}: {message}" if " " in self.prog else message)
        sys.exit(USER_ERROR)


def one_line(message: str) -> None:
    """Print ``placement-gym: error: <message>`` as one line (at most 2,000 characters) on stderr."""
    text = " ".join(str(message).split())
    text = text if len(text) <= 2000 else text[:1997] + "..."
    print(_PREFIX + text, file=sys.stderr)


def is_user_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a problem with what the user asked for rather than a bug (which keeps its traceback):
    a placement-gym error, a Gymnasium error (an unknown env ID), or an allocation the machine refused."""
    import gymnasium

    from placement_gym.errors import PlacementGymError

    if isinstance(exc, (PlacementGymError, gymnasium.error.Error, MemoryError)):
        return True
    return isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc)  # torch's CPU allocator


def run_command(fn: Callable[[Sequence[str] | None], None], argv: Sequence[str] | None = None,
                debug: bool = False) -> int:  # fmt: skip
    """Run ``fn(argv)`` (parse the arguments and do the work); returns the exit status.

    0 on success; 2 with one line on stderr for a user error (argparse's included); 130 when interrupted.
    With ``debug`` (or ``--debug`` in ``argv``) a user error raises instead, with its traceback.
    """
    debug = debug or "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        fn(argv)
    except KeyboardInterrupt:
        print("placement-gym: interrupted", file=sys.stderr)
        return 130
    except SystemExit as exc:  # argparse: --help (0) or an error already printed (2)
        return exc.code if isinstance(exc.code, int) else USER_ERROR
    except Exception as exc:
        if not debug and file_error(exc) is not None:
            one_line(f"{file_error(exc)} (--debug shows the traceback)")
            return USER_ERROR
        if debug or not is_user_error(exc):
            raise
        message = str(exc) or type(exc).__name__
        if isinstance(exc, (MemoryError, RuntimeError)):
            message = f"out of memory ({message}); use smaller sizes"
        one_line(f"{message} (--debug shows the traceback)")
        return USER_ERROR
    return 0


def module_main(
    module_doc: str,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    run_from_args: Callable[[argparse.Namespace], None],
    argv: Sequence[str] | None = None,
) -> int:
    """The ``main()`` of a subcommand's module run on its own (``python -m experiments.NAME``): parse with
    :class:`OneLineParser` (described by the module docstring's first line) and run under
    :func:`run_command`, so the module keeps the CLI's error contract; returns the exit status."""

    def command(argv: Sequence[str] | None) -> None:
        parser = OneLineParser(description=module_doc.splitlines()[0])
        add_arguments(parser)
        run_from_args(parser.parse_args(argv))

    return run_command(command, argv)
