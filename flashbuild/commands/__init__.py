"""The commands of the CLI, one module per concern; flashbuild/cli.py is the group that holds them
(and the last line of defence that turns every error into one line)."""
