"""`python -m flashbuild ...` runs the same CLI as `flashbuild ...`."""

try:
    from .cli import main
except KeyboardInterrupt:  # Ctrl-C while the CLI's modules import: one line, not a traceback
    import sys

    print("flashbuild: interrupted (SIGINT) before it started anything", file=sys.stderr)
    sys.exit(130)

main()
