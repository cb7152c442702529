"""Every name and number the launchers and the workers agree on, in one place: where a one-machine
launch meets, the default rendezvous port, and each environment variable notebook_launcher itself
defines. torch's variables (RANK, MASTER_PORT, TORCHELASTIC_*) and Accelerate's (ACCELERATE_*) keep
their owners' names and are written where the env contract is built (config/env.py).

Imports nothing, so every room may use it (system/ included: tests/test_architecture.py).
"""

# ---- addresses and ports
LOOPBACK = "127.0.0.1"  # where a one-machine launch's ranks and store meet
ALL_INTERFACES = ""  # a store that listens on every interface (bind address "")
DEFAULT_PORT = 29500  # torch's and Accelerate's rendezvous port, used over several machines when unset

# ---- the launch, from the launcher to its workers
CONFIG_ENV = "NOTEBOOK_LAUNCHER_LAUNCH_CONFIG"  # the LaunchConfig as JSON (config/env.py)
RUN_DIR_ENV = "NOTEBOOK_LAUNCHER_RUN_DIR"  # the run's private directory (system/private_files.py)
FILE_RENDEZVOUS_ENV = "NOTEBOOK_LAUNCHER_RENDEZVOUS_FILE"  # "1": the ranks meet in the run's file
ACTIVITY_FILE_ENV = "NOTEBOOK_LAUNCHER_ACTIVITY_FILE"  # where each rank keeps its activity record
GRACEFUL_PREEMPTION_ENV = "NOTEBOOK_LAUNCHER_GRACEFUL_PREEMPTION"  # workers finish the step on SIGTERM
REPORT_ENV = "NOTEBOOK_LAUNCHER_REPORT_PERFORMANCE"  # the folder where each rank leaves its step figures
LAUNCHER_PID_ENV = "NOTEBOOK_LAUNCHER_LAUNCHER_PID"  # the CLI's process running torchrun

# ---- the user's settings
CONFIG_FILE_ENV = "NOTEBOOK_LAUNCHER_CONFIG_FILE"  # the default config file's path
MEMORY_LIMIT_ENV = "NOTEBOOK_LAUNCHER_MEMORY_LIMIT"  # bytes (or 8G, 512M) to warn against
MMAP_THRESHOLD_ENV = "NOTEBOOK_LAUNCHER_MMAP_THRESHOLD"  # glibc's mmap threshold in sharded workers
MEMORY_INTERVAL_ENV = "NOTEBOOK_LAUNCHER_MEMORY_INTERVAL"  # seconds between a worker's memory samples
RENDEZVOUS_STALL_ENV = "NOTEBOOK_LAUNCHER_RENDEZVOUS_STALL_SECONDS"  # a process group that never forms
SLURM_OWNER_TIMEOUT_ENV = "NOTEBOOK_LAUNCHER_SLURM_OWNER_TIMEOUT"  # seconds without the kernel's beat
SLURM_GRACE_ENV = "NOTEBOOK_LAUNCHER_SLURM_GRACE_SECONDS"  # SLURM's warning before a time limit
PREEMPTION_CHECK_ENV = "NOTEBOOK_LAUNCHER_PREEMPTION_CHECK_SECONDS"  # how often ranks agree on a stop
CHECKPOINT_WAIT_ENV = "NOTEBOOK_LAUNCHER_CHECKPOINT_WAIT_SECONDS"  # the end of a run waits for a save
CHECKPOINT_PROGRESS_ENV = "NOTEBOOK_LAUNCHER_CHECKPOINT_PROGRESS_SECONDS"  # how often a write reports bytes
CHECKPOINT_AGREE_ENV = "NOTEBOOK_LAUNCHER_CHECKPOINT_AGREE_SECONDS"  # how long ranks wait to agree a publish
