"""The kernel's side of a local run: the select loop over the workers' pipes (supervisor), the
worker processes as OS processes, what they send (inbox), their stacks and memory. launch/, clusters/
and interactive/ import it."""
