"""What happens when a run goes wrong: restarts, the launcher's own signals passed to the ranks,
the progress clock, hang reports, and a process group that never forms. Used by the supervisor and
notebook.py."""
