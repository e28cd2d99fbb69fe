"""Whether a path may be trusted: owned by the caller or root, not writable by others,
reached only through directories and symbolic links that no other user may change (as
ssh's StrictModes judges ~/.ssh). One rule for everything dpstream reads or writes at a
path another local user might reach: ``--out`` directories (streams/tools/outdir.py) and
client configs, TLS files and token files (streams/worker/kafka.py ``trust_problem``).
The rule itself, with the cases it takes, is in streams/tools/outdir.py's docstring."""
from __future__ import annotations

import os
import stat
from pathlib import Path

OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


class UnsafeOut(Exception):
    """An ``--out`` directory or target file that would expose or redirect the output:
    ``problem`` (what is wrong) and ``fix`` (what to do), one line together."""

    def __init__(self, problem: str, fix: str = ""):
        super().__init__(f"{problem}: {fix}" if fix else problem)
        self.problem, self.fix = problem, fix


MAX_LINKS = 40      # symbolic links followed in one path (the kernel's limit, ELOOP)


def _walk(path: Path, *, existing: bool = False) -> Path:
    """``path`` resolved one name at a time from the root, as the kernel would, judging as it
    goes (module docstring): every symbolic link met (the last name's too) must belong to
    the caller or root, and its target is walked the same way; every directory passed
    through must pass ``_check_dir``; ``..`` after a missing name is refused. Returns the
    path with no link and no ``..`` in its existing part, followed by the names still to
    be made (``existing``: refused, there must be none). UnsafeOut otherwise."""
    uid = os.geteuid()
    path = path.expanduser()
    try:
        here = Path("/") if path.is_absolute() else Path(os.getcwd())   # getcwd: no links in it
    except FileNotFoundError:
        raise UnsafeOut(f"{path}: the current directory no longer exists", "give an absolute path") from None
    pending = list(here.parts[1:] if not path.is_absolute() else ()) + list(path.parts[1:] if path.is_absolute()
                                                                             else path.parts)
    here, passed, missing, links = Path("/"), [], [], 0
    while pending:
        name = pending.pop(0)
        if name in ("", "."):
            continue
        if missing:
            if name == "..":
                raise UnsafeOut(f"{path} climbs (..) out of a directory it would make", "give the path "
                                "without .. after a directory that does not exist yet")
            missing.append(name)
            continue
        if name == "..":
            here = here.parent                # ``here`` has no link in it: its parent is the kernel's
            continue
        step = here / name
        try:
            st = os.lstat(step)
        except FileNotFoundError:
            missing.append(name)
            continue
        except OSError as err:
            raise UnsafeOut(f"cannot reach {step} ({err.strerror})", "choose another directory") from None
        if stat.S_ISLNK(st.st_mode):
            if st.st_uid not in (0, uid):
                raise UnsafeOut(f"{path}: {step} is a symbolic link owned by uid {st.st_uid}, not by you or "
                                "root", "its owner could repoint it between two steps of this command; "
                                "nothing written through it; choose a path without it")
            links += 1
            if links > MAX_LINKS:
                raise UnsafeOut(f"{path}: more than {MAX_LINKS} symbolic links", "choose another directory")
            target = Path(os.readlink(step))
            if target.is_absolute():
                here = Path("/")
            pending = list(target.parts[1:] if target.is_absolute() else target.parts) + pending
            continue
        if pending and stat.S_ISDIR(st.st_mode):
            passed.append(step)
        here = step
    resolved = here.joinpath(*missing)
    if existing and missing:
        raise UnsafeOut(f"{here / missing[0]} does not exist", "make the directory first")
    # every directory passed through, also one holding a link that was followed or one
    # left by ..: its owner (or a writer) could swap that link or name for their own
    for directory in passed:
        _check_dir(directory, resolved, what="parent" if directory == resolved.parent else "on the way")
    return resolved


def _has_acl(path) -> bool:
    """Whether ``path`` carries a POSIX access ACL: then its group bits show the ACL's
    mask, and a write they allow may be another named user's (``setfacl -m u:X:rwx``),
    whatever the group's members are."""
    try:
        return bool(os.getxattr(path, "system.posix_acl_access", follow_symlinks=False))
    except OSError:                      # none (ENODATA), or a file system without ACLs
        return False


def _private_group(st: os.stat_result, path=None) -> bool:
    """Whether a group-writable (not world-writable) file or directory's group has exactly one
    member, its owner: the user private groups that Debian, Fedora and RHEL make by default
    (umask 002 then makes ~/projects 0775 without opening it to anyone). The rule is
    Debian OpenSSH's "Allow harmless group-writability" (Colin Watson, 2014) for
    ~/.ssh/config: the owner is the group's only member, by primary group or by the
    group's member list, and no other user has it as their primary group."""
    import grp
    import pwd
    if st.st_mode & stat.S_IWOTH or path is not None and _has_acl(path):
        return False
    try:
        group, owner = grp.getgrgid(st.st_gid), pwd.getpwuid(st.st_uid)
    except KeyError:
        return False
    primary = [u.pw_name for u in pwd.getpwall() if u.pw_gid == st.st_gid]
    members = set(primary) | set(group.gr_mem)
    return members == {owner.pw_name}


def _check_dir(directory: Path, path: Path, *, what: str) -> None:
    """UnsafeOut unless ``directory`` (``path``'s parent, or a directory on the way to it)
    belongs to the caller or root and, when others may write to it, has the sticky bit."""
    try:
        st = os.stat(directory)
    except OSError as err:
        raise UnsafeOut(f"cannot reach {directory} ({err.strerror})", "choose another directory") from None
    where = f"{path}'s parent {directory}" if what == "parent" else f"{path}: {directory}, on the way,"
    if st.st_uid not in (0, os.geteuid()):
        raise UnsafeOut(f"{where} belongs to uid {st.st_uid}", "its owner could move "
                        "the directory away and put theirs in its place; choose a directory under "
                        "one of yours")
    if st.st_mode & OTHERS_WRITE and not st.st_mode & stat.S_ISVTX and not _private_group(st, directory):
        raise UnsafeOut(f"{where} is writable by other users without the sticky "
                        f"bit (mode {stat.S_IMODE(st.st_mode):04o})", "they could move the directory "
                        "away and put theirs in its place; choose a directory under one of yours")
