"""The `rafm` command: one module per subcommand, registered on the group here.

Signals are handled here, once for every command (see :mod:`rafmcli.signals`).
Heavy modules (numba kernels, the reader) are imported inside command bodies
so that `rafm --help` starts fast and compiles nothing. numba's own start
(see :class:`LeanNumba`) is kept short too.
"""

import contextlib
import os
import re
import sys

import click

from rafmcli import __version__


class _LoadedThen:
    """A module's loader, then ``then(module)`` once the module has run."""

    def __init__(self, loader, then):
        self.loader = loader
        self.then = then

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        self.then(module)


def _extensions_done(entrypoints):
    """numba.core.entrypoints: numba's extensions are marked as initialised."""
    entrypoints._already_initialized = True


LEAN_LOADS_NUMBA = ((0, 58), (0, 68))  # numba versions whose cached loads were read and tested lean


def _cached_loads_lean(caching):
    """numba.core.caching: loading a cached kernel starts numba's runtime only, where numba's
    ``Cache.load_overload`` would install every registry first. numba versions outside
    LEAN_LOADS_NUMBA (or without a numeric version) keep numba's own load."""
    version = tuple(sys.modules["numba"].version_info[:2])
    if not all(isinstance(part, int) for part in version):
        return
    low, high = LEAN_LOADS_NUMBA
    if low <= version <= high:
        caching.Cache.load_overload = _load_overload


def _load_overload(self, sig, target_context):
    """numba's ``Cache.load_overload`` without ``target_context.refresh()``: numba's runtime
    (NRT) is started, then the cached kernel is rebuilt as numba rebuilds it."""
    from numba.core.runtime import rtsys

    rtsys.initialize(target_context)
    with self._guard_against_spurious_io_errors():
        return self._load_overload(sig, target_context)


def _finalize_held(codegen):
    """numba.core.codegen: a signal waits for a kernel's machine code (rafmcli.signals).

    While numba finalizes a kernel, compiled or loaded from the cache, LLVM calls Python
    back through ctypes to fetch or store its object code, and ctypes drops an exception
    raised in a callback: Terminated raised there left a kernel without its code, which
    crashed (SIGSEGV) when called. Held, the signal ends the command just after, a few
    milliseconds for a cached kernel, at most a few seconds for a compile.
    """
    from rafmcli.signals import hold_through

    hold_through(getattr(codegen, "JITCodeLibrary", None), "_finalize_specific")


def _caching_patched(caching):
    """numba.core.caching: cached loads stay lean, and a signal waits for a kernel's cache
    files to be written: numba removes its temporary file on an Exception only, so
    Terminated (a BaseException) left one in the cache directory."""
    from rafmcli.signals import hold_through

    _cached_loads_lean(caching)
    hold_through(caching.Cache, "save_overload")


_AFTER_LOADING = {"numba.core.entrypoints": _extensions_done, "numba.core.caching": _caching_patched,
                  "numba.core.codegen": _finalize_held}


class LeanNumba:
    """An import hook that keeps numba's start short (0.1-0.5 s of every command
    that runs a kernel), leaving out what no rafm kernel uses:

    * scipy.linalg, which numba.np.linalg imports the first time numba compiles
      or loads a kernel (0.3 s or more) only to offer BLAS to jitted ``np.dot``;
    * cffi, which numba.core.typing.cffi_utils imports then to type cffi
      functions (pycparser builds its lexer's tables: 0.03-0.07 s);
    * numba extensions: ``numba.core.entrypoints.init_all`` reads the entry points
      of every installed distribution (0.05-0.15 s here) to run third-party
      ``numba_extensions`` hooks; rafm's kernels use none, so numba.core.entrypoints
      is loaded as done;
    * numba's typing and lowering registries when a kernel only loads from the cache:
      numba's ``Cache.load_overload`` installs them all first (importing some sixty
      numba modules: about 0.1 s), but they serve compiling, and a compile installs them
      itself. A cached kernel is machine code that needs numba's runtime (NRT, started
      here), the C symbols numba registers when it is imported, and what numba's own
      rebuild of a cached kernel sets up (the modules its environment names; rafm has no
      ``parallel=True`` kernel, whose rebuild would also start numba's thread pool).
      Only for the numba versions in LEAN_LOADS_NUMBA.

    Only those imports, made from those numba modules, are refused; any other
    import of scipy or cffi works as usual. Where ``rafm``'s group never ran (the API,
    a test that does not call it) nothing changes; in a process that ran it, numba's
    cached loads stay lean.
    """

    _REFUSED = {"scipy.linalg": "numba.np.linalg", "cffi": "numba.core.typing.cffi_utils"}

    def find_spec(self, name, path=None, target=None):
        if name in self._REFUSED:
            frame = sys._getframe(1)
            while frame is not None:
                if frame.f_globals.get("__name__") == self._REFUSED[name]:
                    raise ImportError(f"rafm runs numba without {name}")
                frame = frame.f_back
        elif name in _AFTER_LOADING:
            from importlib.machinery import PathFinder

            spec = PathFinder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _LoadedThen(spec.loader, _AFTER_LOADING[name])
            return spec
        return None

    @classmethod
    def install(cls):
        if not any(isinstance(hook, cls) for hook in sys.meta_path):
            sys.meta_path.insert(0, cls())


