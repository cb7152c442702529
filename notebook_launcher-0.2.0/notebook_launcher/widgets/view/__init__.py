"""RunView: the live view of a run (run_view.py) over its state (run_state.py): per-rank panes,
chart, hang report, the steps tab, colours of tracebacks, and the comm pump that keeps Stop clickable."""
