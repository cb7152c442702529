"""Helpers for the browser tests: an isolated JupyterLab server and Playwright-driven Chromium."""
