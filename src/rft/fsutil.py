"""Atomic writes of files and folders: build under a temporary sibling name, rename into place when complete.

Temporary names are `.<name>.tmp-<8 hex>` (and `.<name>.old-<8 hex>` for a folder moved aside while it is replaced),
so a run that finds them in its folder knows an earlier run was interrupted (`clean_stale`, under the run folder's
lock). A staging folder made inside a folder no lock holds (`staging_in`: `rft data`) names its process,
`.staging-<pid>@<host>.tmp-<8 hex>`, so the next one removes it once that process is gone (`clean_stale_staging`;
one named the older way, `.staging.tmp-<8 hex>`, once nothing in it has changed for an hour). An `atomic_dir`
writer holds an flock on its staging folder, so the next writer of the same folder removes what a killed one left
beside it, where no lock guards the folder (`clean_abandoned`: `rft init-model`, `rft merge`); a scratch folder
that nothing publishes (`held_scratch`: a component run's temporary run folder) is named and held the same way, so the
same `clean_abandoned` removes the one a killed process left. `rft init-model` and `rft merge` also hold an flock on
the folder they write, from their checks of it to its replacement (`sole_writer`), and `rft generate` one on
`.<name>.lock` beside its output file (naming its pid), so a second writer of the same output at once is refused
instead of replacing the first one's.
What rft writes gets the permissions the umask gives (`publish_modes`): some writers (safetensors) create 0600 files, which nobody else on a
shared machine could read.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import socket
import stat
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

_STALE = re.compile(r"^\.(?P<name>.+)\.(?P<kind>tmp|old)-[0-9a-f]{8}$")
_STAGING = re.compile(r"^\.staging-(?P<pid>\d+)@(?P<host>.+)\.tmp-[0-9a-f]{8}$")
_UNNAMED_STAGING = re.compile(r"^\.staging\.tmp-[0-9a-f]{8}$")  # rft data's name before it named its process
UNNAMED_STAGING_AGE_S = 3600.0
"""How long nothing in a `.staging.tmp-*` folder (no process named) must have changed before `clean_stale_staging`
takes it for a killed `rft data`'s."""


def os_error_of(error: BaseException, path: str | Path) -> OSError | None:
    """The operating-system error behind a writer's failure, for writers that hide it: safetensors says
    "(os error 28)", torch.save only "unexpected pos". None when the failure is not the file system's."""
    if isinstance(error, OSError):
        return error
    m = re.search(r"os error (\d+)", str(error))
    if m:
        code = int(m.group(1))
        return OSError(code, os.strerror(code), str(path))
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    written = Path(path).stat().st_size if Path(path).is_file() else 0
    if soft != resource.RLIM_INFINITY and written >= soft:
        return OSError(errno.EFBIG, os.strerror(errno.EFBIG), str(path))
    folder = Path(path).parent
    if folder.is_dir() and shutil.disk_usage(folder).free < (1 << 20):
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    return None


def checked_write(write: Callable[[], object], path: str | Path) -> None:
    """Run `write()` (which writes `path`); a failure of the file system is raised as the OSError it is, naming
    `path` where it named no file (a full disk surfaces from write() or close() without one: the line said
    "while writing a file")."""
    try:
        write()
    except Exception as e:
        os_error = _file_system_error(e, path)
        if os_error is None:
            raise
        raise os_error from e


def _file_system_error(error: Exception, path: str | Path) -> OSError | None:
    """`checked_write`'s OSError for `error`, raised while writing `path`; None where `error` is to be raised as
    it is (not the file system's, or an OSError that names its file)."""
    os_error = os_error_of(error, path)
    if os_error is error and error.filename is None and error.errno is not None:
        return OSError(error.errno, error.strerror, str(path))
    return None if os_error is error else os_error


