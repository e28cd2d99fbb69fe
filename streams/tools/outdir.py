"""The ``--out`` directory of ``export``, ``run`` and ``audit-report``: written into, never
changed, nothing followed out of it (issue 41, item 9; docs/security-clients.md).

Before, the directory was ``chmod``-ed to 0700 when it existed (a 1777 directory lost its
sticky bit) and files were opened by path, following a symbolic link planted in it (run as
root, ``export`` overwrote a file outside the directory). The rules now:

* A directory that does not exist is created (its missing parents too), 0700 for private
  output (an export holds raw features; the internal report, private statistics), with
  the umask's mode for the public report.
* An existing directory is never chmod-ed. It must be a directory owned by the caller
  and writable by nobody else (group or others could plant a link or swap a file between
  two writes, sticky bit or not, since the names are fixed and known); otherwise the
  command refuses with one line and writes nothing. One the caller owns that others can
  only read is taken as it is: every private file is 0600, so others see its name and
  size, not its content (sizes say how many events, which the ledger and ``seq`` show
  anyway).
* The path is resolved here, one name at a time, before anything is made (``_walk``): a
  symbolic link on the way, the ``--out`` itself included, is followed only when the
  caller or root owns it (a link another user planted where the caller's directory was
  expected is refused), and the path its target names is judged the same way; ``..``
  after a directory still to be made is refused (it would climb out of what the command
  makes, where nothing was judged).
* Every file is written as a new hidden file made relative to the directory's descriptor
  (``openat``, O_CREAT | O_EXCL | O_NOFOLLOW) and renamed over its name once all are
  written: what was there is replaced, never rewritten in place (whoever had a public
  file open would read the private one, a full disk would leave it truncated). What is
  at a target name must be the caller's own regular file with one link: a symbolic
  link, another user's file or a hard link to elsewhere is refused with one line, for
  every name before anything is written, so a refusal leaves what was there unchanged.
* Its parent, and every existing directory on the way to it, must belong to the caller
  or to root, and when others may write to it, carry the sticky bit (as /tmp does):
  whoever may write such a directory without it could move the directory away once
  written and put their own in its place. A symbolic link on the way must belong to the
  caller or root (another user could repoint it between two steps). Missing parents are
  created one by one, each judged before it is made, at most 0755 whatever the umask.
* An export (``OutDir.staged``) is written to hidden ``.NAME.partial`` files and renamed
  into place once every file is written, its marker file (``model-events.jsonl``, what
  ``replay --dir`` looks for) removed first and renamed last: a run interrupted at any
  point leaves the previous export, or a directory without the marker ("not an export
  directory"), never a truncated export that reads as complete. A directory the command
  created, with the missing parents it created for it, is removed again when the command
  fails before writing anything (each only while it is still empty).
"""
from __future__ import annotations

import os
import secrets
import stat
from contextlib import contextmanager
from pathlib import Path

from dpstream.streams.worker.paths import (MAX_LINKS, OTHERS_WRITE, UnsafeOut, _check_dir,  # noqa: F401
                                           _private_group, _walk)

