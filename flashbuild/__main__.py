"""`python -m flashbuild ...` runs the same CLI as `flashbuild ...`."""

from .cli import main

main()
