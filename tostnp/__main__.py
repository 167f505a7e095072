"""Command line: ``python -m tostnp <command> --help`` (or ``tostnp``, or ``python3 run.py``).

Each command lives in its own module, which provides ``add_arguments(parser)`` and
``run(args) -> int`` (the exit status).
"""
from __future__ import annotations

import argparse
import importlib
import sys

# command -> (module, one-line help)
COMMANDS = {
    "verify": ("tostnp.cli.verify_command", "check every identity of the derivation numerically (float64)"),
    "train": ("tostnp.cli.train_command", "train a ToST vision model or language model"),
    "evaluate": ("tostnp.cli.evaluate_command", "evaluate a saved checkpoint"),
    "sample": ("tostnp.cli.sample_command", "generate text from a language-model checkpoint"),
    "figures": ("tostnp.cli.figures_command", "interpretability figures from a vision checkpoint"),
    "convert": ("tostnp.cli.convert_command",
                "exchange weights with the published PyTorch ToST (.safetensors)"),
    "bench": ("tostnp.cli.bench_command", "benchmark TSSA against softmax and linear attention"),
    "exercises": ("tostnp.cli.exercises_command", "exercise notebooks: start, check, build, grade"),
    "experiment": ("tostnp.cli.experiment_command",
                   "run an experiment that answers the reviewers (mixers compared, over seeds)"),
}


class _Parser(argparse.ArgumentParser):
    """Bad options: one line ``error: ...`` naming the option, exit 2 (no usage dump)."""

    def error(self, message):
        self.exit(2, f"error: {message} (see: {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from .cli.options import how_to_run
    prog = how_to_run()        # python3 run.py / tostnp / .venv/bin/python -m tostnp, as started
    parser = _Parser(
        prog=prog,
        description="tostnp: the Token Statistics Transformer from scratch, derived and verified.")
    sub = parser.add_subparsers(dest="command", metavar="command")
    sub.required = True
    for name, (modname, help_) in COMMANDS.items():
        mod = importlib.import_module(modname)
        # the examples in a command's docstring are shown the way this process was started
        doc = (mod.__doc__ or help_).strip().replace("python -m tostnp", prog)
        p = sub.add_parser(name, help=help_, description=doc,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv=None) -> int:
    """Run a command. Expected failures print one line ``error: ...`` (never a traceback):
    bad input, files, checkpoints, a run directory in use and sizes that do not fit in memory
    exit 2; a diverged training run exits 1; SIGINT/SIGTERM
    during training save a checkpoint and exit 130/143."""
    _output_any_locale()
    try:
        args = build_parser().parse_args(argv)
    except KeyboardInterrupt:
        from .cli.options import how_to_run
        given = list(sys.argv[1:] if argv is None else argv)
        print(f"interrupted; start again with: {how_to_run(*given)}", file=sys.stderr)
        return _interrupted_exit(130)
    from .train.loop import TrainingInterrupted, TrainingDiverged
    from .backend.budget import memory_limit
    try:
        with memory_limit(getattr(args, "max_memory_gb", None)):
            return int(args._run(args) or 0)
    except TrainingInterrupted as e:
        from .cli.options import how_to_run
        cmd = how_to_run(args.command, getattr(args, "model", "") or "", "--out", e.out_dir,
                         "--resume")
        print(f"interrupted: {e}; resume with: {cmd}", file=sys.stderr)
        return e.exit_code
    except TrainingDiverged as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except (OSError, ValueError, TypeError, KeyError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"error: {msg}", file=sys.stderr)
        return 2
    except MemoryError:       # an estimate fell short: still one line, never a traceback
        print("error: out of memory (an allocation failed; lower the sizes, or free memory)",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"interrupted; {_again(args, argv)}", file=sys.stderr)
        return _interrupted_exit(130)
    finally:
        from .backend.kernels import close_pool
        close_pool()              # no thread of the fast path's pool left to hold up the exit


def _output_any_locale() -> None:
    """Output that works in any locale: in an ASCII one (LANG=C, some CI runners and Windows
    consoles) a character such as '±' is written as '\\xb1' instead of raising
    UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError, OSError):   # not a text stream of io's: leave it
            pass


def _interrupted_exit(code: int) -> int:
    """After a Ctrl-C outside the training loop's own handling. It may have landed inside a C
    extension's import (matplotlib's, imported to draw the figures): the interpreter's own
    shutdown can then crash in that half-initialised module ("Fatal Python error:
    PyThreadState_Get ... finalizing", seen once in CI). As a program, leave at once, output
    flushed: by now every file tostnp writes is complete or cleaned up (atomic writes finish or
    remove their temporaries in ``finally`` blocks) and tostnp registers no exit handlers. When
    :func:`main` is called from Python (tests) rather than through :func:`cli`, return the
    code as usual."""
    import os
    if _PROGRAM:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
    return code


def _again(args, argv) -> str:
    """How to go on after Ctrl-C outside the training loop's own handling (a second Ctrl-C, or
    one before training started): resume a run that has a checkpoint, else start again."""
    import os
    from .cli.options import how_to_run
    out = getattr(args, "out", None)
    if args.command == "train" and out and os.path.isfile(os.path.join(out, "checkpoint.npz")) \
            and not getattr(args, "seeds", None):
        return "resume with: " + how_to_run("train", args.model, "--out", out, "--resume")
    given = list(sys.argv[1:] if argv is None else argv)
    return "start again with: " + how_to_run(*given)


_PROGRAM = False          # set by cli(): this process is the command line itself


def cli() -> int:
    """The ``tostnp`` command and ``python -m tostnp``: :func:`main` as the program itself
    (an interrupt may then end the process at once, :func:`_interrupted_exit`)."""
    global _PROGRAM
    _PROGRAM = True
    return main()


if __name__ == "__main__":
    sys.exit(cli())
