"""The Accelerator: the facade (facade.py), its mixins (*_api.py, views.py) and the types
its constructor takes (settings, configurations, kwargs, plugins)."""