def current_umask() -> int:
    """The process's umask, read without changing it where Linux allows (/proc), else set and restored."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def publish_modes(root: str | Path) -> None:
    """Give every file under `root` (and `root` itself) the mode a plain `open` would: 0666 & ~umask for files,
    0777 & ~umask for folders; executable bits of files are kept. Only bits are added that the umask allows, so a
    restrictive umask (077) keeps files private."""
    root = Path(root)
    mask = current_umask()
    paths = [root] if not root.is_dir() else [root, *root.rglob("*")]
    for path in paths:
        if path.is_symlink():
            continue
        mode = stat.S_IMODE(path.stat().st_mode)
        want = (0o777 if path.is_dir() else 0o666 | (mode & 0o111)) & ~mask
        if mode != want:
            path.chmod(want)


def clean_stale(folder: str | Path) -> list[str]:
    """Remove the temporary files and folders an interrupted run left in `folder` (not below it): `.X.tmp-*`
    (never renamed into place) and `.X.old-*` (a previous X moved aside; put back when X itself is missing).
    Call it only while no other run writes there (the run-folder lock). Returns what was done, one line each."""
    folder = Path(folder)
    done: list[str] = []
    if not folder.is_dir():
        return done
    for path in sorted(folder.iterdir()):
        m = _STALE.match(path.name)
        if m is None:
            continue
        final = folder / m.group("name")
        if m.group("kind") == "old" and not final.exists():
            os.replace(path, final)
            done.append(f"restored {final} from {path.name}")
            continue
        _remove(path)
        done.append(f"removed {path}")
    return done


def _remove(path: Path) -> None:
    """Remove the file, link or folder `path` (a folder with what it holds; gone already is fine)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def host_id() -> str:
    """This machine and PID namespace, as a record that names a process should name where it runs: two containers
    on one host (one hostname, often) see different process ids, so a pid is only tested (`process_alive`) where
    the recorded host_id is this one."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return f"{socket.gethostname()}{'/' + namespace if namespace else ''}"


def on_this_host(recorded: object) -> bool:
    """Whether the host a record names (a lock's, a staging folder's) is this one, so that its pid can be tested
    here: `host_id()`, or the bare hostname a record written before rft recorded host_id holds (tested as then)."""
    return recorded in (host_id(), host_tag(), socket.gethostname())


def machine_of(recorded: object) -> str:
    """The machine a recorded host (`host_id()`, or a bare hostname) names, without its PID namespace: how a
    message names it."""
    return str(recorded if recorded is not None else "?").split("/")[0]


def host_tag() -> str:
    """`host_id()` as a part of a file name (`staging_in`): its '/' and the namespace's brackets as '_'."""
    return re.sub(r"[^\w.-]+", "_", host_id()).strip("_")


def process_alive(pid: object) -> bool:
    """Whether a process `pid` (an int > 0; anything else is none) runs in this PID namespace (another user's
    counts). The one pid check: the run lock, `rft data`'s staging folders, a buffer's role holders, `rft studio`."""
    if not isinstance(pid, int) or pid <= 0:  # os.kill(0, 0) would signal our own process group: "alive"
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _last_change(path: Path) -> float:
    """The newest modification time of `path` and of everything under it (a file being written changes its own)."""
    newest = path.lstat().st_mtime
    for root, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            with contextlib.suppress(OSError):  # removed meanwhile
                newest = max(newest, os.lstat(os.path.join(root, name)).st_mtime)
    return newest


def clean_stale_staging(folder: str | Path) -> list[str]:
    """Remove the staging folders a killed `rft data` left in `folder`. Returns what was done, one line each.

    * `.staging-<pid>@<host>.tmp-*` (`staging_in`): removed when named for this machine and PID namespace
      (`on_this_host`) and a pid no process has; one of a live process, or of another machine or container, is left
      alone.
    * `.staging.tmp-*`, made by an rft from before staging folders named their process: nothing says whose it is,
      and `rft data` takes no lock that could tell, so the one safe evidence is time: it is removed once nothing in
      it has changed for UNNAMED_STAGING_AGE_S (an hour). A live `rft data` writes its task's files within minutes of
      making the folder, each write changing the folder or the file written, so an hour's quiet means its
      process is gone; a younger one is left alone (it may be an old rft's, still writing)."""
    import time

    folder = Path(folder)
    done: list[str] = []
    if not folder.is_dir():
        return done
    for path in sorted(folder.iterdir()):
        if _UNNAMED_STAGING.match(path.name) and path.is_dir() and not path.is_symlink():
            try:
                quiet = time.time() - _last_change(path)
            except OSError:  # removed meanwhile
                continue
            if quiet >= UNNAMED_STAGING_AGE_S:
                shutil.rmtree(path, ignore_errors=True)
                done.append(f"removed {path} (it names no process, as an older rft data made it, and nothing in it "
                            f"changed for {quiet / 3600:.1f} hours)")
            continue
        m = _STAGING.match(path.name)
        if m is None or not on_this_host(m.group("host")) or process_alive(int(m.group("pid"))):
            continue
        shutil.rmtree(path, ignore_errors=True)
        done.append(f"removed {path} (its process, pid {m.group('pid')}, is gone)")
    return done


