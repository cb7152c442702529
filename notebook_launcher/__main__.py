"""`python -m notebook_launcher ...` is the `notebook-launcher` command."""

from notebook_launcher.cli import run

if __name__ == "__main__":
    run()
