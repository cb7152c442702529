"""`python -m notebook_launcher ...` is the `notebook-launcher` command."""

from notebook_launcher.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
