"""Which world this process is in and its state: launcher/scheduler variables (environments),
process state and Accelerate's PartialState/AcceleratorState, preemption, seeds and RNG
sync, debug mode and the collective record the launcher reads."""
