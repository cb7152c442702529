"""What a run costs, torch-free: memory estimated before it starts (memory_estimate.py: bytes per
rank per strategy, from a model built on the meta device) and time measured while it runs
(performance.py: each rank's step breakdown and the straggler verdict). The public face, launch/
and the CLI import it; it imports only system/, config and errors."""
