"""`notebook-launcher launch | config | env | test | estimate-memory | merge-weights`: the command line.

main.py dispatches the commands; flags.py holds every flag (Accelerate's names); resolve.py turns
flags + config file + detected hardware into a LaunchConfig; torchrun.py runs it through
torch.distributed.run with the env contract; bootstrap.py is what each torchrun worker executes
before the user's script; questionnaire.py is `config`, report.py is `env`, selftest.py is `test`, estimate.py is
`estimate-memory` (on memory_estimate.py) and merge_weights.py is `merge-weights`.

Imports: config, hardware, errors, network, memory_estimate. Never widgets, launch or the runtime (workers reach the
runtime through the env contract only).
"""

from .main import main, run

__all__ = ["main", "run"]
