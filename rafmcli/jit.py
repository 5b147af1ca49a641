"""Where numba keeps rafm's compiled kernels (``cache=True``).

numba caches beside the source (``__pycache__``), else in ``~/.cache/numba``,
and raises at import when it can write neither (a read-only install with an
unwritable HOME). rafm then points NUMBA_CACHE_DIR at a private directory in
the temporary directory, with one warning, before any kernel module loads.
:func:`preload` imports kernel modules on a thread while a command checks its inputs.
"""

import importlib
import os
import stat
import sys
import tempfile
import threading

_NUMBA_MODULE_DIRS = ("io", "kernels")  # the subpackages holding @njit(cache=True) functions
_PRELOADS = []  # the threads preload started


def _writable(path):
    """What numba checks: the directory can be made and a file created in it."""
    try:
        os.makedirs(path, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError:
        return False
    return True


def _private_dir():
    """$TMPDIR/rafm-numba-UID, reused across runs if it is ours alone, else a fresh one."""
    path = os.path.join(tempfile.gettempdir(), f"rafm-numba-{os.getuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return tempfile.mkdtemp(prefix="rafm-numba-")
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077 or not _writable(path):
        return tempfile.mkdtemp(prefix="rafm-numba-")
    return path


def ensure_cache_dir(warn):
    """Make sure numba can cache; otherwise set NUMBA_CACHE_DIR and call ``warn(message)``."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return
    package = os.path.dirname(os.path.abspath(__file__))
    if all(_writable(os.path.join(package, sub, "__pycache__")) for sub in _NUMBA_MODULE_DIRS):
        return
    user = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "numba")
    if _writable(user):
        return
    try:
        path = _private_dir()
    except OSError as exc:
        warn(f"numba cannot cache compiled kernels anywhere ({exc.strerror or exc}); set NUMBA_CACHE_DIR")
        return
    os.environ["NUMBA_CACHE_DIR"] = path
    if "numba" in sys.modules:  # already imported: numba read its configuration then
        sys.modules["numba"].config.CACHE_DIR = path
    warn(f"numba cannot cache compiled kernels beside rafm or in {user}; using {path} "
         f"(set NUMBA_CACHE_DIR to choose)")


def preload(*modules):
    """Import the kernel ``modules`` (numba's own start, 0.3-0.5 s, among them) on a thread
    while the caller goes on with work that releases the GIL: a model's or a cached
    input's CRC-32 and numpy checks. Returns a function that waits for the imports.

    The thread is a daemon, waited for through an event rather than joined: a command
    that fails or is interrupted before it waits exits at once, not after numba's start
    (a join that a signal interrupts would also forget the thread). An import that
    fails there is left to the caller's own import, which runs the module again."""
    done = threading.Event()

    def run():
        try:
            for name in modules:
                importlib.import_module(name)
        except Exception:  # noqa: BLE001  (the caller's import reports it)
            pass
        finally:
            done.set()

    thread = threading.Thread(target=run, name="rafm-preload", daemon=True)
    _PRELOADS.append(thread)
    thread.start()
    return done.wait


def preloading():
    """Whether a :func:`preload` thread is still importing. The interpreter's shutdown must not
    run beside it: tearing modules down under numba's import crashed the process (exit 139 in
    about one run in eight of a predict that failed early, on one core)."""
    return any(thread.is_alive() for thread in _PRELOADS)
