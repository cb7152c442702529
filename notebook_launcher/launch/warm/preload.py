"""What the warm pool's server (pool.py) loads once, so that every worker forked from it starts warm:
the modules a launch needs, and the one-time work of the first LaunchConfig.

Imported only there (it is the server's preload list); importing it does the work, on purpose.
"""

import cloudpickle  # noqa: F401
import torch  # noqa: F401
import torch.distributed  # noqa: F401
import torch.nn.parallel  # noqa: F401

import notebook_launcher.launch.worker.standby  # noqa: F401
import notebook_launcher.runtime  # noqa: F401
from notebook_launcher.config import LaunchConfig

try:
    import torch._dynamo  # noqa: F401  (DDP's first construction imports it: ~1 s)
except Exception:  # noqa: BLE001 - a worker that needs it reports the real error
    pass

LaunchConfig()  # resolves the config classes' type hints once (most of a config's validation time)

# Each worker reseeds its generators from fresh entropy at its launch (worker/standby.py adopt()); the
# first call costs once per process what a warm worker should not pay: numpy.random is imported
# lazily by numpy (~5 ms). Warmed here, reseeded there.
try:
    import numpy.random  # noqa: F401

    numpy.random.seed()
except ImportError:  # numpy is torch's optional dependency
    pass