def replace_dir(staging: Path, final: Path) -> None:
    """Rename `staging` to `final`; an existing `final` is moved aside first, restored if the rename fails,
    and deleted afterwards."""
    if not final.exists():
        os.replace(staging, final)
        return
    old = final.with_name(f".{final.name}.old-{uuid.uuid4().hex[:8]}")
    os.replace(final, old)
    try:
        os.replace(staging, final)
    except BaseException:
        os.replace(old, final)
        raise
    shutil.rmtree(old, ignore_errors=True)


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write `path` through a temporary sibling and os.replace: readers see the old file or the new, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        checked_write(lambda: tmp.write_text(text, encoding="utf-8"), path)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_text_once(path: str | Path, text: str) -> str:
    """Write `path` unless it exists, whole (a temporary sibling linked into place: of processes writing it at
    once, one's text is kept, the same for all); returns the text `path` holds."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    if not path.exists():
        try:
            checked_write(lambda: tmp.write_text(text, encoding="utf-8"), path)
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
    return path.read_text(encoding="utf-8")


def new_model_dir(out_dir: str | Path, overwrite: bool) -> Path:
    """`out_dir` as a Path, checked to be a new or empty folder (or any folder, with `overwrite`), its parent made:
    where `rft init-model` writes a model (FileExistsError otherwise)."""
    out_dir = Path(os.path.normpath(out_dir))  # 'a/b/..' is 'a': a folder's name, not '..'
    if Path.cwd().resolve().is_relative_to(out_dir.resolve()):  # '.' (--overwrite): 'unexpected ValueError'
        raise FileExistsError(f"{str(out_dir)!r} is this folder or one that holds it, which the model would replace; "
                              "name a new folder")
    for parent in out_dir.parents:  # a file on the way: a raw '[Errno 17] File exists' before
        if parent.exists():
            if not parent.is_dir():
                raise FileExistsError(f"{str(parent)!r} (on the path {str(out_dir)!r}) is a file, not a folder; name "
                                      "a folder to write the model into")
            break
    if out_dir.exists() and not out_dir.is_dir():
        raise FileExistsError(f"{out_dir} exists and is not a directory")
    if out_dir.exists() and any(out_dir.iterdir()) and not overwrite:
        raise FileExistsError(f"{out_dir} exists and is not empty; pass --overwrite to replace it")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    return out_dir


@contextlib.contextmanager
def _folder_made(folder: Path) -> Iterator[None]:
    """Make `folder` with its missing parents for the block; on an error in it, remove the folders this made,
    where empty (the innermost first), so a failed write leaves no trace."""
    made = [path for path in (folder, *folder.parents) if not path.exists()]  # the innermost first
    folder.mkdir(parents=True, exist_ok=True)
    try:
        yield
    except BaseException:
        for path in made:
            with contextlib.suppress(OSError):
                path.rmdir()
        raise


@contextlib.contextmanager
def atomic_dir(final: str | Path) -> Iterator[Path]:
    """Yield a temporary sibling folder of `final`; on success its files get the umask's modes (`publish_modes`)
    and it replaces `final`; on error it is removed, and a failure of the file system in the block, where the writer
    hid it (safetensors: "os error 27") or named no file, is raised as the OSError it is, naming `final`."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    for line in clean_abandoned(final):
        print(f"rft: note: an earlier write of {final} was killed: {line}", flush=True)
    staging = final.with_name(f".{final.name}.tmp-{uuid.uuid4().hex[:8]}")
    staging.mkdir()
    held = _flock(staging)  # for this process's life: a killed writer's folder is the one nobody holds
    try:
        try:
            yield staging
        except Exception as e:
            os_error = _file_system_error(e, final)
            if os_error is None:
                raise
            raise os_error from e
        publish_modes(staging)
        replace_dir(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        if held is not None:
            os.close(held)


def holder_record() -> dict:
    """What a lock file says of the process holding it (`RunLock`, `sole_writer`'s file lock): its pid, its host
    (`host_id`), when it started and its command line."""
    import sys
    import time

    return {"pid": os.getpid(), "host": host_id(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": " ".join(sys.argv)}


def holder_text(holder: dict) -> str:
    """A lock holder's record (`holder_record`) as a message names it; "another process" for an empty one."""
    if not holder:
        return "another process"
    return (f"pid {holder.get('pid', '?')} on {machine_of(holder.get('host'))}, started {holder.get('started', '?')}: "
            f"{holder.get('command', '?')}")


def _read_holder(path: Path) -> dict:
    import json

    try:
        holder = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


_KILLED_WRITE = r"^\.{name}\.(tmp-[0-9a-f]{{8}}|[0-9a-f]{{32}}\.tmp)$"
"""The temporary files of a killed writer of the file `name` (`.<name>.tmp-<8 hex>`; `.<name>.<32 hex>.tmp`, as
`write_parquet` named them before)."""


@contextlib.contextmanager
def sole_writer(path: str | Path, command: str, file_key: str | None = None) -> Iterator[None]:
    """Hold an exclusive flock on the output `path` for the block, so that a second command writing it at once is
    refused (`RftError`, naming `command`) instead of replacing the first one's output when it ends (`rft
    init-model`, `rft merge`: two into one new folder; `rft generate`: two into one file; the last one won).

    A folder (`file_key` None; made where missing) is locked itself; the writer's `atomic_dir` staging folder, which
    replaces it, is locked by it too, so the lock holds until the writer ends. On an error in the block the folders
    this made are removed, where empty. A folder that cannot be one (a file there or on its path) or a file system
    without flock: the block runs unlocked, and the writer's own checks say what is wrong.

    A file (`file_key`: the key that names it, which the refusal says to change) is locked through `.<name>.lock`
    beside it, which names the holder (`holder_record`) for the refusal and is removed when the block ends; under
    the lock the temporary files a killed writer left beside the file (`_KILLED_WRITE`) are removed, with a note."""
    import fcntl

    path = Path(os.path.normpath(path))
    if file_key is not None:
        with _file_lock(path, command, file_key):
            yield
        return
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        yield
        return
    with _folder_made(path):
        fd = os.open(path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise _writing_refused(command, path, None, "folder") from None
        except OSError:  # no flock on this file system: unlocked, as atomic_dir's writers are there
            pass
        try:
            yield
        finally:
            os.close(fd)


def _writing_refused(command: str, path: Path, holder: dict | None, other: str) -> Exception:
    from rft.errors import RftError

    who = f"{holder_text(holder)}; " if holder is not None else ""
    return RftError(f"{command}: another process is writing {str(path)!r} now ({who}the same command twice at once: "
                    f"the last to end would replace the first one's output); wait for it to end, or name another "
                    f"{other}")


@contextlib.contextmanager
def _file_lock(path: Path, command: str, key: str) -> Iterator[None]:
    """`sole_writer` of a file: an flock on `.<name>.lock` beside it, the holder written in it."""
    import fcntl
    import json

    parent = path.parent
    if next((p for p in (parent, *parent.parents) if p.exists()), parent).is_file():
        yield  # the writer's own checks name the file on the path
        return
    parent.mkdir(parents=True, exist_ok=True)
    lock = path.with_name(f".{path.name}.lock")
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise _writing_refused(command, path, _read_holder(lock), key) from None
        except OSError:  # no flock on this file system: unlocked
            os.close(fd)
            yield
            return
        try:  # the holder before removed the file between this one's open and its lock: lock the new one
            if os.path.samestat(os.fstat(fd), os.stat(lock)):
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(holder_record()) + "\n").encode(), 0)
        killed = re.compile(_KILLED_WRITE.format(name=re.escape(path.name)))
        for left in sorted(p for p in parent.iterdir() if killed.match(p.name) and p.is_file()):
            left.unlink(missing_ok=True)
            print(f"rft: note: an earlier write of {path} was killed: removed {left.name}, the file it was writing",
                  flush=True)
        yield
    finally:
        lock.unlink(missing_ok=True)  # while held: the next writer locks a new file (see the samestat above)
        os.close(fd)


@contextlib.contextmanager
def taken_in_turn(path: str | Path, waiting: str) -> Iterator[None]:
    """Hold an exclusive flock on the file `path` (made where missing) for the block, waiting while another process
    holds it: processes that would each make the same output make it one after another, so the later ones find it
    made (the kernel drops the lock of a killed holder). `waiting`: logged once when this process has to wait. A
    file system without flock: the block runs unlocked."""
    import fcntl
    import logging

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            logging.getLogger("rft").info(waiting)
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:  # no flock on this file system
            pass
        yield
    finally:
        os.close(fd)  # closing the descriptor drops the flock


ABANDONED_AFTER_S = 10.0
"""How long nothing in an unlocked staging folder must have changed before `clean_abandoned` takes it for a killed
writer's: a live one locks its folder the moment after making it."""


def _quiet_for(path: Path) -> float:
    """Seconds since `path` (a folder) or anything in it last changed."""
    import time

    try:
        return time.time() - _last_change(path)
    except OSError:  # removed meanwhile
        return 0.0


def _flock(folder: Path) -> int | None:
    """An open descriptor of `folder` holding an exclusive flock on it (the kernel drops it when the process dies);
    None where another process holds one, or the file system has none."""
    import fcntl

    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def clean_abandoned(final: str | Path) -> list[str]:
    """Remove what writers of `final` (`atomic_dir`) that were killed left beside it, outside a run folder too
    (`rft init-model`, `rft merge`: a model-sized hidden folder each, which nothing removed): a staging folder
    `.<name>.tmp-*` no process holds and nothing changed in for ABANDONED_AFTER_S (a live writer holds an flock on
    its own; one nobody can lock, as on a file system without flock, is left alone), and a `.<name>.old-*` (the previous `final`, moved aside by `replace_dir`):
    removed where `final` exists, put back where a kill between the two renames left it missing. Returns what was
    done, one line each."""
    final = Path(final)
    done: list[str] = []
    try:
        siblings = sorted(final.parent.iterdir())
    except OSError:
        return done
    live = False
    for path in siblings:
        m = _STALE.match(path.name)
        if m is None or m.group("name") != final.name or m.group("kind") != "tmp" or not path.is_dir() \
                or path.is_symlink():
            continue
        fd = _flock(path)
        if fd is None or _quiet_for(path) < ABANDONED_AFTER_S:  # its writer runs (or no flock here: it may), or
            live = True                                          # has made it and is about to lock it
            if fd is not None:
                os.close(fd)
            continue
        try:
            shutil.rmtree(path, ignore_errors=True)
        finally:
            os.close(fd)
        done.append(f"removed {path}, the folder it was writing")
    for path in siblings:
        m = _STALE.match(path.name)
        if m is None or m.group("name") != final.name or m.group("kind") != "old" or not path.exists():
            continue
        if not final.exists() and not live:
            os.replace(path, final)
            done.append(f"restored {final} from {path.name}")
        elif final.exists():
            _remove(path)
            done.append(f"removed {path}, the earlier {final.name} it was replacing")
    return done


@contextlib.contextmanager
def held_scratch(final: str | Path) -> Iterator[Path]:
    """Yield a new folder beside `final`, named as `atomic_dir`'s staging folder (`.<name>.tmp-<8 hex>`, mode 0700)
    and held as it is (an flock, for this process's life), and remove it after the block: scratch space that nothing
    publishes (a component run's run folder when no output keeps it). One a killed process left, which nobody holds,
    is removed by the next `clean_abandoned(final)`."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    scratch = final.with_name(f".{final.name}.tmp-{uuid.uuid4().hex[:8]}")
    scratch.mkdir(mode=0o700)
    held = _flock(scratch)
    try:
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if held is not None:
            os.close(held)


@contextlib.contextmanager
def staging_in(folder: str | Path) -> Iterator[Path]:
    """Yield a new temporary folder `.staging-<pid>@<host_tag>.tmp-<8 hex>` inside `folder` (made, with its parents,
    where missing), from which files are renamed into `folder` (one file system: each rename atomic); it is removed
    on exit, and on an error so are the folders this made, where empty. One a killed process left is removed by
    the next `clean_stale_staging` of `folder`."""
    folder = Path(folder)
    with _folder_made(folder):
        staging = folder / f".staging-{os.getpid()}@{host_tag()}.tmp-{uuid.uuid4().hex[:8]}"
        staging.mkdir()
        try:
            yield staging
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def differing_files(staging: Path, folder: Path, names: list[str]) -> tuple[list[str], list[str]]:
    """Of the files `names` in `staging`: those `folder` lacks, and those it holds with other bytes (or as a
    non-file). The rest `folder` holds byte for byte."""
    import filecmp

    new = [name for name in names if not (folder / name).exists()]
    differ = [name for name in names if name not in new
              and not ((folder / name).is_file() and filecmp.cmp(staging / name, folder / name, shallow=False))]
    return new, differ


def output_problem(path: str | Path, folder: bool) -> str | None:
    """Why `path` cannot take an output, known before any work: a folder output (`folder`) over an existing file, or
    over a non-empty folder that holds no Hugging Face model (a user's folder, which writing would replace); a file
    output over a folder; a parent that is a file. None when it can."""
    path = Path(path)
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                return f"{str(parent)!r} is a file, not a folder"
            break
    if folder and path.exists():
        if Path.cwd().resolve().is_relative_to(path.resolve()):  # '.' of a model folder: 'unexpected ValueError'
            return f"{str(path)!r} is this folder or one that holds it, which writing there would replace; name a new one"
        if not path.is_dir():
            return f"{str(path)!r} is a file; name a new folder (or a model folder to replace)"
        if any(path.iterdir()) and not (path / "config.json").is_file():
            return f"{str(path)!r} is a folder that holds no model, which writing there would replace; name a new one"
    if not folder and path.is_dir():
        return f"{str(path)!r} is a folder; name a file"
    return None