class OutDir:
    """An ``--out`` directory opened for writing: ``with OutDir(path, private=True) as out:
    out.write_all({"name.jsonl": b"..."})``."""

    def __init__(self, path: str | Path, *, private: bool):
        if not str(path).strip():           # Path("") is ".": the output landed in the current directory
            raise UnsafeOut("an empty path", "give the directory to write into")
        self.path, self.private = Path(path), private
        self.fd: int | None = None
        self._made: list[tuple[Path, int, int]] = []   # created here: (path, st_dev, st_ino), outermost first

    @property
    def made(self) -> list[Path]:
        """The directories this command created, outermost first."""
        return [d for d, _, _ in self._made]

    @property
    def created(self) -> bool:
        return bool(self._made)

    def __enter__(self) -> "OutDir":
        if self.fd is None:                 # entered once: the directory checked once
            self.fd, self._made = _open_dir(self.path, self.private, with_created=True)
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if exc_type is not None:            # made for this command, which failed: not left behind
            _remove_made(self._made)

    @contextmanager
    def staged(self, names):
        """Binary files for writing, one per name, that take their names only once all are
        written (module docstring): the first name is the marker, removed first and put in
        place last. Every target is checked (``_check_target``) before anything is
        written; on any failure the hidden files are removed and the targets left as they
        were (or without the marker, if the renames had begun)."""
        mode = 0o600 if self.private else 0o644
        for name in names:
            _check_target(self.fd, self.path, name)
        handles = {}
        try:
            for name in names:
                handles[name] = os.fdopen(_open_partial(self.fd, self.path, name, mode), "wb")
            yield handles
            for fh in handles.values():
                fh.flush()
                os.fsync(fh.fileno())
                fh.close()
            marker, *rest = names
            try:
                os.unlink(marker, dir_fd=self.fd)
            except FileNotFoundError:
                pass
            for name in [*rest, marker]:
                os.rename(_partial(name), name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
            os.fsync(self.fd)
        except OSError as err:
            marker = names[0]
            raise UnsafeOut(f"cannot write {self.path} ({err.strerror})", "nothing of this run kept"
                            + (f" (the directory has no {marker} if it had to be replaced)"
                               if marker.endswith(".jsonl") else "")) from None
        finally:
            for name, fh in handles.items():
                fh.close()
                try:
                    os.unlink(_partial(name), dir_fd=self.fd)
                except FileNotFoundError:
                    pass

    def write_all(self, files: dict[str, bytes]) -> None:
        """Write every file (name -> content), replacing what was there (new files renamed
        into place, ``staged``): rewriting an existing file in place would show private
        content to whoever opened it before, while it was public, and a full disk would
        leave it truncated."""
        with self.staged(list(files)) as handles:
            for name, data in files.items():
                handles[name].write(data)


def _open_dir(path: Path, private: bool, *, with_created: bool = False):
    """The directory's descriptor, created if missing, after the checks of the module
    docstring (and, ``with_created``, the directories created for it, outermost first: its
    missing parents, then itself, as (path, st_dev, st_ino)). A refusal removes what it
    created."""
    made: list[tuple[Path, int, int]] = []
    try:
        fd, made = _open_dir_made(_walk(path), private, made)
    except UnsafeOut:
        _remove_made(made)
        raise
    return (fd, made) if with_created else fd


def _remove_made(made: list[tuple[Path, int, int]]) -> None:
    """Remove the directories a refused or failed command created, innermost first, each
    only while empty (``rmdir``) and only while its path still names the directory made
    (device and inode): a path repointed since is left alone, with everything above it."""
    for d, dev, ino in reversed(made):
        try:
            st = os.lstat(d)
            if (st.st_dev, st.st_ino) != (dev, ino) or not stat.S_ISDIR(st.st_mode):
                return
            os.rmdir(d)
        except OSError:
            return                          # not empty (or gone): its parents are not empty either


def _mkdir(d: Path, mode: int, made: list[tuple[Path, int, int]]) -> None:
    """Make one directory and note it (FileExistsError if it appeared meanwhile)."""
    os.mkdir(d, mode)
    st = os.lstat(d)
    made.append((d, st.st_dev, st.st_ino))


def _make_parents(path: Path, made: list[tuple[Path, int, int]]) -> None:
    """Create ``path``'s missing ancestors one by one (at most 0755), each after its own
    parent passed ``_check_parent``, appending each to ``made``."""
    missing = []
    for parent in path.absolute().parents:
        if os.path.lexists(parent):
            break
        missing.append(parent)
    for d in reversed(missing):
        _check_parent(d)
        try:
            _mkdir(d, 0o755, made)          # mkdir never follows a link: what it makes is ours
        except FileExistsError:             # appeared meanwhile (another user's link?): judged anew
            _walk(d / "x")
            if not stat.S_ISDIR(os.lstat(d).st_mode):
                raise UnsafeOut(f"{d} appeared meanwhile and is not a directory",
                                "choose another directory") from None


def _open_dir_made(path: Path, private: bool, made: list[Path]):
    uid = os.geteuid()
    try:
        link = os.lstat(path)
    except FileNotFoundError:
        link = None
    except OSError as err:
        raise UnsafeOut(f"{path}: {err.strerror}", "choose another directory") from None
    created = link is None
    if created:
        try:
            _make_parents(path, made)
            _check_parent(path)
            _mkdir(path.absolute(), 0o700 if private else 0o755, made)
        except FileExistsError:             # appeared meanwhile: judged as any existing one
            return _open_dir_made(path, private, made)
        except OSError as err:
            raise UnsafeOut(f"cannot create {path} ({err.strerror})",
                            "choose a directory you may create") from None
    elif stat.S_ISLNK(link.st_mode):         # _walk resolved every link: one appeared since
        raise UnsafeOut(f"{path} became a symbolic link", "nothing written through it; choose another directory")
    else:
        _check_parent(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except NotADirectoryError:
        raise UnsafeOut(f"{path} exists and is not a directory", "choose a directory") from None
    except OSError as err:
        raise UnsafeOut(f"cannot open {path} ({err.strerror})", "choose another directory") from None
    st = os.fstat(fd)
    problem = None
    if st.st_uid != uid:
        problem = UnsafeOut(f"{path} belongs to uid {st.st_uid}, not to you", "its owner could read or "
                            "swap what is written there; choose a new directory (it is created 0700)")
    elif st.st_mode & OTHERS_WRITE and not created and not _private_group(st, path):
        problem = UnsafeOut(f"{path} is writable by other users (mode {stat.S_IMODE(st.st_mode):04o})",
                            "they could plant links or swap files in it; choose a new directory (it "
                            "is created 0700) or one only you can write (it is never chmod-ed here)")
    if problem is not None:
        os.close(fd)
        raise problem
    if created:                              # ours, just made: never wider than the rules say
        wanted = 0o700 if private else stat.S_IMODE(st.st_mode) & ~OTHERS_WRITE
        if stat.S_IMODE(st.st_mode) != wanted:
            os.fchmod(fd, wanted)
    return fd, made


def _check_parent(path: Path) -> None:
    """UnsafeOut unless ``path``'s parent belongs to the caller or root and, when others may
    write to it, has the sticky bit (module docstring)."""
    _check_dir(path.absolute().parent, path, what="parent")


def _partial(name: str) -> str:
    return f".{name}.partial"


def _check_target(dir_fd: int, path: Path, name: str) -> None:
    """UnsafeOut when what is at ``name`` may not be replaced: a symbolic link, or not the
    caller's own regular file with one link (``_file_problem``); a missing target is fine."""
    shown = path / name
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    problem = f"{shown} is a symbolic link" if stat.S_ISLNK(st.st_mode) else _file_problem(shown, st)
    if problem is not None:
        raise UnsafeOut(problem, "nothing written; remove it or choose a new --out directory")


def _file_problem(shown: Path, st: os.stat_result) -> str | None:
    """Why a file at a target name may not be written (None when it may): it must be the
    caller's own regular file with a single link."""
    if not stat.S_ISREG(st.st_mode):
        return f"{shown} is not a regular file"
    if st.st_uid != os.geteuid():
        return f"{shown} belongs to uid {st.st_uid}, not to you"
    if st.st_nlink != 1:
        return f"{shown} has {st.st_nlink} hard links (it is also a file elsewhere)"
    return None


def _open_partial(dir_fd: int, path: Path, name: str, mode: int) -> int:
    """A new hidden file for ``name`` (a stale one from a killed run removed first)."""
    try:
        os.unlink(_partial(name), dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except OSError as err:
        raise UnsafeOut(f"cannot write {path / _partial(name)} ({err.strerror})", "remove it") from None
    return _open_new(dir_fd, path, _partial(name), mode, "choose a new --out directory")


def _open_new(dir_fd: int, path: Path, name: str, mode: int, hint: str) -> int:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(name, flags, mode, dir_fd=dir_fd)
    except OSError as err:
        raise UnsafeOut(f"cannot write {path / name} ({err.strerror})", hint) from None


def check_private_home(path: Path) -> Path:
    """``path`` resolved by ``_walk``, whose directory must exist and be writable by the caller
    and by nobody else but root (UnsafeOut otherwise): for a file whose side files are
    made next to it by name (``run --state``'s SQLite journal), where a sticky bit does
    not help (another user may make the name first)."""
    path = _walk(path)
    directory = path.parent
    try:
        st = os.stat(directory)
    except FileNotFoundError:               # made later by path, it could be another user's link by then
        raise UnsafeOut(f"its directory {directory} does not exist (make it first, mode 700)") from None
    except OSError as err:
        raise UnsafeOut(f"cannot reach {directory} ({err.strerror})") from None
    if st.st_uid not in (0, os.geteuid()):
        raise UnsafeOut(f"its directory {directory} belongs to uid {st.st_uid}")
    if st.st_mode & OTHERS_WRITE and not _private_group(st, directory):
        raise UnsafeOut(f"its directory {directory} is writable by other users (mode "
                        f"{stat.S_IMODE(st.st_mode):04o}), who could make its side file "
                        f"{path.name}-journal first and read the state's pages from it")
    if not os.access(directory, os.W_OK):
        raise UnsafeOut(f"its directory {directory} is not writable by you (SQLite writes its journal "
                        "there)")
    return path


def private_file(path: str | Path) -> "_ReplacingFile":
    """A single private output file (``demo --json``: online mistakes, private statistics):
    its directory judged as ``--out``'s parent is (``_walk``: no link of another user on the
    way, owned by the caller or root, sticky if others may write it); written to a new
    hidden file (0600, O_EXCL, O_NOFOLLOW) that replaces the target when closed without
    error; the hidden file's name ends in random hex (``.NAME.<hex>.partial``): in a shared
    directory such as /tmp another user could otherwise make ``.NAME.partial`` first, which
    the caller may not remove there, and refuse every run its output (a third attacker's
    pass). The target, if there is one, must be the caller's own regular file with one
    link (``_check_target``); it is replaced, never rewritten in place: whoever opened it
    while it was public would otherwise read the private content. UnsafeOut otherwise.
    Use as ``with private_file(p) as fh: fh.write(b"...")``."""
    path = Path(path)
    if not path.name or path.name in (".", ".."):
        raise UnsafeOut(f"{str(path)!r} names no file", "give a file name")
    parent = _walk(path.expanduser().parent, existing=True)
    resolved = parent / path.name
    _check_dir(parent, resolved, what="parent")
    try:                                      # O_NOFOLLOW: no link put there since it was judged
        dir_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as err:
        raise UnsafeOut(f"cannot write {path} ({err.strerror})", "choose another file") from None
    try:
        _check_target(dir_fd, resolved.parent, resolved.name)
        partial = f".{resolved.name}.{secrets.token_hex(8)}.partial"
        fd = _open_new(dir_fd, resolved.parent, partial, 0o600, "choose another file")
    except BaseException:
        os.close(dir_fd)
        raise
    return _ReplacingFile(dir_fd, resolved.name, partial, os.fdopen(fd, "wb"))


class _ReplacingFile:
    """``private_file``'s handle: written, then renamed over its target on a clean exit
    (removed on any error)."""

    def __init__(self, dir_fd: int, name: str, partial: str, fh):
        self.dir_fd, self.name, self.partial, self.fh = dir_fd, name, partial, fh

    def write(self, data: bytes) -> int:
        return self.fh.write(data)

    def __enter__(self) -> "_ReplacingFile":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        try:
            self.fh.flush()
            os.fsync(self.fh.fileno())
            self.fh.close()
            if exc_type is None:
                _check_target(self.dir_fd, Path("."), self.name)   # another user's file put there since
                os.rename(self.partial, self.name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
        except OSError as err:
            raise UnsafeOut(f"cannot write {self.name} ({err.strerror})", "nothing written") from None
        finally:
            if not self.fh.closed:
                self.fh.close()
            try:
                os.unlink(self.partial, dir_fd=self.dir_fd)
            except FileNotFoundError:
                pass
            os.close(self.dir_fd)


def private_dir(path: str | Path) -> Path:
    """A directory only the caller may use (the worker's ``--data-dir``: faust's local table
    files, as sensitive as the changelogs): created 0700 when missing; an existing one must
    be the caller's, and neither readable nor writable by anyone else (never chmod-ed
    here), else UnsafeOut, whose one line says what is wrong and how to fix it. Before, a
    /tmp/dpstream-worker another user made was used, with a warning at most."""
    path = Path(path).expanduser()
    try:
        path = _walk(path)                  # before any advice: a link of another user is refused
    except UnsafeOut as err:
        raise UnsafeOut(err.problem, "give --data-dir a directory of your own (a missing one is created "
                        "0700), or leave it out for the default under ~/.local/state") from None
    fix = ("give --data-dir a directory of your own (a missing one is created 0700), or leave "
           "it out for the default under ~/.local/state")
    try:
        st = os.stat(path)
    except OSError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and st.st_mode & 0o077:
        raise UnsafeOut(f"{path} is open to other users (mode {stat.S_IMODE(st.st_mode):04o}) and the "
                        f"worker keeps its table files there", f"chmod 700 {path}, or {fix}")
    try:
        fd = _open_dir(path, private=True)
    except UnsafeOut as err:
        raise UnsafeOut(err.problem, fix) from None
    try:
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
    finally:
        os.close(fd)
    if mode & 0o077:
        raise UnsafeOut(f"{path} is open to other users (mode {mode:04o}) and the worker keeps its "
                        f"table files there", f"chmod 700 {path}, or {fix}")
    return path