def _ignore(unraisable):
    """sys.unraisablehook that shows nothing."""


def _exit_now(code):
    """End the process with SystemExit ``code`` without the interpreter's shutdown (what
    :func:`rafmcli.jit.preloading` asks for): standard output and error flushed, then
    os._exit. Every ``finally`` of the command has run; only atexit hooks are skipped."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is sys.stderr and code is not None and not isinstance(code, int):
                print(code, file=stream)
            stream.flush()
        except (AttributeError, OSError, ValueError):  # None (started with it closed), a closed pipe or stream
            pass
    os._exit(0 if code is None else code if isinstance(code, int) else 1)


@contextlib.contextmanager
def _usage_in_one_line():
    """A bad option, argument or command is one line, ``Error: what``, exit 2, as every other bad
    input: click's usage and help hint before it made four."""
    try:
        yield
    except click.UsageError as exc:
        if isinstance(exc, getattr(click.exceptions, "NoArgsIsHelpError", ())):  # `rafm` alone: the help
            raise
        one = click.ClickException(re.sub(r"\s*\n\s*", " ", exc.format_message()))  # click's lists of choices
        one.exit_code = exc.exit_code
        raise one from None


class RafmGroup(click.Group):
    """The command group, run with SIGINT, SIGTERM and SIGHUP handled (rafmcli.signals):
    every temporary file is removed and the exit status is 128 + the signal number.
    Running out of memory is one line and exit 2, not a traceback. numba gets a
    cache directory it can write (rafmcli.jit)."""

    signalled = False  # a signal ended the command

    def __call__(self, *args, **kwargs):
        """The process's command (:mod:`rafmcli.entry` calls it for the ``rafm`` script and
        ``python -m rafmcli``); the process ends when it returns (click exits). Every object
        left is then moved out of the collector's reach (gc.freeze): the interpreter's
        collections while it shuts down would otherwise walk numba's hundreds of thousands
        of objects, 0.1-0.3 s of every command. After a signal ended the command, nothing Python
        drops on the way out (llvmlite's half-detached objects at shutdown) is printed. Tests
        call :meth:`main` and are not affected."""
        import gc

        from rafmcli import jit

        try:
            return super().__call__(*args, **kwargs)
        except SystemExit as exc:
            if jit.preloading():
                _exit_now(exc.code)
            raise
        finally:
            if self.signalled:
                sys.unraisablehook = _ignore
            gc.freeze()

    def make_context(self, *args, **kwargs):
        with _usage_in_one_line():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx):
        with _usage_in_one_line():
            return super().invoke(ctx)

    def main(self, *args, **kwargs):
        from rafmcli import jit, signals
        from rafmcli.errors import Terminated

        jit.ensure_cache_dir(lambda message: click.echo(f"rafm: warning: {message}", err=True))
        LeanNumba.install()
        try:
            with signals.handled():
                return super().main(*args, **kwargs)
        except Terminated as exc:
            self.signalled = True
            sys.exit(128 + exc.signum)
        except MemoryError as exc:
            click.echo(f"Error: out of memory ({str(exc) or 'no detail'})", err=True)
            sys.exit(2)


@click.group(cls=RafmGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rafm")
def main():
    """Rank-aware factorization machines (RaFM), FM and DiFacto.

    Reads libSVM/libFM text files (label idx:value ...), trains a model,
    writes a model file and predictions. See `rafm COMMAND --help` and
    `man rafm`.
    """


from rafmcli.cli.dump import dump  # noqa: E402  (commands register on main)
from rafmcli.cli.embed import embed  # noqa: E402
from rafmcli.cli.libfm import libfm  # noqa: E402
from rafmcli.cli.plot import plot  # noqa: E402
from rafmcli.cli.predict import predict  # noqa: E402
from rafmcli.cli.recommend import recommend  # noqa: E402
from rafmcli.cli.similar import similar  # noqa: E402
from rafmcli.cli.stats import stats  # noqa: E402
from rafmcli.cli.train import train  # noqa: E402
from rafmcli.cli.tune import tune  # noqa: E402

for _command in (train, tune, predict, recommend, embed, similar, stats, dump, libfm, plot):
    main.add_command(_command)
