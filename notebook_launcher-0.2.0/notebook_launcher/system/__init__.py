"""What this machine and its OS are: CPUs and GPUs, memory, ports and interfaces, the rendezvous
store it hosts, the launchers' own signals, and a scheduler's (SLURM's) variables. Torch-free at
import; every room may import it."""
