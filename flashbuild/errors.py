"""Errors a user can cause and fix. The CLI prints them as one line and exits with .exit_code."""


def one_line(text: str) -> str:
    """`text` with every character a terminal would act on (a newline, a carriage return, an escape
    sequence, bytes that are not UTF-8) written as its Python escape: an error is one line, whatever
    file, key or value it quotes."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class FlashbuildError(Exception):
    """Base class: the message names what was asked, what exists, and the command that fixes it.
    It is always one line (one_line): the values it quotes come from users' files and flags."""

    exit_code = 1

    def __str__(self) -> str:
        return one_line(super().__str__())


class SelectionError(FlashbuildError):
    """A bad selection or flag: a usage error (exit 2)."""

    exit_code = 2


class BuildError(FlashbuildError):
    """A build that could not finish: missing tools, compile errors, no CUDA torch (exit 1)."""

    exit_code = 1


class ExtensionImportError(FlashbuildError, ImportError):
    """A build that linked but does not import (an undefined symbol: a library or object the link
    left out). An ImportError still, for code that catches those; the CLI prints one line (exit 1)."""

    exit_code = 1


class VariantNotBuiltError(FlashbuildError, RuntimeError):
    """Raised by a built extension (kernels/binding) when a call needs a variant the build does not
    hold; the message names the variant, what the build holds, and the flashbuild command that adds it."""

    exit_code = 1


class InvalidIndexError(FlashbuildError, ValueError):
    """Raised by a built extension (kernels/binding) for an index value its kernels found out of range on
    the device (cache_seqlens, cache_batch_idx, cache_leftpad, block_table, cu_seqlens): at the start of the
    next call on that device, or by check_errors(). The message names the argument, the row and the value."""

    exit_code = 2


class NoGpuError(FlashbuildError):
    """A command that runs kernels (test, bench) on a machine where torch sees no CUDA device (exit 2)."""

    exit_code = 2


class ResultsFormatError(FlashbuildError):
    """A results file (e.g. bench --compare OLD.json) that is not what flashbuild wrote (exit 2)."""

    exit_code = 2


class CheckFailedError(FlashbuildError):
    """`flashbuild test` found a kernel that does not meet the correctness standard (exit 1)."""

    exit_code = 1
