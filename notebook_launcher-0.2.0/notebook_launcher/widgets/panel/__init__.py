"""ConfigPanel: the form that builds a launch config (config_panel.py), its sections, fields,
choices, checks, the mesh control and the where-to-run section."""
