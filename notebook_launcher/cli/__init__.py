"""`notebook-launcher launch | config | env | test`: the command line, on torch.distributed.run.

main.py dispatches the commands; flags.py holds every flag (Accelerate's names); resolve.py turns
flags + config file + detected hardware into a LaunchConfig; torchrun.py runs it through
torch.distributed.run with the env contract; bootstrap.py is what each torchrun worker executes
before the user's script; questionnaire.py is `config`, report.py is `env`, selftest.py is `test`.

Imports: config, hardware, errors, network. Never widgets, launch or the runtime (workers reach the
runtime through the env contract only).
"""

from .main import main

__all__ = ["main"]
